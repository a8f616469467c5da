"""Secret server arguments never reach a process listing: :func:`hide_secret_args` rewrites a local launch.

A local server's ``argv`` is readable by every user (``ps``, ``/proc/<pid>/cmdline``) for the whole run, so
a command with secret arguments (``--hf-token X``, ``--api-key=X``; recognised by
:func:`pytest_sskj.redact.secret_arg_values`) is started as

    <python> -c <BOOTSTRAP> <private file> <argv with the secrets redacted>

where the private file (mode 0600, in a 0700 directory next to the server's log) holds the real argv; the
bootstrap reads it, deletes it and runs the module (``python -m M``) or console script (``vllm serve``,
a ``#!...python`` file) in-process with the real ``sys.argv`` -- the kernel's copy of the command line
never holds the secret.  Anything else (a native binary) gets ``--hf-token`` through ``HF_TOKEN`` in its
environment, and any other secret argument is refused with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sskj.errors import LauncherError
from pytest_sskj.redact import redact_argv, secret_arg_values

__all__ = ["BOOTSTRAP", "HiddenLaunch", "SecretArgvError", "hide_secret_args"]

BOOTSTRAP = (
    "import json,os,runpy,sys;f=sys.argv[1];a=json.load(open(f));os.unlink(f);sys.argv=a['argv'];"
    "runpy.run_module(a['module'],run_name='__main__',alter_sys=True) if a['module'] "
    "else runpy.run_path(a['path'],run_name='__main__')"
)
# secret flags with an environment variable every engine we launch reads instead
_ENV_EQUIVALENT = {"--hf-token": "HF_TOKEN"}


class SecretArgvError(LauncherError):
    """A secret argument that cannot be passed to this program except on its command line."""


@dataclass(frozen=True)
class HiddenLaunch:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    private_file: Path | None


def _python_script(exe: str) -> tuple[str, str] | None:
    """``(interpreter, script path)`` when ``exe`` is a ``#!...python`` console script."""
    path = shutil.which(exe)
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!") or "python" not in first:
        return None
    parts = first[2:].split()
    interpreter = parts[-1] if parts and parts[0].endswith("env") else (parts[0] if parts else "")
    return (interpreter, path) if interpreter else None


def _is_python(exe: str) -> bool:
    return Path(exe).name.startswith("python")


def _to_env(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Move ``--hf-token`` (both spellings) into the environment; refuse any other secret argument."""
    out: list[str] = []
    env: list[tuple[str, str]] = []
    it = iter(range(len(argv)))
    for i in it:
        arg = argv[i]
        flag, sep, value = arg.partition("=")
        if flag in _ENV_EQUIVALENT:
            if not sep:
                value = argv[i + 1] if i + 1 < len(argv) else ""
                next(it, None)
            env.append((_ENV_EQUIVALENT[flag], value))
            continue
        out.append(arg)
    left = secret_arg_values(out)
    if left:
        shown = [a for a in redact_argv(out) if a.startswith("-") and "REDACTED" in a] or redact_argv(out)
        raise SecretArgvError(
            f"{Path(argv[0]).name} is not a Python program, so its secret arguments ({' '.join(shown)[:200]}) "
            "could only be passed on its command line, which every user of this machine can read; "
            "pass the secret through the environment (--sskj-env NAME=VALUE) instead"
        )
    return out, env


def hide_secret_args(argv: Sequence[str], private_dir: Path) -> HiddenLaunch:
    """The launch of ``argv`` with no secret in its command line (see the module docstring)."""
    argv = list(argv)
    if not secret_arg_values(argv):
        return HiddenLaunch(tuple(argv), (), None)
    module: str | None = None
    path: str | None = None
    if _is_python(argv[0]) and len(argv) > 2 and argv[1] == "-m":
        interpreter, module, rest = argv[0], argv[2], argv[3:]
    else:
        script = _python_script(argv[0])
        if script is None:
            out, env = _to_env(argv)
            return HiddenLaunch(tuple(out), tuple(env), None)
        (interpreter, path), rest = script, argv[1:]
    name = write_private_json(
        private_dir, "argv-", {"argv": [module or path or argv[0], *rest], "module": module, "path": path}
    )
    shown = redact_argv([module or path or argv[0], *rest])
    return HiddenLaunch((interpreter, "-c", BOOTSTRAP, str(name), *shown), (), name)


def write_private_json(private_dir: Path, prefix: str, data: object) -> Path:
    """``data`` as a new JSON file of mode 0600 in ``private_dir`` (made 0700): how a secret reaches another
    process (a server's argv, the detached log pump's secrets) without a command line or an environment."""
    private_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(private_dir, 0o700)
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".json", dir=private_dir)  # mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    return Path(name)
