# mypy: ignore-errors
# (run by the real sglang interpreter, whose torch/torchvision/sglang are not typed here)
"""Run with the interpreter that has the real ``sglang`` package: parse and resolve SGLang command lines.

The one resolver of pytest-sskj, used by the SGLang contract suite (``unit/contracts/test_sglang_contract.py``)
and by rank 0 of a stand-in rank (``pytest_sskj/twin/args.py``, interpreter ``SSKJ_TWIN_SGLANG_PYTHON``); both
run this file as a script (``python sglang_resolve.py``) with sglang's interpreter.  Reads one JSON object on
stdin::

    {"commands": [[argv...], ...], "platform": {"is_cuda": true, ...}, "append": ["--device", "cuda"]}

and writes one JSON object on stdout: the package version, its ``--moe-runner-backend`` choices
(``arg_groups/choices.py``), the parser's option strings, and per command either sglang's own
``resolved_dict()`` after ``ServerArgs.add_cli_args`` -> ``parse_args`` -> ``from_cli_args`` ->
``resolve_once()`` (inside ``override_platform(**platform)``: sglang's own way to say which machine the
arguments are for, here the users' GPU, :data:`PLATFORM`) or the error sglang raised, and the warnings it printed.

Nothing of pytest-sskj is imported here: this is sglang's parser and resolution, unaided (importing this module
imports nothing of sglang either; :func:`main` does).  One environment repair is made and reported: the PyPI
``torchvision`` wheel is CUDA-linked, so on a CPU torch its compiled ops cannot load and ``import torchvision``
fails registering fake kernels for them; their schemas are declared (no kernels) so the pure-Python transforms
that sglang's model configs import can load.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import warnings
from typing import Any

# the users' GPU (RTX PRO 6000 Blackwell, SM120), in sglang's own platform vocabulary
PLATFORM = {
    "is_cuda": True,
    "is_sm120": True,
    "is_blackwell": True,
    "device_sm": 120,
    "device_capability": [12, 0],
    "has_flashinfer": True,
}


def _torchvision_repair() -> list[str]:
    """Declare the schemas of torchvision ops that its CUDA-linked extension could not register."""
    try:
        import torchvision.transforms
    except ModuleNotFoundError:
        return []
    except RuntimeError as exc:
        if "does not exist" not in str(exc):
            raise
    else:
        return []
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
    _torchvision_repair.lib = lib  # type: ignore[attr-defined]  # keep the library alive
    return declared


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    return repr(v)


def _resolve(argv: list[str], platform: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.runtime_context import override_platform
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    out = io.StringIO()
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(out),
    ):
        warnings.simplefilter("always")
        try:
            ns = parser.parse_args(argv)
            sa = ServerArgs.from_cli_args(ns)
            with override_platform(**platform):
                sa.resolve_once()
            resolved = _jsonable(sa.resolved_dict())
            error = None
        except (Exception, SystemExit) as exc:  # sglang's own refusal is the answer
            resolved, error = None, f"{type(exc).__name__}: {exc}"
    messages = [str(w.message) for w in caught] + [line for line in out.getvalue().splitlines() if line.strip()]
    return {"argv": argv, "resolved": resolved, "error": error, "messages": messages}


def main() -> int:
    req = json.load(sys.stdin)
    repaired = _torchvision_repair()
    import sglang
    from sglang.srt.arg_groups import choices
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options = sorted({s for a in parser._actions for s in a.option_strings})
    results = [_resolve([*argv, *req.get("append", [])], req.get("platform", {})) for argv in req["commands"]]
    json.dump(
        {
            "version": sglang.__version__,
            "package_dir": sglang.__path__[0],
            "moe_runner_backend_choices": list(choices.MOE_RUNNER_BACKEND_CHOICES),
            "options": options,
            "torchvision_ops_declared": repaired,
            "results": results,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
