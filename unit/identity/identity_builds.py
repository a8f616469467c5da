"""Installed builds for identity tests: a ``site-packages`` folder with the packages an SGLang node carries
(``sglang`` with its wheel metadata and ``direct_url.json``, ``flashinfer`` with ``_build_meta.py``,
``sgl_kernel``, ``torch`` with its ``version.py``) and a ``python`` wrapper that puts it first on the path.

The packages are the real layout of those distributions' version carriers, nothing else (they are never
imported by the probe).  Two builds that differ in one item stand for two nodes with different installs.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FakeBuild", "make_build", "python_switch"]


@dataclass(frozen=True)
class FakeBuild:
    root: Path
    site: Path
    python: Path
    """An executable that runs this interpreter with ``site`` first on ``sys.path``."""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def make_build(
    root: Path,
    *,
    sglang: str = "0.5.23",
    sglang_commit: str = "593b1a9c0ffee0ddba11ad5eed5eed5eed5eed5e",
    flashinfer_commit: str = "b525c513fef7",
    torch: str = "2.11.0+cu130",
    cuda: str = "13.0",
) -> FakeBuild:
    """Lay out one build under ``root`` and return it."""
    sg = "sglang"
    site = root / "lib" / "site-packages"
    _write(site / sg / "__init__.py", f"from {sg}.version import __version__\n")
    _write(site / sg / "version.py", f'__version__ = "{sglang}"\n')
    info = site / f"{sg}-{sglang}.dist-info"
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {sg}\nVersion: {sglang}\n")
    _write(info / "RECORD", "")
    _write(
        info / "direct_url.json",
        json.dumps(
            {"url": "https://github.com/sgl-project/sglang", "vcs_info": {"vcs": "git", "commit_id": sglang_commit}}
        ),
    )
    _write(site / "flashinfer" / "__init__.py", '__version__ = "0.6.18"\n')
    _write(site / "flashinfer" / "_build_meta.py", f'__version__ = "0.6.18"\n__git_commit__ = "{flashinfer_commit}"\n')
    _write(site / "sgl_kernel" / "__init__.py", "")
    _write(site / "sgl_kernel" / "version.py", '__version__ = "0.4.1"\n')
    _write(site / "torch" / "__init__.py", "raise ImportError('never imported by the probe')\n")
    _write(
        site / "torch" / "version.py",
        f"__version__ = '{torch}'\ndebug = False\ncuda = '{cuda}'\n"
        "git_version = '1b2c3d4e5f60718293a4b5c6d7e8f90123456789'\n",
    )
    python = root / "bin" / "python"
    _write(python, f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return FakeBuild(root, site, python)


def python_switch(path: Path, by_address: dict[str, Path], default: Path) -> Path:
    """A ``python`` that runs a different build on each host, chosen by the host's IPv4 address (the nodes of
    network-namespace test hosts share one file system but not their addresses)."""
    cases = "".join(f'    *" {addr}/"*) exec {p} "$@" ;;\n' for addr, p in by_address.items())
    text = (
        "#!/bin/sh\n"
        'addrs=" $(ip -4 -o addr show 2>/dev/null | awk \'{print $4}\' | tr "\\n" " ")"\n'
        f'case "$addrs" in\n{cases}    *) exec {default} "$@" ;;\nesac\n'
    )
    _write(path, text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.sync()
    return path
