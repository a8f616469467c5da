"""Checks of a resolved :class:`~pytest_sskj.settings.Settings` that need more than one value parser.

Every failure is a ``pytest.UsageError`` raised at configure time (before anything is launched or
written) that says what was wrong, what is accepted and a hint (:func:`usage`).  Engine-specific rules
live in each engine's ``check_settings`` hook (:mod:`pytest_sskj.engines`); these are the generic ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sskj.deploy.layouts import build_shapes, layout_problems, parse_size_seq, resolve_layouts
from pytest_sskj.deploy.topology import topology_from_table
from pytest_sskj.engines import get_engine
from pytest_sskj.settings import usage_error, where

if TYPE_CHECKING:
    from pytest_sskj.options import Option
    from pytest_sskj.profile import Profile
    from pytest_sskj.settings import Settings

__all__ = [
    "MAX_MODEL_TOKENS",
    "check_all",
    "check_combination",
    "check_ini_keys",
    "check_settings",
    "dimensions",
    "unmapped_numeric_nodes",
    "usage",
]

MAX_MODEL_TOKENS = 10 * 1024 * 1024
"""ISL + OSL above this exceeds the context of every model (the longest, Llama 4 Scout, has 10M)."""


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
    if s.launcher == "ssh" and s.launches:
        _check_numeric_nodes(s)
    if not s.dry_run:  # last: nothing is created when an earlier check fails
        _create_reports_dir(s)


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
    d = s.reports_dir
    accepted = "a directory that exists or can be created, and that you can write to"
    for p in (d, *d.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == d else f"lies below {p}, which is a file"
                raise usage(f"--reports-dir {d} {what}", accepted, "give a directory: --reports-dir reports")
            if not os.access(p, os.W_OK | os.X_OK):
                raise usage(
                    f"--reports-dir {d}: {p} is not writable by this user",
                    accepted,
                    "pick a directory you own, e.g. --reports-dir ~/sskj-reports",
                )
            return


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
    if not numeric or ssh is None:
        return []
    out = []
    for node in numeric:
        argv = [ssh, *(["-F", str(ssh_config)] if ssh_config else []), "-G", node]
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []  # no verdict without ssh: the launcher reports what ssh says
        host = next((ln.split(None, 1)[1] for ln in res.stdout.splitlines() if ln.startswith("hostname ")), node)
        if res.returncode == 0 and host.strip() in (node, _as_ipv4(node)):  # ssh -G shows 601 as 0.0.2.89
            out.append(node)
    return out


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


# -- cross-setting checks (moved from settings.py: they need the engines and the layouts) ----------------------


def dimensions(
    values: dict[str, Any], profile: Profile | None, sources: Mapping[str, str], opts: Mapping[str, Option]
) -> None:
    """Layouts and shapes from their options (and the profile's ``[[layouts]]`` tables)."""
    tables = profile.layouts if profile else ()
    origin = str(profile.path) if profile else "profile"
    src = sources.get("layouts", "default")
    try:
        values["layouts"] = resolve_layouts(values["layouts"], tables, origin)
    except ValueError as exc:
        raise usage_error(
            opts["layouts"], where(src, opts["layouts"], profile), str(exc), "e.g. --layout tp2dp4,tp4dp2,tp8dp1"
        ) from None
    isl, osl = parse_size_seq(values["isl"]), parse_size_seq(values["osl"])
    try:
        values["shapes"] = build_shapes(isl, osl, mode=values["shape_mode"], limit=values["grid_limit"])
    except ValueError as exc:
        raise usage_error(
            opts["shape_mode"],
            where(sources.get("shape_mode", "default"), opts["shape_mode"], profile),
            str(exc),
            "give as many --isl as --osl values, or use --sskj-shape-mode grid",
        ) from None
    values["isl"], values["osl"] = values["shapes"][0]
    if profile is not None and profile.deployment is not None:
        try:
            values["deployment"] = topology_from_table(profile.deployment, origin)
        except ValueError as exc:
            raise pytest.UsageError(
                f"{exc}\n  accepted: see pytest_sskj/deploy/topology.py (groups: name, role, nodes, tp/dp/ep/pp, "
                "backend, chunk, server_args, env; router: port, node, policy)\n  Hint: fix the key the message names"
            ) from None


def _check_layouts(s: Settings) -> None:
    nnodes = max(1, len(s.nodes))
    from pytest_sskj.server.spec import ServerSpec

    # GPU fit only for engines that take GPUs (the engine's own checks run per layout in _engine_checks)
    gpu_engine = get_engine(s.engine).world_size(ServerSpec(engine=s.engine, backend=s.baseline)) > 0
    problems = [
        p for lay in s.layouts if gpu_engine for p in layout_problems(lay, nnodes=nnodes, gpus_per_node=s.gpus_per_node)
    ]
    if problems:
        raise pytest.UsageError(
            "--layout: " + "; ".join(problems) + f"\n  accepted: layouts whose TPxPPxDP fits {nnodes} node(s) x "
            f"{s.gpus_per_node} GPUs ({', '.join(s.nodes) or 'local'})"
            "\n  Hint: drop the layout, add --nodes, or set --sskj-gpus-per-node / the platform profile"
        )
    given = [f"--{k}" for k in ("tp", "dp", "ep", "pp") if s.sources.get(k) == "cli"]
    if s.layouts and given:
        raise pytest.UsageError(
            f"{' '.join(given)} and --layout both set parallel sizes; each layout carries its own"
            "\n  accepted: --layout tp2dp4,tp4dp2 alone, or --tp/--dp/--ep/--pp without --layout"
            "\n  Hint: drop the size flags, or write the layout you mean, e.g. --layout tp8ep4"
        )
    if s.layouts and s.deployment is not None:
        raise pytest.UsageError(
            "--layout and a profile's [deployment] both place the servers; a deployment's groups carry their own sizes"
            "\n  Hint: use a profile without [deployment] for a layout matrix"
        )
    names = [lay.name for lay in s.layouts]
    if s.expect_layout is not None and s.expect_layout not in names:
        raise pytest.UsageError(
            f"--sskj-expect-layout {s.expect_layout} is not one of the layouts {', '.join(names) or '(none)'}"
            "\n  Hint: add it to --layout"
        )


def _engine_checks(s: Settings, info: Any) -> None:
    """The engine's checks, once per layout or deployment group when the run has them (each is a server)."""
    from dataclasses import replace

    cells: list[tuple[str, Settings]] = []
    if s.layouts:
        cells = [(f"layout {x.name}", replace(s, tp=x.tp, dp=x.dp, ep=x.ep, pp=x.pp, layouts=())) for x in s.layouts]
    elif s.deployment is not None:
        cells = [
            (
                f"deployment group {g.name}",
                replace(s, nodes=g.nodes, tp=g.tp, dp=g.dp, ep=g.ep, pp=g.pp, placement=g.placement, deployment=None),
            )
            for g in s.deployment.groups
        ]
    if not cells:
        info.check_settings(s)
        return
    for what, cell in cells:
        try:
            info.check_settings(cell)
        except pytest.UsageError as exc:
            raise pytest.UsageError(f"{what}: {exc}") from None


def check_combination(s: Settings, opts: Mapping[str, Option]) -> None:
    info = get_engine(s.engine)
    unknown = [b for b in s.backends if b not in info.backends]
    if unknown:
        place = where(s.sources.get("backends", "cli"), opts["backends"], None)
        raise pytest.UsageError(
            f"{place}: backend(s) {', '.join(unknown)} unknown to engine {s.engine!r}\n"
            f"  accepted: {', '.join(info.backends)} (the backends of engine {s.engine}, applied as "
            f"{info.backend_switch.describe()})\n"
            f"  Hint: --backend {','.join(info.defaults.get('backends') or info.backends[:2])}, "
            "or pick another --engine"
        )
    _check_layouts(s)
    if s.endpoint not in info.endpoints:
        place = where(s.sources.get("endpoint", "cli"), opts["endpoint"], None)
        raise pytest.UsageError(
            f"{place}: endpoint {s.endpoint!r} is not served by engine {s.engine!r}\n"
            f"  accepted: {', '.join(info.endpoints)} (the endpoints of engine {s.engine})\n"
            f"  Hint: engine {s.engine} serves: {', '.join(info.endpoints)}; --sskj-endpoint {info.endpoints[0]}, "
            "or pick another --engine"
        )
    _engine_checks(s, info)
    if s.launcher == "ssh" and not s.nodes:
        raise pytest.UsageError("--launcher ssh needs --nodes\n  Hint: --nodes 601-604 --launcher ssh")
    if s.target_url is not None:
        if s.sources.get("nodes") in ("cli", "env", "ini"):
            nodes_where = where(s.sources["nodes"], opts["nodes"], None)
            raise pytest.UsageError(
                f"--target-url benchmarks a server that is already running; --nodes (from {nodes_where}) "
                "would launch one\n  accepted: one of them\n  Hint: drop --target-url, or unset the nodes "
                "(unset SSKJ_NODES / remove sskj_nodes from the ini)"
            )
    if s.expect_best_chunk is not None and s.expect_best_chunk not in s.chunks:
        raise pytest.UsageError(
            f"--expect-best-chunk {s.expect_best_chunk} is not one of the chunks "
            f"{','.join(map(str, s.chunks))}\n  Hint: add it to --chunk"
        )
    if s.search_floor is not None and s.search_floor > s.search_max:
        raise pytest.UsageError(f"--sskj-search-floor {s.search_floor} is above --sskj-search-max {s.search_max}")
    if s.osl < 1 or s.isl < 1:
        raise pytest.UsageError("--isl and --osl must be at least 1")


def check_all(s: Settings, opts: Mapping[str, Option]) -> None:
    """The engine/layout combination checks, then the generic ones (:func:`check_settings`)."""
    check_combination(s, opts)
    check_settings(s)
