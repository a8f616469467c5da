"""Redaction of secrets before anything reaches a report, attachment, log copy or manifest.

An environment variable is secret when its *name* looks like a password, token, key or credential
(``SUDO_PASSWORD``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``OPENAI_API_KEY``, ...).  Its value is
replaced by :data:`REDACTED`, and :func:`redact_text` also scrubs those values wherever they occur in
free text (log excerpts, command lines), together with ``--flag=secret`` style arguments and SSH
identity file paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "REDACTED",
    "is_secret_name",
    "redact_argv",
    "redact_env",
    "redact_env_items",
    "redact_text",
    "redact_url",
]

REDACTED = "***REDACTED***"

_SECRET_NAME = re.compile(
    r"(PASS(WORD|WD|PHRASE)?|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|COOKIE|SESSION_?KEY"
    r"|(^|_)KEY($|_)|SSH_?(IDENTITY|KEY)|IDENTITY_?FILE)",
    re.IGNORECASE,
)
_SECRET_FLAG = re.compile(
    r"^(--?[A-Za-z0-9_-]*(password|passwd|secret|token|api-?key|access-?key|private-?key|identity)[A-Za-z0-9_-]*)"
    r"(=)(.+)$",
    re.IGNORECASE,
)


_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s@/]+)(?P<at>@)")


def redact_url(text: str) -> str:
    """``postgresql://ann:s3cret@db/x`` -> ``postgresql://ann:***REDACTED***@db/x`` (every URL in ``text``)."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + m.group("at"), text)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or option name looks like it holds a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_env_items(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((k, REDACTED if is_secret_name(k) and v else v) for k, v in items)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return dict(redact_env_items(env.items()))


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Redact ``--api-key=...`` style values and the argument after ``--api-key``/``-i`` (ssh identity)."""
    out: list[str] = []
    hide_next = False
    for arg in map(redact_url, argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _SECRET_FLAG.match(arg)
        if m:
            out.append(m.group(1) + "=" + REDACTED)
            continue
        if arg == "-i" or (arg.startswith("--") and _SECRET_FLAG.match(arg + "=x")):
            hide_next = True
        out.append(arg)
    return out


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Replace every occurrence of the given secret values (and ``NAME=value`` secret pairs) in ``text``."""
    for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(s, REDACTED)

    def _pair(m: re.Match[str]) -> str:
        return m.group(1) + "=" + REDACTED if is_secret_name(m.group(1)) else m.group(0)

    return re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)=(\S+)", _pair, redact_url(text))
