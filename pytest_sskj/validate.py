"""Checks of a resolved :class:`~pytest_sskj.settings.Settings` that need more than one value parser.

Every failure is a ``pytest.UsageError`` raised at configure time (before anything is launched or
written) that says what was wrong, what is accepted and a hint (:func:`usage`).  Engine-specific rules
live in each engine's ``check_settings`` hook (:mod:`pytest_sskj.engines`); these are the generic ones.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = [
    "MAX_MODEL_TOKENS",
    "MAX_PLAN_POINTS",
    "check_ini_keys",
    "check_settings",
    "plan_size",
    "unmapped_numeric_nodes",
    "usage",
]

MAX_MODEL_TOKENS = 10 * 1024 * 1024
"""ISL + OSL above this exceeds the context of every model (the longest, Llama 4 Scout, has 10M)."""


MAX_PLAN_POINTS = 10_000
"""The most serving points one run may plan: 10,000 points are a week at a minute each; a plan past it (an
ISL x OSL grid of 40,000 shapes, a matrix of millions) is refused at parse time, before it is enumerated."""


def usage(what: str, accepted: str, hint: str) -> pytest.UsageError:
    return pytest.UsageError(f"{what}\n  accepted: {accepted}\n  Hint: {hint}")


def check_ini_keys(config: pytest.Config, known: Iterable[str]) -> None:
    """An ``sskj_*`` ini key (ini file or ``-o``) that is no pytest-sskj setting is a typo: refuse it."""
    known_set = set(known)
    keys = set(getattr(config, "_inicfg", None) or {})  # the ini file's keys (config.inicfg is deprecated)
    for item in getattr(getattr(config, "option", None), "override_ini", None) or []:
        keys.add(str(item).partition("=")[0].strip())
    bad = sorted(k for k in keys if k.startswith("sskj_") and k not in known_set)
    if bad:
        import difflib

        close = [m for k in bad for m in difflib.get_close_matches(k, known_set, n=1)]
        raise usage(
            f"unknown pytest-sskj ini key(s) {', '.join(bad)}",
            "the sskj_* keys listed by `pytest --help` (e.g. sskj_nodes, sskj_backends, sskj_chunks)",
            f"did you mean {', '.join(close)}?" if close else "see the options table in README.md",
        )


def check_settings(s: Settings) -> None:
    """Every cross-setting and engine check; the first failure raises."""
    _check_plan_size(s)
    _check_local_python(s)
    _check_reports_dir(s)
    _check_run_id(s)
    if s.request_rate <= 0:
        raise usage(
            f"--sskj-request-rate {s.request_rate} sends no request at all",
            "a rate > 0 in requests/s, or inf",
            "--sskj-request-rate inf sends everything at once, bounded by --concurrency",
        )
    if s.stall_timeout_s <= 0:
        raise usage(
            f"--sskj-stall-timeout {s.stall_timeout_s:g} would call every request hung",
            "seconds > 0 (default: embedded 30, sglang/vllm 600)",
            "a 16K-token prefill at high concurrency needs minutes on a GPU server: --sskj-stall-timeout 600",
        )
    if s.isl + s.osl > MAX_MODEL_TOKENS:
        raise usage(
            f"--isl {s.isl} + --osl {s.osl} tokens exceeds the context of every model ({MAX_MODEL_TOKENS} tokens)",
            f"ISL + OSL <= {MAX_MODEL_TOKENS}",
            "sizes take a K suffix: --isl 16K",
        )
    if s.launcher == "ssh" and s.target_url is None:  # a dry run dials nothing but is checked like a real run
        _check_ssh_config(s)
        _check_numeric_nodes(s)
        if not s.dry_run and shutil.which("ssh") is None:
            raise usage(
                "the ssh launcher runs every rank through the OpenSSH client, and no 'ssh' is on PATH here",
                "a machine with the OpenSSH client installed (or --launcher local for this box's GPUs)",
                "apt-get install -y openssh-client (a dry run, --sskj-dry-run, plans without it)",
            )
    if not s.dry_run:  # last: nothing is created when an earlier check fails
        _create_reports_dir(s)


def plan_size(s: Settings) -> tuple[int, str]:
    """How many serving points ``s`` plans (counted, never enumerated) and the product that gives it:
    layouts x shapes x chunks x concurrencies x backends x repeats (the sequential A/B's --sskj-max-repeats when
    larger)."""
    several = bool(s.layouts) or len(s.shapes) > 1
    factors = (
        ("layouts", len(s.layouts) or 1),
        ("shapes", len(s.shapes) if several and s.shapes else 1),
        ("chunks", len(s.chunks) or 1),
        ("concurrencies", len(s.concurrencies) or 1),
        ("backends", len(s.backends) or 1),
        ("repeats", max(s.repeats, s.max_repeats or 0)),
    )
    total = 1
    for _, n in factors:
        total *= n
    return total, " x ".join(f"{n} {name}" for name, n in factors if n > 1) or "1 point"


def _check_plan_size(s: Settings) -> None:
    total, product = plan_size(s)
    if total > MAX_PLAN_POINTS:
        raise usage(
            f"the run plans {total:,} serving points ({product}), more than {MAX_PLAN_POINTS:,}",
            f"at most {MAX_PLAN_POINTS:,} points per run (a week at a minute a point)",
            "fewer values per list, --sskj-grid-limit N for the first N shapes of an ISL x OSL grid, "
            "or split the plan into runs (one --layout or shape list each)",
        )


def _check_local_python(s: Settings) -> None:
    """A local launch runs ``--sskj-python`` here: a path must be an executable file of this box (the schema
    already refused a non-executable file; a path absent here is only acceptable on remote nodes)."""
    if s.launcher != "local":
        return
    for flag, value in (("--sskj-python", s.python), ("--sskj-router-python", s.router_python)):
        if value and "/" in value and not Path(value).is_file():
            raise usage(
                f"{flag} {value} does not exist on this machine, and --launcher local runs it here",
                "a command name (python3) or the path of an executable file",
                f"{flag} {sys.executable}",
            )


def _check_reports_dir(s: Settings) -> None:
    from pytest_sskj.files import folder_problem

    d = s.reports_dir
    accepted = "a directory that exists or can be created, and that you can write to"
    problem = folder_problem(d)
    if problem is None:
        return
    kind, words = problem
    if kind == "unwritable":
        raise usage(
            f"--reports-dir {d}: {words}", accepted, "pick a directory you own, e.g. --reports-dir ~/sskj-reports"
        )
    raise usage(f"--reports-dir {d} {words}", accepted, "give a directory: --reports-dir reports")


def _create_reports_dir(s: Settings) -> None:
    """Create the reports root now, so that a path the OS refuses is a usage error, not an INTERNALERROR."""
    try:
        s.reports_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise usage(
            f"--reports-dir {s.reports_dir} cannot be created: {exc.strerror or exc}",
            "a directory that exists or can be created, and that you can write to",
            "pick a directory you own, e.g. --reports-dir ~/sskj-reports",
        ) from None


def _check_run_id(s: Settings) -> None:
    rid = s.run_id
    if not rid or "/" in rid or "\\" in rid or rid in (".", "..") or rid.startswith("."):
        raise usage(
            f"--run-id {rid!r} is not a folder name",
            "letters, digits, '-', '_' and '.', not starting with '.'",
            "e.g. --run-id kimi3-marlin-vs-mxfp4",
        )


# -- node names ----------------------------------------------------------------------------------------


def unmapped_numeric_nodes(nodes: Iterable[str], ssh_config: Path | None) -> list[str]:
    """Bare numeric node names that ssh would dial as IPv4 addresses (``601`` is 0.0.2.89 to getaddrinfo):
    those the ssh configuration (``ssh -G``, with ``-F`` when given) maps to no other host name."""
    numeric = [n for n in nodes if n.isdigit()]
    ssh = shutil.which("ssh")
    if not numeric:
        return []
    if ssh is None:  # no client here (a GPU image without openssh-client): read the configuration ourselves
        return _unmapped_by_reading(numeric, ssh_config)
    out = []
    for node in numeric:
        argv = [ssh, *(["-F", str(ssh_config)] if ssh_config else []), "-G", node]
        try:
            res = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []  # no verdict without ssh: the launcher reports what ssh says
        host = next((ln.split(None, 1)[1] for ln in res.stdout.splitlines() if ln.startswith("hostname ")), node)
        if res.returncode == 0 and host.strip() in (node, _as_ipv4(node)):  # ssh -G shows 601 as 0.0.2.89
            out.append(node)
    return out


def _unmapped_by_reading(numeric: list[str], ssh_config: Path | None) -> list[str]:
    """:func:`unmapped_numeric_nodes` without an ssh client: the ``Host`` blocks of the configuration (``-F`` file,
    else ``~/.ssh/config`` and ``/etc/ssh/ssh_config``) that set a ``HostName``, matched as ssh matches patterns
    (``*``, ``?``, ``!`` negation).  No verdict (``[]``) where only ssh could tell: an ``Include`` or ``Match``
    line, or a file that cannot be read."""
    from pytest_sskj.files import read_text_file

    paths = [ssh_config] if ssh_config else [Path.home() / ".ssh" / "config", Path("/etc/ssh/ssh_config")]
    mapped: set[str] = set()
    for path in paths:
        try:
            text = read_text_file(path, what="ssh configuration")
        except FileNotFoundError:
            continue
        except ValueError:
            return []
        found = _mapped_in(text, numeric)
        if found is None:
            return []
        mapped |= found
    return [n for n in numeric if n not in mapped]


def _mapped_in(text: str, numeric: list[str]) -> set[str] | None:
    """The nodes of ``numeric`` that a ``Host`` block of ``text`` gives another ``HostName``; ``None`` where an
    ``Include`` or ``Match`` line leaves the answer to ssh."""
    patterns: list[str] = ["*"]
    mapped: set[str] = set()
    for raw in text.splitlines():
        key, _, value = raw.strip().partition(" ")
        key, value = key.lower().rstrip("="), value.strip().lstrip("=").strip()
        if key in ("include", "match"):
            return None
        if key == "host":
            patterns = value.split()
        elif key == "hostname":  # %h: the name as given, which maps nothing
            mapped |= {n for n in numeric if value not in ("%h", n) and _host_matches(n, patterns)}
    return mapped


def _host_matches(node: str, patterns: list[str]) -> bool:
    import fnmatch

    pos = [x for x in patterns if not x.startswith("!")]
    neg = [x[1:] for x in patterns if x.startswith("!")]
    return any(fnmatch.fnmatchcase(node, x) for x in pos) and not any(fnmatch.fnmatchcase(node, x) for x in neg)


def _check_ssh_config(s: Settings) -> None:
    """``--sskj-ssh-config FILE`` that ssh itself cannot read (garbage, an Include loop, bad bytes): refused with
    ssh's own words, before any rank is launched through it."""
    ssh = shutil.which("ssh")
    if s.ssh_config is None or ssh is None or not s.nodes:
        return
    argv = [ssh, "-F", str(s.ssh_config), "-G", s.nodes[0]]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return  # no verdict: the launcher reports what ssh says
    if res.returncode != 0:
        said = next((ln.strip() for ln in res.stderr.splitlines() if ln.strip()), f"exit status {res.returncode}")
        raise usage(
            f"--sskj-ssh-config {s.ssh_config}: ssh cannot use it: {said[:300]}",
            "an ssh_config file ssh reads (`ssh -F FILE -G HOST` exits 0)",
            f"check it with `ssh -F {s.ssh_config} -G {s.nodes[0]}`",
        )


def _check_numeric_nodes(s: Settings) -> None:
    bad = unmapped_numeric_nodes(s.nodes, s.ssh_config)
    if bad:
        cfg = f" ({s.ssh_config})" if s.ssh_config else " (~/.ssh/config)"
        raise usage(
            f"node name(s) {', '.join(bad)} are bare numbers that no ssh configuration{cfg} maps to a host name; "
            f"ssh would dial {bad[0]} as the IPv4 address {_as_ipv4(bad[0])}",
            "host names, or numbers mapped by --sskj-node-template or an ssh_config 'Host' entry",
            f"--sskj-node-template 'gpu{{}}' (node {bad[0]} -> host gpu{bad[0]}), or --sskj-ssh-config FILE with "
            f"'Host {bad[0]}' / 'HostName <address>' entries",
        )


def _as_ipv4(n: str) -> str:
    v = int(n) & 0xFFFFFFFF
    return ".".join(str((v >> s) & 255) for s in (24, 16, 8, 0))


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns:
    the ini-key check and the generic cross-setting checks."""
    registry.add_ini_check(check_ini_keys)
    registry.add_check(lambda s, _opts: check_settings(s))
