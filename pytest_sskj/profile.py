"""Profiles: one TOML file per platform/model/engine, like the users' ``deploy/profiles/*.env``.

A profile fills settings that the command line, ``SSKJ_*`` variables and ini keys leave unset.
Example (``profiles/pro6000/kimi3-sglang.toml``)::

    platform = "pro6000"
    model = "Kimi-K3"
    engine = 'sglang'
    model_path = "/models/Kimi-K3"
    nodes = "601-604"
    tp = 32
    ep = 4
    backends = ["marlin", "flashinfer_mxfp4"]
    chunks = ["4K", "8K", "16K"]
    concurrencies = [8, 16]
    isl = "16K"
    osl = 1
    server_args = ["--trust-remote-code", "--disable-radix-cache", "--mem-fraction-static=0.85"]

    [env]
    NCCL_IB_DISABLE = "1"

Every key is a setting name of :data:`pytest_sskj.options.OPTIONS` (``model`` is accepted for
``model_name``); ``env`` is a table.  Unknown keys are refused with the list of known ones.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.options import OPTIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["PROFILE_KEYS", "Profile", "load_profile"]

_ALIASES = {"model": "model_name", "backend": "backends", "chunk": "chunks", "concurrency": "concurrencies"}
_NOT_IN_PROFILE = {"profile", "dry_run", "run_id", "resume"}
PROFILE_KEYS: tuple[str, ...] = tuple(
    sorted({o.dest for o in OPTIONS if o.dest not in _NOT_IN_PROFILE} | set(_ALIASES))
)


@dataclass(frozen=True)
class Profile:
    """A loaded profile: the file it came from and its values keyed by setting name."""

    path: Path
    values: dict[str, Any] = field(default_factory=dict)


def _as_option_text(key: str, value: Any) -> Any:
    if key == "env":
        if not isinstance(value, dict):
            raise ValueError("'env' must be a table of NAME = \"value\" pairs")
        return [f"{k}={v}" for k, v in value.items()]
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        if key in ("server_args", "ssh_options"):
            return [str(v) for v in value]
        return ",".join(str(v) for v in value)
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"{key!r} has a value of type {type(value).__name__}, which a profile cannot hold")


def load_profile(path: Path) -> Profile:
    """Read and check a profile; raise :class:`ValueError` saying what is wrong and what is accepted."""
    if not path.is_file():
        raise ValueError(f"profile {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"profile {str(path)!r} is not valid TOML: {exc}") from None
    unknown = sorted(k for k in raw if k not in PROFILE_KEYS)
    if unknown:
        raise ValueError(
            f"profile {str(path)!r} has unknown key(s) {', '.join(unknown)}; known keys: {', '.join(PROFILE_KEYS)}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        dest = _ALIASES.get(key, key)
        try:
            values[dest] = _as_option_text(dest, value)
        except ValueError as exc:
            raise ValueError(f"profile {str(path)!r}: {exc}") from None
    return Profile(path=path, values=values)
