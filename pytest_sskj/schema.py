"""The typed schema of every option value: kind, bounds, units, allowed characters, emptiness.

One function, :func:`parse_value`, turns a raw value into a typed one, whichever source it came from (the
command line, an ``SSKJ_*`` variable, an ``sskj_*`` ini key or a profile): the same text gives the same
result or the same error everywhere.  Every error is a :class:`ValueError` whose message says what was wrong;
:mod:`pytest_sskj.settings` names the source and adds what is accepted (:func:`accepted`) and a hint.

Rules that hold for every kind (:func:`check_text`): a value is never empty, never holds a control character
(newline, NUL, ESC, ...), is at most :data:`MAX_TEXT` characters, and numbers, names, host names, URLs and
gates are ASCII (``--tp １`` or ``--requests ٤`` is refused, not read as 1 or 4).  Numbers are finite (no
``nan``, ``inf`` only where a row says so, no ``1e309``) and lie within the row's bounds, which say what the
system can do (the README option table and ``pytest --help`` show them).  Kind-specific rules follow below;
the parsers that a subsystem owns (SLO gates, agreement gates, shape lists) are registered by that
subsystem in :mod:`pytest_sskj.registry` and looked up by kind.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pytest_sskj import names, parsing
from pytest_sskj.parsing import check_host, check_template
from pytest_sskj.redact import redact_url

if TYPE_CHECKING:
    from pytest_sskj.options import Option

__all__ = [
    "ASCII_KINDS",
    "INFRA_ENV_NAMES",
    "INFRA_ENV_PREFIXES",
    "INFRA_ENV_SUFFIXES",
    "MAX_TEXT",
    "accepted",
    "bounds_text",
    "check_db",
    "check_environment",
    "check_host",
    "check_text",
    "check_url",
    "parse_value",
]

MAX_TEXT = 4096
"""The longest value of any option (a path of PATH_MAX characters; more is never a real value)."""
MAX_NAME = 128
"""The longest run id, layout or release reference: it becomes a folder name and a database key."""

ASCII_KINDS = frozenset(
    {
        "int", "int0", "port", "port1", "float", "bool", "size", "size_list", "int_list", "name_list",
        "backend_list", "nodes", "choice", "slo", "agreement", "accuracy_margin", "metric_list", "size_seq", "url",
        "size_range",
        "run_id", "ref", "name", "template", "user", "ssh_options", "layouts",
    }
)  # fmt: skip
"""Kinds whose every character must be ASCII (numbers, names, host names, URLs, gates)."""

INFRA_ENV_NAMES = frozenset(
    {
        "SSKJ_VLLM_VENV",  # the real vLLM venv of .ci/install_vllm.sh (unit/vllm, unit/acceptance)
        "SSKJ_VLLM_MODEL",  # its model directory
        "SSKJ_GPU_LEDGER_DIR",  # gpu/leases.py: where GPU leases are recorded
        "SSKJ_ALLURE",  # report/html.py: the allure binary
        "SSKJ_CHROMIUM",  # report/html.py: the browser
        "SSKJ_TORCH_CPU_INDEX",  # .ci/install_vllm.sh
        "SSKJ_SSHD",  # tools/netns_hosts.sh: the sshd binary
        "SSKJ_PLAIN",  # unit/server/test_ssh_launcher.py: a plain environment value for a rank
        "SSKJ_T",  # unit/server/test_process.py: a spec environment value
        "SSKJ_TWIN_RUN_ID",  # .ci/twin_job.sh: the run id of the stand-in cluster phase
        "SSKJ_TWIN_CALIBRATION",  # twin/rank.py: 'off' serves each cell's figures at face value (a control)
    }
)
"""``SSKJ_*`` environment variables that are no option but are read by the tools, CI or the tests."""
INFRA_ENV_PREFIXES = ("SSKJ_NETNS_", "SSKJ_REQUIRE_", "SSKJ_TEST_", "SSKJ_SECRET_ARG_")
"""Families of such variables: network-namespace hosts, "fail instead of skip" switches, test plumbing and the
secret arguments a launch script exports."""
INFRA_ENV_SUFFIXES = ("_PYTHON",)
"""``SSKJ_SGLANG_PYTHON``, ``SSKJ_ROUTER_PYTHON``, ...: interpreters of the real engines' venvs."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_REF_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:/+-]*", re.ASCII)
_USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}", re.ASCII)
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_SSH_OPTION_RE = re.compile(r"([A-Za-z][A-Za-z0-9]*)(=|\s+)(\S.*)", re.ASCII)
_COMMAND_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*", re.ASCII)
_VIRTUAL_FS = (Path("/proc"), Path("/sys"), Path("/dev"))
_DB_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg", "postgresql+psycopg2")
SQLITE_MAGIC = b"SQLite format 3\x00"


# -- generic text rules ---------------------------------------------------------------------------------


def _describe_char(c: str) -> str:
    return f"{c!r} (U+{ord(c):04X})"


def check_text(text: str, *, ascii_only: bool, empty_ok: bool = False) -> str:
    """``text`` stripped, or ``ValueError``: empty, a control character, non-ASCII where ASCII is required,
    longer than :data:`MAX_TEXT`."""
    if not text.strip() and not empty_ok:
        raise ValueError("the value is empty")
    bad = _CONTROL.search(text)
    if bad:
        raise ValueError(f"{text[:60]!r} contains the control character {_describe_char(bad.group())}")
    if len(text) > MAX_TEXT:
        raise ValueError(f"the value is {len(text)} characters long, more than {MAX_TEXT}")
    if ascii_only and not text.isascii():
        c = next(ch for ch in text if not ch.isascii())
        raise ValueError(
            f"{text[:60]!r} contains the non-ASCII character {_describe_char(c)}; numbers and names are ASCII"
        )
    return text.strip()


_SHELL = re.compile(r"\$\(|\$\{|`|;|\||&|<|>")


def check_verbatim(text: str) -> str:
    """``text``, or ``ValueError`` when it holds shell syntax: a value passed verbatim (never through a shell) that
    holds ``$(...)`` or ``;`` was meant for a shell that will not run it."""
    bad = _SHELL.search(text)
    if bad:
        raise ValueError(
            f"{text[:80]!r} holds the shell syntax {bad.group()!r}; pytest-sskj passes this value verbatim (quoted "
            "on every node), no shell expands or runs it -- give the literal value"
        )
    return text


# -- numbers ---------------------------------------------------------------------------------------------


def _num(x: float) -> str:
    """``10485760`` not ``1.04858e+07``; ``2.5`` stays."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _unit(opt: Option) -> str:
    return f" {opt.unit}" if opt.unit else ""


def bounds_text(opt: Option) -> str:
    """``1-1024 GPUs``, ``> 0 s, at most 86400``, ... for ``--help``, the README and error messages."""
    if opt.lo is None and opt.hi is None:
        return ""
    lo = "" if opt.lo is None else _num(opt.lo)
    hi = "" if opt.hi is None else _num(opt.hi)
    if opt.lo_open:
        text = f"> {lo}" + (f" and <= {hi}" if hi else "")
    else:
        text = f"{lo}-{hi}" if lo and hi else (f">= {lo}" if lo else f"<= {hi}")
    if opt.allow_inf:
        text += " or inf"
    return text + _unit(opt)


def _check_bounds(opt: Option, value: float, shown: str) -> None:
    if opt.lo is not None:
        if opt.lo_open and not value > opt.lo:
            raise ValueError(
                f"{shown} must be greater than {_num(opt.lo)}{_unit(opt)} ({opt.bound_why or 'zero cannot work'})"
            )
        if not opt.lo_open and value < opt.lo:
            raise ValueError(f"{shown} must be at least {_num(opt.lo)}")
    if opt.hi is not None and value > opt.hi and not (opt.allow_inf and value == math.inf):
        why = f" ({opt.bound_why})" if opt.bound_why else ""
        raise ValueError(f"{shown} is above {_num(opt.hi or 0)}{_unit(opt)}, the most this option allows{why}")


def parse_int(opt: Option, text: str) -> int:
    t = text.strip()
    if not _INT_RE.fullmatch(t):
        raise ValueError(f"{text!r} is not an integer (ASCII digits 0-9)")
    if len(t) > 30:
        raise ValueError(f"{t[:40]}... is above {_num(opt.hi or 0)}, the most this option allows")
    value = int(t)
    _check_bounds(opt, value, str(value))
    return value


def parse_float(opt: Option, text: str) -> float:
    t = text.strip()
    low = t.lower()
    if low in ("inf", "+inf", "infinity") and opt.allow_inf:
        return math.inf
    if low.lstrip("+-") in ("nan", "inf", "infinity"):
        raise ValueError(f"{text!r} is not a finite number")
    if not _FLOAT_RE.fullmatch(t):
        raise ValueError(f"{text!r} is not a number (ASCII digits, an optional '.' and exponent: 2.5, 1e3)")
    value = float(t)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number (it overflows a float)")
    _check_bounds(opt, value, _num(value))
    return value


def _sizes_in_bounds(opt: Option, values: tuple[int, ...]) -> tuple[int, ...]:
    for v in values:
        _check_bounds(opt, v, str(v))
    return values


# -- names and hosts ---------------------------------------------------------------------------------------


def _check_name(text: str, regex: re.Pattern[str], what: str, limit: int = MAX_NAME) -> str:
    if text.startswith("-"):
        raise ValueError(f"{text!r} starts with '-' and would read as an option")
    if len(text) > limit:
        raise ValueError(f"{text[:40]!r}... is {len(text)} characters long, more than {limit}")
    if not regex.fullmatch(text) or text in (".", ".."):
        raise ValueError(f"{text!r} is not {what}")
    return text


def _env_pairs(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        if not _ENV_NAME_RE.fullmatch(name.strip()):
            raise ValueError(
                f"{name.strip()!r} is not an environment variable name (a letter or '_', then letters, digits, '_')"
            )
        out.append((name.strip(), value))
    return tuple(out)


def _ssh_options(items: Sequence[str]) -> tuple[str, ...]:
    for item in items:
        if not _SSH_OPTION_RE.fullmatch(item.strip()):
            raise ValueError(f"{item!r} is not an ssh option Keyword=value (e.g. StrictHostKeyChecking=no)")
    return tuple(i.strip() for i in items)


def _command(text: str) -> str:
    """A bare command name (looked up on PATH where it runs) or the path of an executable file."""
    if "/" not in text:
        return _check_name(text, _COMMAND_RE, "a command name (letters, digits, '._+-') or a path", 255)
    p = Path(text).expanduser()
    if p.exists() and not (p.is_file() and os.access(p, os.X_OK)):
        raise ValueError(f"{text!r} is not an executable file")
    if not p.exists() and not p.is_absolute():
        raise ValueError(f"{text!r} does not exist (a relative path must name an executable file here)")
    return str(p)


# -- URLs ------------------------------------------------------------------------------------------------------


def check_url(text: str, schemes: Sequence[str] = ("http", "https")) -> str:
    """An ``http(s)://HOST[:PORT][/path]`` URL with a valid host and a port 1-65535; ``ValueError`` otherwise."""
    if any(c.isspace() for c in text):
        raise ValueError(f"{text!r} contains white space")
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ValueError(f"{_shown(text)!r} is not a URL: {exc}") from None
    schemes_text = "http(s)" if tuple(schemes) == ("http", "https") else "/".join(schemes)
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"{_shown(text)!r} is not an {schemes_text} URL that names a host")
    _check_port(text)
    check_host(parts.hostname)
    return text


def _shown(url: str) -> str:
    """``url`` without its password (for messages)."""
    return redact_url(url)


def _check_port(url: str) -> None:
    try:
        port = urlsplit(url).port
    except ValueError:
        raise ValueError(f"{_shown(url)!r} has a port outside 1-65535") from None
    if port == 0:
        raise ValueError(f"{_shown(url)!r} has port 0")


def check_db(text: str) -> str:
    """``--sskj-db``: ``none``, a ``postgresql://USER@HOST[:PORT]/DB`` URL, ``sqlite:///PATH`` or a file path.

    Checked before anything starts, without connecting: the scheme, the host, a port 1-65535 and a database
    name of a server URL; for SQLite that the file's folder is a writable directory (or can be made) and that
    the file, if present, is a SQLite database (or empty), never a directory or a file of ``/proc``, ``/sys``,
    ``/dev``."""
    if text.lower() == "none":
        return text
    if "://" not in text:
        _check_sqlite_path(Path(text).expanduser())
        return text
    scheme = text.split("://", 1)[0].lower()
    if scheme not in _DB_SCHEMES:
        raise ValueError(f"{_shown(text)!r}: database {scheme!r} is not supported (postgresql, sqlite)")
    if scheme == "sqlite":
        rest = text.split("://", 1)[1]
        if not rest.startswith("/") or not rest[1:] or rest[1:].startswith(":memory:"):
            raise ValueError(f"{_shown(text)!r} names no file: write sqlite:///PATH (three slashes, then the path)")
        _check_sqlite_path(Path(rest[1:]))  # sqlite:///rel.db is relative, sqlite:////abs.db absolute
        return text
    if any(c.isspace() for c in text):
        raise ValueError(f"{_shown(text)!r} contains white space")
    _check_port(text)
    parts = urlsplit(text)
    if not parts.hostname:
        raise ValueError(f"{_shown(text)!r} names no database server host: postgresql://USER@HOST[:PORT]/DB")
    check_host(parts.hostname)
    if not parts.path.strip("/"):
        raise ValueError(f"{_shown(text)!r} names no database: postgresql://USER@HOST[:PORT]/DB")
    return text


def _check_sqlite_path(p: Path) -> None:
    resolved = Path(os.path.abspath(p))
    for root in _VIRTUAL_FS:
        if resolved == root or root in resolved.parents:
            raise ValueError(f"{str(p)!r} lies in {root}, a virtual file system, not a place for a database file")
    if resolved.is_dir():
        raise ValueError(f"{str(p)!r} is a directory; name the database file, e.g. {str(p / 'results.sqlite')!r}")
    if resolved.exists():
        _check_sqlite_file(resolved)
        return
    for parent in resolved.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{str(p)!r} lies below {parent}, which is a file")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ValueError(f"{str(p)!r}: its folder {parent} is not writable by this user")
            return


def _check_sqlite_file(p: Path) -> None:
    if not p.is_file():
        raise ValueError(f"{str(p)!r} is not a regular file")
    try:
        with p.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise ValueError(f"{str(p)!r} cannot be read: {exc.strerror or exc}") from None
    if head and head != SQLITE_MAGIC:
        raise ValueError(f"{str(p)!r} exists and is not a SQLite database (a text or other file would be overwritten)")
    if not os.access(p, os.W_OK):
        raise ValueError(f"{str(p)!r} is not writable by this user")


# -- the kinds ---------------------------------------------------------------------------------------------------


def _items(value: Any) -> list[str]:
    """The items of a repeatable option (a list from the command line, ini or profile; one string from env)."""
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _text_of(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _choice(opt: Option, text: str) -> str:
    if text not in opt.choices:
        close = difflib.get_close_matches(text, opt.choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{text!r} is not one of {', '.join(opt.choices)}{hint}")
    return text


_Parser = Callable[["Option", str], Any]

_KINDS: Mapping[str, _Parser] = {
    "str": lambda o, t: t,
    "int": parse_int,
    "int0": parse_int,
    "port": parse_int,
    "port1": parse_int,
    "float": parse_float,
    "bool": lambda o, t: parsing.parse_bool(t),
    "size": lambda o, t: _sizes_in_bounds(o, (parsing.parse_size(t),))[0],
    "size_list": lambda o, t: _sizes_in_bounds(o, parsing.parse_size_list(t)),
    "int_list": lambda o, t: _sizes_in_bounds(o, parsing.parse_int_list(t)),
    "name_list": lambda o, t: parsing.parse_name_list(t),
    "backend_list": lambda o, t: parsing.parse_name_list(t, twice_ok=True),
    "layouts": lambda o, t: (parsing.parse_name_list(t), t)[1],
    "path": lambda o, t: Path(t).expanduser(),
    "choice": _choice,
    "url": lambda o, t: check_url(t),
    "db": lambda o, t: check_db(t),
    "run_id": lambda o, t: names.check_name(t, "run id"),
    "ref": lambda o, t: _check_name(t, _REF_RE, "a release tag, a run id or last-release (letters, digits, '._:/+-')"),
    "name": lambda o, t: names.check_name(t),
    "user": lambda o, t: _check_name(t, _USER_RE, "a user name (a letter or '_', then letters, digits, '_.-'; <= 32)"),
    "template": lambda o, t: check_template(t),
    "command": lambda o, t: _command(t),
}


def parse_value(
    opt: Option,
    value: Any,
    *,
    extra: Mapping[str, Callable[[Any], Any]] | None = None,
    nodes: Callable[[Any], Any] | None = None,
) -> Any:
    """The typed value of ``opt`` from ``value`` (a string, or a list for a repeatable option); ``ValueError``
    saying what is wrong.  ``extra``: parsers by kind that the subsystems registered (slo, agreement, size_seq);
    ``nodes``: the node-list expander (it needs the resolved node template and the profile's folder)."""
    if opt.kind == "bool" and isinstance(value, bool):
        return value
    ascii_only = opt.kind in ASCII_KINDS
    if opt.kind in ("append", "env", "ssh_options"):
        items = _items(value)
        if not items:
            raise ValueError("the value is empty")
        items = [check_text(i, ascii_only=ascii_only and opt.kind != "env") for i in items]
        for item in items if opt.verbatim else ():
            check_verbatim(item)
        if opt.kind == "env":
            return _env_pairs(items)
        return _ssh_options(items) if opt.kind == "ssh_options" else tuple(items)
    text = check_text(_text_of(value), ascii_only=ascii_only)
    if opt.verbatim:
        check_verbatim(text)
    if opt.kind == "nodes" and nodes is not None:
        return nodes(text)
    if extra and opt.kind in extra:
        result = extra[opt.kind](text)
        if opt.kind == "size_seq":
            _sizes_in_bounds(opt, tuple(result))
        return result
    if opt.kind not in _KINDS:
        raise ValueError(f"option kind {opt.kind!r} has no parser")  # pragma: no cover - a table error
    return _KINDS[opt.kind](opt, text)


def accepted(opt: Option) -> str:
    """What ``opt`` accepts, in words (the ``accepted:`` line of its usage errors)."""
    base = {
        "int": "a whole number (ASCII digits)",
        "int0": "a whole number (ASCII digits), 0 allowed",
        "port": "a TCP port 1-65535, or 0 to pick a free one",
        "port1": "a TCP port 1-65535",
        "float": "a finite number (ASCII: 2.5, 1e3)",
        "bool": "1/0, true/false, yes/no, on/off",
        "size": "a token count with optional K/M suffix: 1, 512, 16K",
        "size_list": "a comma list of sizes: 4096,8K,16k",
        "size_seq": "a size or a comma list of sizes: 16K, 1K,16K",
        "size_range": "LO:HI, two sizes with LO below HI: 1K:256K, or none",
        "int_list": "a comma list of whole numbers: 8,16",
        "name_list": "a comma list of names: marlin,flashinfer_mxfp4",
        "backend_list": "a comma list of names, baseline first: marlin,flashinfer_mxfp4 (a name twice: A/A control)",
        "layouts": "a comma list of layouts (tp2dp4,tp4dp2) or layout names of the profile",
        "nodes": "601-604, 601,603, gpu601-gpu604, RFC 1123 host names or addresses, inventory:FILE.toml",
        "choice": ", ".join(opt.choices),
        "slo": "gates METRIC OP NUMBER like p95_ttft_ms<3000,p95_tpot_ms<50 (OP < <= > >=; a metric at most once "
        "per direction, thresholds >= 0), or none",
        "agreement": "gates like first_token_agreement_frac>=0.95,identical_seq_frac>=1 (fractions 0-1, a figure "
        "once), a bare fraction, or none",
        "metric_list": "a comma list of metric names with a direction, primary first: output_throughput,"
        "median_tpot_ms (results.csv names; the older ttft_p95_ms / input_tps spellings map onto them)",
        "accuracy_set": "gsm8k=PATH (a GSM8K-format JSONL file: question, answer ending in '#### N'), or none",
        "speculative": "NAME=ALGORITHM[:key=value,...] joined by ';' (keys draft, steps, topk, draft_tokens, "
        "lookup_max, lookup_min): dflash=DFLASH:draft=/models/draft,draft_tokens=4, or none",
        "accuracy_margin": "delta>=-Npt (N percentage points the candidate may lose, 0 <= N < 100), or none",
        "env": "KEY=VALUE with KEY a letter or '_' then letters, digits, '_'",
        "append": "a non-empty argument without control characters",
        "ssh_options": "Keyword=value, e.g. StrictHostKeyChecking=no",
        "url": "http(s)://HOST[:PORT][/PATH] with an RFC 1123 host name or an address and a port 1-65535",
        "db": "none, postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (port 1-65535), sqlite:///PATH or a file path "
        "whose folder is writable and which, if present, is a SQLite database",
        "run_id": f"a folder name: {names.RULE}",
        "ref": f"a release tag, a run id or last-release (letters, digits, '._:/+-'; at most {MAX_NAME})",
        "name": names.RULE,
        "user": "a user name: a letter or '_', then letters, digits, '_.-' (at most 32)",
        "template": "a host name with '{}' once where the node number goes: gpu{}, node{}.lan",
        "command": "a command name (python3) or the path of an executable file",
        "path": "a non-empty path",
        "str": f"a non-empty text without control characters (at most {MAX_TEXT} characters)",
    }.get(opt.kind, "a non-empty value")
    if opt.verbatim:
        base += ", taken literally: no $(...), ${...}, backticks, ';', pipes, '&', '<' or '>'"
    bounds = bounds_text(opt)
    return f"{base}, {bounds}" if bounds else base


# -- the environment ----------------------------------------------------------------------------------------------


def is_infra_env(name: str) -> bool:
    """Whether ``name`` is a declared ``SSKJ_*`` variable that is no option (:data:`INFRA_ENV_NAMES` & co.)."""
    return name in INFRA_ENV_NAMES or name.startswith(INFRA_ENV_PREFIXES) or name.endswith(INFRA_ENV_SUFFIXES)


def check_environment(environ: Mapping[str, str], option_envs: Iterable[str]) -> None:
    """``ValueError`` naming every ``SSKJ_*`` variable that is neither an option nor declared infrastructure,
    with the closest option name ("did you mean")."""
    known = set(option_envs)
    bad = sorted(k for k in environ if k.startswith("SSKJ_") and k not in known and not is_infra_env(k))
    if not bad:
        return
    close = [f"{k} -> {m[0]}" for k in bad if (m := difflib.get_close_matches(k, known, n=1, cutoff=0.6))]
    hint = f"did you mean {', '.join(close)}?" if close else "unset it, or see the options table in README.md"
    raise ValueError(f"unknown pytest-sskj environment variable(s) {', '.join(bad)}\n  Hint: {hint}")
