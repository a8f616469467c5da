"""Value parsers for option strings: sizes (``16K``), integer lists, node lists, backend lists.

Every parser is a pure function ``str -> value`` that raises :class:`ValueError` whose message
says what was wrong and what is accepted.  :mod:`pytest_sskj.settings` turns those into
``pytest.UsageError`` naming the source (command line, ``SSKJ_*`` variable, ini key or profile).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from pathlib import Path

from pytest_sskj import names
from pytest_sskj.files import read_text_file

__all__ = [
    "check_host",
    "check_template",
    "expand_nodes",
    "parse_bool",
    "parse_int",
    "parse_int_list",
    "parse_name_list",
    "parse_port",
    "parse_positive_float",
    "parse_size",
    "parse_size_list",
]

_SIZE_RE = re.compile(r"^\s*([0-9]+)\s*([kKmM]?)\s*$", re.ASCII)
_MAX_DIGITS = 15
"""More digits than this is no token count (and int() of a huge string is slow)."""
_SUFFIX = {"": 1, "k": 1024, "m": 1024 * 1024}


def parse_size(text: str, *, minimum: int = 1) -> int:
    """Parse a token count such as ``4096``, ``8K`` or ``16k`` (K = 1024).

    >>> parse_size("16K")
    16384
    """
    m = _SIZE_RE.match(str(text))
    if not m and str(text).strip().startswith("-"):
        raise ValueError(f"{text!r} is negative; sizes are token counts of at least {minimum}")
    if not m:
        raise ValueError(f"{text!r} is not a size; accepted: an integer with an optional K or M suffix (4096, 8K, 16k)")
    if len(m.group(1)) > _MAX_DIGITS:
        raise ValueError(f"{text!r} is far above any token count")
    value = int(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if value < minimum:
        raise ValueError(f"{text!r} must be at least {minimum}")
    return value


def parse_int(text: str, *, minimum: int = 1) -> int:
    """Parse one integer that is at least ``minimum``."""
    t = str(text).strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,30}", t, re.ASCII):
        raise ValueError(f"{text!r} is not an integer (ASCII digits 0-9)")
    value = int(t)
    if value < minimum:
        raise ValueError(f"{value} must be at least {minimum}")
    return value


def parse_port(text: str, *, minimum: int = 0) -> int:
    """Parse a TCP port: ``minimum`` (0: pick a free one, where allowed) to 65535."""
    value = parse_int(text, minimum=minimum)
    if value > 65535:
        raise ValueError(f"{value} is above 65535, the highest TCP port")
    return value


def parse_positive_float(text: str) -> float:
    """Parse a float that is greater than zero (``inf`` allowed)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


def parse_bool(text: str) -> bool:
    """Parse ``1/0``, ``true/false``, ``yes/no``, ``on/off``."""
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean; accepted: 1/0, true/false, yes/no, on/off")


def _split(text: str | Sequence[str]) -> list[str]:
    if isinstance(text, str):
        items = [t.strip() for t in text.split(",")]
        if len(items) > 1 and "" in items:  # 601,,602 or 601, : a typo, never silently dropped
            raise ValueError(f"{text!r} has an empty item between commas; write the list without it")
        return [t for t in items if t]
    return [str(t).strip() for t in text if str(t).strip()]


def parse_size_list(text: str | Sequence[str]) -> tuple[int, ...]:
    """Parse ``4096,8K,16k`` into ``(4096, 8192, 16384)``; order kept, duplicates refused."""
    items = _split(text)
    if not items:
        raise ValueError("the list is empty; give at least one size, e.g. 4K,8K,16K")
    values = tuple(parse_size(t) for t in items)
    if len(set(values)) != len(values):
        raise ValueError(f"{','.join(items)!r} lists a size twice")
    return values


def parse_int_list(text: str | Sequence[str], *, minimum: int = 1) -> tuple[int, ...]:
    """Parse ``8,16`` into ``(8, 16)``; every value at least ``minimum``, no duplicates."""
    items = _split(text)
    if not items:
        raise ValueError("the list is empty; give at least one integer, e.g. 8,16")
    values = tuple(parse_int(t, minimum=minimum) for t in items)
    if len(set(values)) != len(values):
        raise ValueError(f"{','.join(items)!r} lists a value twice")
    return values


def parse_name_list(text: str | Sequence[str], *, twice_ok: bool = False) -> tuple[str, ...]:
    """Parse ``marlin,flashinfer_mxfp4`` into a tuple of names (:func:`pytest_sskj.names.check_name`).

    ``twice_ok``: a name may appear twice (``--backend marlin,marlin``: an A/A control), never three times.
    """
    items = _split(text)
    if not items:
        raise ValueError("the list is empty; give at least one name")
    for t in items:  # a backend name becomes part of point ids, i.e. file names: the one name rule
        names.check_name(t)
    most = max(items.count(t) for t in items)
    if most > (2 if twice_ok else 1):
        what = "more than twice (twice is an A/A control)" if twice_ok else "twice"
        raise ValueError(f"{','.join(items)!r} lists a name {what}")
    return tuple(items)


_LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def check_host(host: str) -> str:
    """A host name per RFC 1123 (labels of letters, digits and inner '-', 1-63 characters, 253 in all), or an
    IPv4/IPv6 address; ``ValueError`` otherwise."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    if len(host) > 253:
        raise ValueError(f"host name {host[:40]!r}... is longer than 253 characters (RFC 1123)")
    for label in host.split("."):
        if not _LABEL_RE.fullmatch(label):
            raise ValueError(
                f"{host!r} is not a host name: label {label!r} must be 1-63 letters, digits or inner '-' (RFC 1123)"
            )
    if re.fullmatch(r"[0-9]+-[0-9A-Za-z]*", host) and not re.fullmatch(r"[0-9]+-[0-9]+", host):
        raise ValueError(f"{host!r} looks like a node range but is not one: a range is two numbers, 601-604")
    return host


def check_template(text: str) -> str:
    """A node template: exactly one ``{}`` and no other brace; the host names it makes are RFC 1123 names."""
    if text.count("{}") != 1 or text.replace("{}", "").count("{") or text.replace("{}", "").count("}"):
        raise ValueError(f"{text!r} must contain '{{}}' exactly once (where the node number goes) and no other brace")
    check_host(text.replace("{}", "601"))
    return text


INVENTORY_PREFIX = "inventory:"
_RANGE_RE = re.compile(r"^([A-Za-z._-]*?)([0-9]+)-([A-Za-z._-]*?)([0-9]+)$", re.ASCII)
_HOST_RE = re.compile(r"^[A-Za-z0-9:]([A-Za-z0-9.:-]*[A-Za-z0-9])?$", re.ASCII)


def _load_inventory(path: Path) -> list[str]:
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        text = read_text_file(path, what="inventory file", limit=1024 * 1024)
    except FileNotFoundError:
        raise ValueError(f"inventory file {str(path)!r} does not exist") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"inventory file {str(path)!r} is not valid TOML: {exc}") from None
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ValueError(f"inventory file {str(path)!r} needs a non-empty list 'nodes = [\"601\", ...]'")
    out: list[str] = []
    for n in nodes:
        if isinstance(n, dict):
            host = n.get("host")
            if not isinstance(host, str):
                raise ValueError(f"inventory file {str(path)!r}: every table in 'nodes' needs a 'host' string")
            out.append(host)
        else:
            out.append(str(n))
    return out


def _inventory_hosts(item: str, base_dir: Path | None) -> list[str]:
    path = Path(item[1:] if item.startswith("@") else item[len(INVENTORY_PREFIX) :])
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    return [check_host(h) for h in _load_inventory(path)]


def _range_hosts(item: str, m: re.Match[str], template: str) -> list[str]:
    p1, a, p2, b = m.group(1), m.group(2), m.group(3), m.group(4)
    if p2 and p2 != p1:
        raise ValueError(f"range {item!r} mixes prefixes {p1!r} and {p2!r}; write e.g. gpu601-gpu604")
    lo, hi = int(a), int(b)
    if lo > hi:
        raise ValueError(f"range {item!r} runs backwards; write it low-high, e.g. {b}-{a}")
    if hi - lo >= 4096:
        raise ValueError(f"range {item!r} expands to more than 4096 nodes")
    width = len(a) if a.startswith("0") else 0
    nums = (str(n).zfill(width) for n in range(lo, hi + 1))
    return [check_host(p1 + num if p1 else template.format(num)) for num in nums]


def _item_hosts(item: str, template: str, base_dir: Path | None) -> list[str]:
    """The hosts of one comma item: an inventory file, a range, a bare number or a host name."""
    if item.startswith(("@", INVENTORY_PREFIX)):
        return _inventory_hosts(item, base_dir)
    m = _RANGE_RE.match(item)
    if m:
        return _range_hosts(item, m, template)
    if item.isascii() and item.isdigit():
        return [check_host(template.format(item))]
    if not _HOST_RE.match(item):
        raise ValueError(
            f"{item!r} is neither a node number, a range (601-604, gpu601-gpu604), a host name nor inventory:FILE.toml"
        )
    return [check_host(item)]


def expand_nodes(text: str | Sequence[str], *, template: str = "{}", base_dir: Path | None = None) -> tuple[str, ...]:
    """Expand a node list into host names; node 0 of the result is rank 0.

    Accepted forms (comma separated, mixed freely): ``601-604``, ``601,603``, ``gpu601-gpu604``,
    plain host names, and ``inventory:FILE.toml`` or ``@FILE.toml`` (a TOML file with
    ``nodes = ["601", ...]``; on pytest's command line only ``inventory:`` works, since pytest reads
    ``@FILE`` as its own argument file).
    Bare numbers are passed through ``template`` (``"{}"`` keeps them as they are; ``"gpu{}"``
    turns ``601`` into ``gpu601``); names that carry letters are used verbatim.

    >>> expand_nodes("601-603")
    ('601', '602', '603')
    >>> expand_nodes("601,603", template="node{}.lan")
    ('node601.lan', 'node603.lan')
    """
    try:
        check_template(template)
    except ValueError as exc:
        raise ValueError(f"node template {exc}") from None
    items = _split(text)
    if not items:
        raise ValueError("the node list is empty; give e.g. 601-604, 601,603, gpu601-gpu604 or inventory:FILE")
    hosts = [h for item in items for h in _item_hosts(item, template, base_dir)]
    seen: set[str] = set()
    dupes = [h for h in hosts if h in seen or seen.add(h)]  # type: ignore[func-returns-value]
    if dupes:
        raise ValueError(f"node list names {', '.join(sorted(set(dupes)))} more than once")
    return tuple(hosts)
