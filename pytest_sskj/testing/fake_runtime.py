"""A stand-in container runtime CLI (``docker``/``podman`` subset) for tests where no runtime can run.

Implements exactly what :mod:`pytest_sskj.server.container` uses: ``run [--rm] [--name N] [flags] IMAGE
ARGV`` (``-e NAME`` passes the caller's value, ``-e NAME=VALUE`` sets one; the command runs in place of
this process, so signals and exit status are the container's), ``rm -f N`` (kills what runs under that
name), ``ps -a -q --filter name=^N$`` and ``image inspect --format {{.Id}} IMAGE``.  State (one file per
named container with its PID, and every ``run`` argv) lives in ``$SSKJ_FAKE_RUNTIME_DIR``; the known
image and its id are ``$SSKJ_FAKE_RUNTIME_IMAGE`` / ``$SSKJ_FAKE_RUNTIME_ID``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

_VALUED = {"--network", "--ipc", "--name", "-v", "-e", "--gpus", "--device", "--ulimit", "--cgroups"}


def main(argv: list[str]) -> int:
    state = Path(os.environ["SSKJ_FAKE_RUNTIME_DIR"])
    state.mkdir(parents=True, exist_ok=True)
    image, image_id = os.environ["SSKJ_FAKE_RUNTIME_IMAGE"], os.environ["SSKJ_FAKE_RUNTIME_ID"]
    cmd, rest = argv[0], argv[1:]
    if cmd == "image" and rest[:1] == ["inspect"]:
        return _image_inspect(rest, image, image_id)
    if cmd == "ps":
        return _ps(rest, state)
    if cmd == "rm":
        return _rm(rest, state)
    if cmd != "run":
        sys.stderr.write(f"fake runtime: unsupported command {cmd}\n")
        return 2
    with (state / "runs.jsonl").open("a") as fh:
        fh.write(json.dumps(argv) + "\n")
    return _run(rest, state, image)


def _image_inspect(rest: list[str], image: str, image_id: str) -> int:
    if rest[-1] != image:
        sys.stderr.write(f"Error: no such image {rest[-1]}\n")
        return 1
    sys.stdout.write(image_id + "\n")
    return 0


def _ps(rest: list[str], state: Path) -> int:
    wanted = rest[rest.index("--filter") + 1].removeprefix("name=^").removesuffix("$")
    if (state / wanted).exists():
        sys.stdout.write(f"c0ffee{abs(hash(wanted)) % 10**6:06d}\n")
    return 0


def _rm(rest: list[str], state: Path) -> int:
    f = state / rest[-1]
    if f.exists():
        try:
            os.killpg(int(f.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError, PermissionError):
            pass
        f.unlink()
    return 0


def _run_flags(rest: list[str]) -> tuple[dict[str, str], str | None, int]:
    """The container's environment, its ``--name`` and the index of the image in ``rest``."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root"}
    name: str | None = None
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        flag = rest[i]
        value = rest[i + 1] if flag in _VALUED else None
        if flag == "-e" and value is not None:
            k, eq, v = value.partition("=")
            if eq:
                env[k] = v
            elif k in os.environ:
                env[k] = os.environ[k]
        if flag == "--name":
            name = value
        i += 2 if flag in _VALUED else 1
    return env, name, i


def _run(rest: list[str], state: Path, image: str) -> int:
    env, name, i = _run_flags(rest)
    if rest[i] != image:
        sys.stderr.write(f"Unable to find image '{rest[i]}' locally\n")
        return 125
    if name:
        if os.getpgid(0) != os.getpid():
            os.setpgid(0, 0)
        (state / name).write_text(str(os.getpgid(0)))
    os.execvpe(rest[i + 1], rest[i + 1 :], env)  # noqa: S606 - the container command replaces the client


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
