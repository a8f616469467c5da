"""Redaction of secrets before anything reaches a report, attachment, log copy or manifest.

A name is secret when its words say password, token, secret, credential or key
(``SUDO_PASSWORD``, ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``OPENAI_API_KEY``, ``--api-key``,
``--hf-token``, ``--password``, ``--my-secret-thing``), whether it is an environment variable, a dict
key or a command-line flag.  Names of non-secret things that merely end in ``key`` (``spec_key``,
``sort_key``) and counts (``total_input_tokens``, ``--max-prefill-tokens``, ``--tokenizer-path``) are
not secret.  Secret values are replaced by :data:`REDACTED`: in argv lists (both ``--api-key=V`` and
the two-argument ``--api-key V``), and in free text (log lines, command lines), where
:func:`redact_text` replaces the given secret values, ``NAME=value`` pairs and ``--flag[= ]value``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "REDACTED",
    "is_secret_flag",
    "is_secret_name",
    "redact_argv",
    "redact_env",
    "redact_env_items",
    "redact_text",
    "redact_url",
    "secret_arg_values",
]

REDACTED = "***REDACTED***"

# substrings that are secret wherever they occur in a name
_SECRET_SUBSTRINGS = ("password", "passwd", "passphrase", "secret", "apikey", "accesskey", "privatekey", "credential")
# whole words (split on - _ . and spaces) that are secret
_SECRET_WORDS = frozenset({"pass", "pw", "pwd", "auth", "cookie", "token", "apitoken", "bearer", "identity"})
# a last word ``key`` is secret (``--api-key``, ``HF_KEY``), except in these names of non-secret things
_NOT_SECRET_KEYS = frozenset(
    {"spec", "sort", "cache", "point", "lookup", "group", "row", "run", "dict", "primary", "partition", "hash", "map"}
)
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")


def _words(name: str) -> list[str]:
    return [w for w in _WORD_SPLIT.split(name.lower()) if w]


_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s@/]+)(?P<at>@)")


def redact_url(text: str) -> str:
    """``postgresql://ann:s3cret@db/x`` -> ``postgresql://ann:***REDACTED***@db/x`` (every URL in ``text``)."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + m.group("at"), text)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable, dict key or option name looks like it holds a secret."""
    words = _words(name)
    if not words:
        return False
    joined = "".join(words)
    if any(s in joined for s in _SECRET_SUBSTRINGS):
        return True
    if any(w in _SECRET_WORDS or (w.endswith("token") and w != "token" and len(w) <= 12) for w in words):
        return True
    if words[-1] == "key":  # api_key, hf-key, ssh_key; but spec_key is a digest, not a secret
        return len(words) > 1 and words[-2] not in _NOT_SECRET_KEYS  # a bare ``key`` field is a digest
    if "key" in words and words[words.index("key") - 1 : words.index("key")] in (["ssh"], ["private"], ["api"]):
        return True  # SSH_KEY_PATH, API_KEY_FILE
    return "identityfile" in joined or joined.endswith("sshkey")


def is_secret_flag(arg: str) -> bool:
    """Whether ``arg`` is a command-line flag (``--api-key``, ``-i``) whose value is a secret."""
    if arg == "-i":  # ssh identity
        return True
    return arg.startswith("--") and len(arg) > 2 and is_secret_name(arg[2:])


def redact_env_items(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((k, REDACTED if is_secret_name(k) and v else v) for k, v in items)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return dict(redact_env_items(env.items()))


def secret_arg_values(argv: Iterable[str]) -> tuple[str, ...]:
    """The secret values in an argv: ``V`` of ``--api-key=V`` and of the two arguments ``--api-key V``."""
    out: list[str] = []
    take_next = False
    for arg in argv:
        if take_next:
            take_next = False
            if arg:
                out.append(arg)
            continue
        flag, sep, value = arg.partition("=")
        if sep and flag.startswith("-") and is_secret_flag(flag):
            if value:
                out.append(value)
        elif is_secret_flag(arg):
            take_next = True
    return tuple(out)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Redact ``--api-key=...`` style values and the argument after ``--api-key``/``-i`` (ssh identity)."""
    out: list[str] = []
    hide_next = False
    for arg in map(redact_url, argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, sep, _value = arg.partition("=")
        if sep and flag.startswith("-") and is_secret_flag(flag):
            out.append(flag + "=" + REDACTED)
            continue
        if is_secret_flag(arg):
            hide_next = True
        out.append(arg)
    return out


_PAIR = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=([^\s'\"]+)")
_FLAG_VALUE = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9_-]*)(=|\s+)(['\"]?)([^\s'\"]+)")


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Replace every occurrence of the given secret values, ``NAME=value`` secret pairs and
    ``--secret-flag value`` / ``--secret-flag=value`` arguments in ``text``."""
    for s in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(s, REDACTED)

    def _pair(m: re.Match[str]) -> str:
        return m.group(1) + "=" + REDACTED if is_secret_name(m.group(1)) else m.group(0)

    def _flag(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group(1)) or m.group(4).startswith("-") or m.group(4) == REDACTED:
            return m.group(0)
        return m.group(1) + m.group(2) + m.group(3) + REDACTED

    return _PAIR.sub(_pair, _FLAG_VALUE.sub(_flag, redact_url(text)))
