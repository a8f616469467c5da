# mypy: ignore-errors
# (run by the real sglang interpreter, whose torch/torchvision/sglang are not typed here)
"""Run by the real sglang interpreter (``SSKJ_TWIN_SGLANG_PYTHON``) for a stand-in rank: parse and resolve one argv.

Reads ``{"argv": [...]}`` on stdin, writes ``{"version", "resolved", "error"}``: sglang's own
``ServerArgs.add_cli_args`` -> ``parse_args`` -> ``from_cli_args`` -> ``resolve_once()`` inside
``override_platform`` (the users' RTX PRO 6000D, SM120) -> ``resolved_dict()``, with ``--device cuda``
appended, as ``unit/contracts/sglang_resolve.py`` does for the contract suite (same torchvision repair:
the PyPI torchvision wheel is CUDA-linked and cannot register its ops on a CPU torch).  Nothing of
pytest-sskj is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from typing import Any

PLATFORM = {
    "is_cuda": True,
    "is_sm120": True,
    "is_blackwell": True,
    "device_sm": 120,
    "device_capability": [12, 0],
    "has_flashinfer": True,
}


def _torchvision_repair() -> None:
    try:
        import torchvision.transforms
    except ModuleNotFoundError:
        return
    except RuntimeError as exc:
        if "does not exist" not in str(exc):
            raise
    else:
        return
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    declared: list[str] = []
    for _ in range(64):
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        try:
            import torchvision.transforms  # noqa: F401
        except RuntimeError as exc:
            m = re.search(r"operator torchvision::(\w+) does not exist", str(exc))
            if not m or m.group(1) in declared:
                raise
            lib.define(f"{m.group(1)}(Tensor[] args) -> Tensor")
            declared.append(m.group(1))
        else:
            break
    _torchvision_repair.lib = lib  # type: ignore[attr-defined]


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    return repr(v)


def main() -> int:
    argv = [*json.load(sys.stdin)["argv"], "--device", "cuda"]
    _torchvision_repair()
    import sglang
    from sglang.srt.runtime_context import override_platform
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    out = io.StringIO()
    resolved, error = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            sa = ServerArgs.from_cli_args(parser.parse_args(argv))
            with override_platform(**PLATFORM):
                sa.resolve_once()
            resolved = _jsonable(sa.resolved_dict())
        except (Exception, SystemExit) as exc:  # sglang's own refusal is the answer
            error = f"{type(exc).__name__}: {exc}"
    json.dump({"version": sglang.__version__, "resolved": resolved, "error": error}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
