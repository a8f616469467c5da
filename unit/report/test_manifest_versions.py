"""The manifest's package list reads each version off its ``METADATA`` header block (issue 26: the full e-mail
parse of 16 ``METADATA`` files was ~20 ms of every session's start); it must say exactly what
``importlib.metadata.version`` says, and ``None`` for a package that is not installed."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from pytest_sskj.report import manifest


def _expected(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_every_listed_package_has_the_version_importlib_metadata_reports() -> None:
    seen = manifest._versions()
    expected = {name: _expected(name) for name in seen}
    assert seen == expected, f"expected importlib.metadata's versions {expected}, saw {seen}"
    assert seen["pytest"] == pytest.__version__, f"pytest's own version {pytest.__version__}, saw {seen['pytest']}"


def test_a_package_that_is_not_installed_is_none() -> None:
    assert manifest._installed_version("no-such-distribution-sskj") is None


def test_a_metadata_file_without_a_version_header_falls_back_to_the_full_parse(tmp_path: Path) -> None:
    info = tmp_path / "demo_pkg-1.2.3.dist-info"
    info.mkdir()
    # a header block without Version: (it comes after a blank line, i.e. in the body): the full parse decides
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\n\nVersion: 9.9.9 (in the body)\n")
    dist = metadata.PathDistribution(info)
    seen = manifest._version_of(dist)
    md = dist.metadata  # not dist.version: its implicit None warns on Python 3.12
    full = md["Version"] if "Version" in md else None
    assert seen == full, f"the full parse's answer {full!r}, saw {seen!r}"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.2.3\n\nlong description\n")
    assert manifest._version_of(metadata.PathDistribution(info)) == "1.2.3"
