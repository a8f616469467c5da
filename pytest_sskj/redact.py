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
    "url_without_userinfo",
]

REDACTED = "***REDACTED***"

# The secret names, as exact words of a name split on ``-``, ``_``, ``.`` and spaces (never substrings:
# ``PWD`` is the working directory, ``passed`` and ``total_input_tokens`` are not secrets).
SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "apitoken",
        "authtoken",
        "hftoken",
        "accesstoken",
        "credential",
        "credentials",
        "apikey",
        "accesskey",
        "privatekey",
        "secretkey",
        "sshkey",
        "identityfile",
        "cookie",
        "bearer",
        "auth",
        "pass",
        "pw",
    }
)
# words that are secret only as part of a longer name (``DB_PWD``, ``MYSQL_PWD``); the bare ``PWD`` and
# ``OLDPWD`` are the shell's working directories
SECRET_WORDS_IN_LONGER_NAMES = frozenset({"pwd", "identity"})
# a last word ``key`` is secret (``--api-key``, ``HF_KEY``, ``--ssl-key``), except in these names of non-secret things
_NOT_SECRET_KEYS = frozenset(
    {"spec", "sort", "cache", "point", "lookup", "group", "row", "run", "dict", "primary", "partition", "hash", "map"}
)
# ``key`` followed by these words names a key file (``SSH_KEY_PATH``, ``API_KEY_FILE``)
_KEY_OWNERS = frozenset({"ssh", "private", "api", "secret", "access"})
# a secret *value* shorter than this is never replaced blindly in free text (it would hit ordinary words)
MIN_SECRET_VALUE_LEN = 6
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")


def _words(name: str) -> list[str]:
    return [w for w in _WORD_SPLIT.split(name.lower()) if w]


_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?P<pw>[^\s@/]+)(?P<at>@)")


def redact_url(text: str) -> str:
    """``postgresql://ann:s3cret@db/x`` -> ``postgresql://ann:***REDACTED***@db/x`` (every URL in ``text``)."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + m.group("at"), text)


def url_without_userinfo(url: str) -> str:
    """``http://ann:pw@601:30000/v1`` -> ``http://601:30000/v1``: for a URL whose credentials nothing sends
    (the bench client never uses userinfo), so that no record, log or terminal line can carry them."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def is_secret_name(name: str) -> bool:
    """Whether an environment variable, dict key or option name holds a secret: one of its words is in
    :data:`SECRET_WORDS` (exact words, not substrings), or it ends in ``key`` after a word that is not a
    non-secret thing (``api_key``, ``--ssl-key``; not ``spec_key``, not a bare ``key``)."""
    words = _words(name)
    if not words:
        return False
    if any(w in SECRET_WORDS for w in words):
        return True
    if len(words) > 1 and any(w in SECRET_WORDS_IN_LONGER_NAMES for w in words):
        return True
    if words[-1] == "key":  # api_key, hf-key, ssh_key; but spec_key is a digest, not a secret
        return len(words) > 1 and words[-2] not in _NOT_SECRET_KEYS  # a bare ``key`` field is a digest
    return any(w == "key" and i > 0 and words[i - 1] in _KEY_OWNERS for i, w in enumerate(words))


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


def _replace_value(text: str, value: str) -> str:
    """Replace ``value`` in ``text`` except where it stands as a whole path component (``/work/x`` keeps
    ``work`` when ``work`` is somebody's password); a value that is itself a path is replaced whole."""
    if "/" in value:
        return text.replace(value, REDACTED)
    pattern = re.compile(re.escape(value))

    def _one(m: re.Match[str]) -> str:
        before = text[m.start() - 1] if m.start() > 0 else ""
        after = text[m.end()] if m.end() < len(text) else ""
        in_path = (before == "/" and (after in "/" or after.isspace() or after in "'\":,")) or (
            after == "/" and (before in "/" or before.isspace() or before in "'\"=:,")
        )
        return m.group(0) if in_path else REDACTED

    return pattern.sub(_one, text)


_PAIR = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=([^\s'\"]+)")
_FLAG_VALUE = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9_-]*)(=|\s+)(['\"]?)([^\s'\"]+)")


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Replace every occurrence of the given secret values, ``NAME=value`` secret pairs and
    ``--secret-flag value`` / ``--secret-flag=value`` arguments in ``text``."""
    for s in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_VALUE_LEN}, key=len, reverse=True):
        text = _replace_value(text, s)

    def _pair(m: re.Match[str]) -> str:
        return m.group(1) + "=" + REDACTED if is_secret_name(m.group(1)) else m.group(0)

    def _flag(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group(1)) or m.group(4).startswith("-") or m.group(4) == REDACTED:
            return m.group(0)
        return m.group(1) + m.group(2) + m.group(3) + REDACTED

    return _PAIR.sub(_pair, _FLAG_VALUE.sub(_flag, redact_url(text)))
