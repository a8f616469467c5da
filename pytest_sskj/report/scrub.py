"""Deep redaction of JSON-like data before any report file is written.

:func:`secret_values` collects the values of this process's secret-named environment variables (and of
any extra ``KEY=VALUE`` pairs, e.g. ``--sskj-env``); :func:`scrub` walks dicts, lists and strings,
replaces string values under secret-looking keys (``HF_TOKEN``, ``ssh_identity``, ``api_key``) with
:data:`~pytest_sskj.redact.REDACTED` and scrubs every string with
:func:`~pytest_sskj.redact.redact_text`.  Every writer of :mod:`pytest_sskj.report` goes through it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pytest_sskj.redact import REDACTED, is_secret_name, redact_text, secret_arg_values

__all__ = ["SecretSource", "scrub", "scrub_text", "secret_values", "settings_secrets"]


class SecretSource(Protocol):
    """What :func:`settings_secrets` reads (``pytest_sskj.settings.Settings`` has these fields)."""

    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def server_args(self) -> tuple[str, ...]: ...

    @property
    def ssh_identity(self) -> os.PathLike[str] | None: ...


def secret_values(
    extra: Iterable[tuple[str, str]] = (),
    environ: Mapping[str, str] | None = None,
    argv: Iterable[str] = (),
) -> tuple[str, ...]:
    """Values of secret-named variables in ``environ`` (default ``os.environ``) and in ``extra`` pairs, and
    the values of secret flags in ``argv`` (``--api-key=V``, ``--hf-token V``)."""
    env = os.environ if environ is None else environ
    pairs = [*env.items(), *extra]
    found = {v for k, v in pairs if v and is_secret_name(k)} | set(secret_arg_values(argv))
    return tuple(sorted(found, key=len, reverse=True))


def settings_secrets(settings: SecretSource) -> tuple[str, ...]:
    """Every secret value of a session: secret-named ``--sskj-env`` values, secret server arguments (both
    forms, from the command line, ``SSKJ_SERVER_ARGS``, the ini or the profile), the SSH identity path,
    and this process's secret-named environment variables."""
    extra = [*settings.env]
    if settings.ssh_identity is not None:
        extra.append(("SSH_IDENTITY", os.fspath(settings.ssh_identity)))
    return secret_values(extra, argv=settings.server_args)


_SSH_IDENTITY = (
    re.compile(r"(\bssh\b[^\n]*?\s-i\s*)(\S+)"),  # ssh ... -i PATH
    re.compile(r"(IdentityFile[= ]\s*)(\S+)", re.IGNORECASE),  # -o IdentityFile=PATH, ssh_config lines
    re.compile(r"()(\S*/\.ssh/\S+|\bid_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?\b\S*)"),  # ~/.ssh/..., id_rsa...
)


def _scrub_str(text: str, secrets: tuple[str, ...]) -> str:
    text = redact_text(text, secrets)
    for pattern in _SSH_IDENTITY:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``redact_text`` with this process's secret env values added to ``secrets``, plus SSH identities
    (``ssh -i PATH``, ``IdentityFile PATH``, ``~/.ssh/...``, ``id_rsa``-style names)."""
    return _scrub_str(text, (*secret_values(), *secrets))


def scrub(obj: Any, secrets: Iterable[str] | None = None) -> Any:
    """A copy of ``obj`` (dict/list/tuple/str/scalars) with secrets replaced by ``REDACTED``."""
    values = tuple(secrets) if secrets is not None else ()
    all_secrets = (*secret_values(), *values)
    return _walk(obj, all_secrets)


def _walk(obj: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(obj, str):
        return _scrub_str(obj, secrets)
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            key = str(k)
            if is_secret_name(key) and isinstance(v, (str, os.PathLike)) and os.fspath(v):
                out[key] = REDACTED  # strings only: ``total_input_tokens`` or ``passed`` are not secrets
            else:
                out[key] = _walk(v, secrets)
        return out
    if isinstance(obj, (list, tuple)):
        return [_walk(v, secrets) for v in obj]
    if isinstance(obj, os.PathLike):
        return _scrub_str(str(os.fspath(obj)), secrets)
    return obj
