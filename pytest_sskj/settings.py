"""Resolve the option table into one frozen :class:`Settings` object.

Precedence, per setting: command line > ``SSKJ_<NAME>`` environment variable > ``sskj_<name>`` ini
key > ``--profile`` file > engine default (:mod:`pytest_sskj.engines`) > table default.  Each value is
parsed where it is found, and a bad value raises ``pytest.UsageError`` naming its source, what is
accepted and a hint.  Cross-setting checks (GPUs per node, backends of the engine, ...) follow.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj import parsing
from pytest_sskj.acceptance.agreement import AgreementGate, parse_gates
from pytest_sskj.deploy.layouts import Layout, build_shapes, layout_problems, parse_size_seq, resolve_layouts
from pytest_sskj.deploy.topology import Topology, bind_run, topology_from_table
from pytest_sskj.engines import DEFAULT_ENGINE, get_engine
from pytest_sskj.options import OPTIONS, Option
from pytest_sskj.profile import Profile, find_profile, load_profile, settle_matrix
from pytest_sskj.report.redact import REDACTED, redact_argv, redact_url
from pytest_sskj.slo import SloGate, parse_slo
from pytest_sskj.validate import check_ini_keys, check_settings

__all__ = ["Settings", "new_run_id", "resolve_settings"]


@dataclass(frozen=True)
class Settings:
    """Every resolved pytest-sskj setting.  Built once per session; stored in ``config.stash``."""

    engine: str
    nodes: tuple[str, ...]
    node_template: str
    launcher: str
    placement: str
    target_url: str | None
    model_path: str | None
    model_name: str | None
    platform: str | None
    profile: Path | None
    tp: int
    ep: int
    dp: int
    pp: int
    gpus_per_node: int
    backends: tuple[str, ...]
    chunks: tuple[int, ...]
    concurrencies: tuple[int, ...]
    requests: int
    repeats: int
    warmup: int
    isl: int
    osl: int
    endpoint: str
    request_rate: float
    seed: int
    slo: tuple[SloGate, ...]
    margin_pct: float
    compare_expect: str
    agreement_min: tuple[AgreementGate, ...]
    agreement_prompts: int
    allow_client_bound: bool
    expect_best_chunk: int | None
    search: str
    search_max: int
    search_floor: int | None
    resume: str | None
    port: int
    dist_init_port: int
    health_timeout_s: float
    stall_timeout_s: float
    server_args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    python: str | None
    ssh_user: str | None
    ssh_port: int
    ssh_identity: Path | None
    ssh_options: tuple[str, ...]
    ssh_config: Path | None
    require_gpu: bool
    gpu_wait_s: float
    reports_dir: Path
    run_id: str
    db: str | None
    baseline_ref: str | None
    regression_margin_pct: float
    dry_run: bool
    shape_mode: str = "grid"
    grid_limit: int | None = None
    layouts: tuple[Layout, ...] = ()
    """Parallel layouts to compare (``--layout`` / the profile's ``[[layouts]]``); empty: the run's one
    ``tp``/``dp``/``ep``/``pp``."""
    shapes: tuple[tuple[int, int], ...] = ()
    """Every (ISL, OSL) of the run; ``isl``/``osl`` are the first one."""
    expect_layout: str | None = None
    throughput_floor: float | None = None
    recommend_metric: str = "total_throughput"
    router_python: str | None = None
    deployment: Topology | None = None
    """Named server groups and a router (PD disaggregation) from the profile's ``[deployment]`` table."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Where each setting came from: ``cli``, ``env``, ``ini``, ``profile``, ``engine`` or ``default``."""

    @property
    def run_dir(self) -> Path:
        return self.reports_dir / self.run_id

    @property
    def run_dir_display(self) -> str:
        """The run directory relative to the working directory when it lies below it (for humans)."""
        try:
            return str(self.run_dir.relative_to(Path.cwd()))
        except ValueError:
            return str(self.run_dir)

    @property
    def baseline(self) -> str:
        return self.backends[0]

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def launches(self) -> bool:
        """Whether this run starts servers (no ``--target-url``, not a dry run)."""
        return self.target_url is None and not self.dry_run

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly view (paths as strings, gates as text); env values are *not* included."""
        d = asdict(self)
        d["profile"] = str(self.profile) if self.profile else None
        d["reports_dir"] = str(self.reports_dir)
        d["ssh_identity"] = REDACTED if self.ssh_identity else None  # an identity path is a secret too
        d["ssh_config"] = str(self.ssh_config) if self.ssh_config else None
        d["slo"] = [str(g) for g in self.slo]
        d["agreement_min"] = [str(g) for g in self.agreement_min]
        d["env"] = sorted(k for k, _ in self.env)  # names only: values may be secrets
        d["server_args"] = redact_argv(self.server_args)  # --api-key V and --api-key=V
        d["request_rate"] = None if self.request_rate == float("inf") else self.request_rate
        d["sources"] = dict(self.sources)
        d["layouts"] = [lay.as_dict() for lay in self.layouts]
        d["shapes"] = [list(sh) for sh in self.shapes]
        d["deployment"] = self.deployment.as_dict() if self.deployment else None
        d["db"] = redact_url(self.db) if self.db else None
        return d


def new_run_id() -> str:
    """A sortable, unique run id: ``20261129-235959-a1b2``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _parse_env_pairs(items: list[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in items:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip() or not name.strip().replace("_", "").isalnum():
            raise ValueError(f"{item!r} is not KEY=VALUE")
        out.append((name.strip(), value))
    return tuple(out)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "str": lambda v: str(v).strip() or None,
    "int": lambda v: parsing.parse_int(v, minimum=1),
    "int0": lambda v: parsing.parse_int(v, minimum=0),
    "port": lambda v: parsing.parse_port(v, minimum=0),
    "port1": lambda v: parsing.parse_port(v, minimum=1),
    "float": lambda v: float(v) if str(v).strip().lower() in ("inf", "+inf") else _nonneg_float(v),
    "bool": parsing.parse_bool,
    "size": parsing.parse_size,
    "size_list": parsing.parse_size_list,
    "int_list": parsing.parse_int_list,
    "name_list": parsing.parse_name_list,
    "backend_list": lambda v: parsing.parse_name_list(v, twice_ok=True),
    "path": lambda v: Path(str(v)).expanduser(),
    "slo": parse_slo,
    "agreement": parse_gates,
    "size_seq": parse_size_seq,
}


def _nonneg_float(v: Any) -> float:
    try:
        f = float(str(v).strip())
    except ValueError:
        raise ValueError(f"{v!r} is not a number") from None
    if f < 0:
        raise ValueError(f"{v!r} must not be negative")
    return f


def _accepted(opt: Option) -> str:
    return {
        "int": "a whole number >= 1",
        "int0": "a whole number >= 0",
        "port": "a TCP port 1-65535, or 0 to pick a free one",
        "port1": "a TCP port 1-65535",
        "float": "a number >= 0 (or inf)",
        "bool": "1/0, true/false",
        "size": "a token count with optional K suffix: 1, 512, 16K",
        "size_list": "a comma list of sizes: 4096,8K,16k",
        "size_seq": "a size or a comma list of sizes: 16K, 1K,16K",
        "int_list": "a comma list of whole numbers >= 1: 8,16",
        "name_list": "a comma list of names: marlin,flashinfer_mxfp4",
        "backend_list": "a comma list of names, baseline first: marlin,flashinfer_mxfp4 (a name twice: A/A control)",
        "nodes": "601-604, 601,603, gpu601-gpu604, host names, inventory:FILE.toml",
        "choice": ", ".join(opt.choices),
        "slo": "gates METRIC OP NUMBER like p95_ttft_ms<3000,p95_tpot_ms<50 (OP < <= > >=), or none",
        "agreement": "gates like first_token_agreement_frac>=0.95,identical_seq_frac>=1, a bare fraction, or none",
        "append": "KEY=VALUE" if opt.dest == "env" else "any string",
    }.get(opt.kind, "a string")


def _where(source: str, opt: Option, profile: Profile | None) -> str:
    return {
        "cli": f"{opt.display} on the command line",
        "env": f"environment variable {opt.env}",
        "ini": f"ini key {opt.ini}",
        "profile": f"key {opt.dest!r} of profile {profile.origin(opt.dest) if profile else '?'}",
    }.get(source, opt.display)


def _usage(opt: Option, where: str, problem: str, hint: str | None = None) -> pytest.UsageError:
    msg = f"{where}: {problem}\n  accepted: {_accepted(opt)}"
    if hint:
        msg += f"\n  Hint: {hint}"
    return pytest.UsageError(msg)


class _Resolver:
    def __init__(self, config: pytest.Config, environ: Mapping[str, str]) -> None:
        self.config = config
        self.environ = environ
        self.profile: Profile | None = None
        self.sources: dict[str, str] = {}
        self.node_template = "{}"
        """Resolved before ``nodes`` (which it expands), through the same precedence chain."""

    def raw(self, opt: Option) -> tuple[Any, str] | None:
        cli = self.config.getoption(f"sskj_{opt.dest}", None)
        if cli is not None:
            return cli, "cli"
        if opt.env in self.environ and self.environ[opt.env].strip() != "":
            val: Any = self.environ[opt.env]
            if opt.kind == "append":
                val = [v for v in val.split(";") if v.strip()] if opt.dest == "env" else val.split()
            return val, "env"
        ini = self.config.getini(opt.ini)
        if ini not in (None, "", []):
            return ini, "ini"
        if self.profile is not None and opt.dest in self.profile.values:
            return self.profile.values[opt.dest], "profile"
        return None

    def parse(self, opt: Option, value: Any, source: str) -> Any:
        where = _where(source, opt, self.profile)
        try:
            if opt.kind == "choice":
                text = str(value).strip()
                if text not in opt.choices:
                    raise ValueError(f"{text!r} is not one of {', '.join(opt.choices)}")
                return text
            if opt.kind == "append":
                items = [value] if isinstance(value, str) else list(value)
                return _parse_env_pairs(items) if opt.dest == "env" else tuple(str(v) for v in items)
            if opt.kind == "nodes":
                base = self.profile.origin("nodes").parent if source == "profile" and self.profile else Path.cwd()
                return parsing.expand_nodes(value, template=self.node_template, base_dir=base)
            return _PARSERS[opt.kind](value)
        except ValueError as exc:
            raise _usage(opt, where, str(exc), _hint(opt)) from None

    def get(self, opt: Option, engine_defaults: Mapping[str, Any]) -> Any:
        found = self.raw(opt)
        if found is not None:
            value, source = found
            self.sources[opt.dest] = source
            return self.parse(opt, value, source)
        if opt.dest in engine_defaults:
            self.sources[opt.dest] = "engine"
            return engine_defaults[opt.dest]
        self.sources[opt.dest] = "default"
        if opt.default is None:
            return None
        if opt.kind in ("str", "choice"):
            return opt.default
        return self.parse(opt, opt.default, "default")


def _hint(opt: Option) -> str | None:
    return {
        "nodes": "e.g. --nodes 601-604 (ranges run low-high), --nodes 601,603, or --nodes inventory:FILE.toml",
        "chunks": "chunk sizes are tokens per prefill step: --chunk 4K,8K,16K",
        "concurrencies": "concurrencies are client-side in-flight requests: --concurrency 8,16",
        "engine": "--engine sglang for SGLang, --engine embedded for the CPU engine",
        "slo": "--sskj-slo 'p95_ttft_ms<3000,p95_tpot_ms<50' (metric names as in results.csv; docs/verdicts.md)",
        "agreement_min": "--sskj-agreement-min identical_seq_frac>=1 (bit-identical), 0.95, or none",
        "profile": "profiles are TOML files or names such as pro6000/kimi3-sglang-pd; "
        "`python -m pytest_sskj profiles` lists them",
    }.get(opt.dest, f"see `pytest --help`, option {opt.display}")


def _is_local_host(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1", socket.gethostname())


def resolve_settings(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Settings:
    """Resolve every option; raise ``pytest.UsageError`` on the first bad value or combination."""
    r = _Resolver(config, os.environ if environ is None else environ)
    by_dest = {o.dest: o for o in OPTIONS}

    prof = r.raw(by_dest["profile"])
    if prof is not None:
        path = r.parse(by_dest["profile"], prof[0], prof[1])
        r.sources["profile"] = prof[1]
        try:
            params = getattr(config, "invocation_params", None)
            search = [Path(params.dir)] if params is not None else []
            search.append(Path(str(config.rootpath)))
            r.profile = load_profile(find_profile(path, search))
        except ValueError as exc:
            raise _usage(
                by_dest["profile"],
                _where(prof[1], by_dest["profile"], None),
                str(exc),
                "create the file, or fix the key names it reports",
            ) from None

    engine = r.get(by_dest["engine"], {}) or DEFAULT_ENGINE
    info = get_engine(engine)
    values: dict[str, Any] = {"engine": engine}
    check_ini_keys(config, {o.ini for o in OPTIONS})
    values["node_template"] = r.node_template = str(r.get(by_dest["node_template"], info.defaults) or "{}")
    for opt in OPTIONS:
        if opt.dest in values:
            continue
        values[opt.dest] = r.get(opt, info.defaults)
    settle_matrix(values, r.sources, info.backends, r.profile)  # the engine's reference job: no profile's own
    values["profile"] = r.profile.path if r.profile else None
    values["nodes"] = values["nodes"] or ()
    values["server_args"] = values["server_args"] or ()
    values["env"] = values["env"] or ()
    values["ssh_options"] = values["ssh_options"] or ()
    values["run_id"] = values["run_id"] or values.get("resume") or new_run_id()
    # anchored where pytest was invoked: tests (pytester) and servers change the working directory later
    params = getattr(config, "invocation_params", None)
    base = Path(params.dir) if params is not None else Path.cwd()
    values["reports_dir"] = (
        Path(values["reports_dir"]) if Path(values["reports_dir"]).is_absolute() else (base / values["reports_dir"])
    )
    values["health_timeout_s"] = values["health_timeout_s"] or 60.0
    if values["stall_timeout_s"] is None:
        values["stall_timeout_s"] = 600.0
    if values["port"] is None:
        values["port"] = 0
    _dimensions(values, r, by_dest)  # before the launcher: a deployment's groups bring their nodes
    if values["launcher"] is None:
        remote = [h for h in values["nodes"] if not _is_local_host(h)]
        values["launcher"] = "ssh" if remote else "local"
        r.sources["launcher"] = "derived"
    settings = Settings(sources=dict(r.sources), **values)
    _check_combination(settings, by_dest)
    check_settings(settings)
    return settings


def _dimensions(values: dict[str, Any], r: _Resolver, opts: Mapping[str, Option]) -> None:
    """Layouts and shapes from their options (and the profile's ``[[layouts]]`` tables)."""
    tables = r.profile.layouts if r.profile else ()
    where = str(r.profile.path) if r.profile else "profile"
    src = r.sources.get("layouts", "default")
    try:
        values["layouts"] = resolve_layouts(values["layouts"], tables, where)
    except ValueError as exc:
        raise _usage(
            opts["layouts"], _where(src, opts["layouts"], r.profile), str(exc), "e.g. --layout tp2dp4,tp4dp2,tp8dp1"
        ) from None
    isl, osl = parse_size_seq(values["isl"]), parse_size_seq(values["osl"])
    try:
        values["shapes"] = build_shapes(isl, osl, mode=values["shape_mode"], limit=values["grid_limit"])
    except ValueError as exc:
        raise _usage(
            opts["shape_mode"],
            _where(r.sources.get("shape_mode", "default"), opts["shape_mode"], r.profile),
            str(exc),
            "give as many --isl as --osl values, or use --sskj-shape-mode grid",
        ) from None
    values["isl"], values["osl"] = values["shapes"][0]
    if r.profile is not None and r.profile.deployment is not None:
        try:
            topo = topology_from_table(r.profile.deployment, where, template=values["node_template"])
        except ValueError as exc:
            raise pytest.UsageError(
                f"{exc}\n  accepted: see pytest_sskj/deploy/topology.py (groups: name, role, nodes, tp/dp/ep/pp, "
                "backend, chunk, server_args, env; router: port, node, policy)\n  Hint: fix the key the message names"
            ) from None
        _bind_deployment(values, r, opts, topo)


def _bind_deployment(values: dict[str, Any], r: _Resolver, opts: Mapping[str, Option], topo: Topology) -> None:
    """The run's nodes, backend and chunk bound into the deployment's groups (deploy/topology.py: bind_run)."""

    def given(dest: str) -> tuple[Any, str]:
        src = r.sources.get(dest, "default")
        return (values[dest] or ()) if src not in ("engine", "default") else (), _where(src, opts[dest], r.profile)

    (nodes, nodes_from), (backends, b_from), (chunks, c_from) = given("nodes"), given("backends"), given("chunks")
    try:
        topo = bind_run(topo, nodes=nodes, nodes_from=nodes_from, backends=backends, backends_from=b_from,
                        chunks=chunks, chunks_from=c_from)  # fmt: skip
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    values["deployment"], values["nodes"] = topo, topo.nodes
    values["backends"], values["chunks"] = (topo.arm,), ()


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
                replace(
                    s,
                    nodes=g.nodes,
                    tp=g.tp,
                    dp=g.dp,
                    ep=g.ep,
                    pp=g.pp,
                    placement=g.placement,
                    deployment=None,
                    backends=(g.backend,) if g.backend else (),
                    chunks=(g.chunk,) if g.chunk else (),
                ),
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


def _check_combination(s: Settings, opts: Mapping[str, Option]) -> None:
    info = get_engine(s.engine)
    unknown = [b for b in s.backends if b not in info.backends] if s.deployment is None else []
    if unknown:
        where = _where(s.sources.get("backends", "cli"), opts["backends"], None)
        raise pytest.UsageError(
            f"{where}: backend(s) {', '.join(unknown)} unknown to engine {s.engine!r}\n"
            f"  accepted: {', '.join(info.backends)} (the backends of engine {s.engine}, applied as "
            f"{info.backend_switch.describe()})\n"
            f"  Hint: --backend {','.join(info.defaults.get('backends') or info.backends[:2])}, "
            "or pick another --engine"
        )
    _check_layouts(s)
    if s.endpoint not in info.endpoints:
        where = _where(s.sources.get("endpoint", "cli"), opts["endpoint"], None)
        raise pytest.UsageError(
            f"{where}: endpoint {s.endpoint!r} is not served by engine {s.engine!r}\n"
            f"  accepted: {', '.join(info.endpoints)} (the endpoints of engine {s.engine})\n"
            f"  Hint: engine {s.engine} serves: {', '.join(info.endpoints)}; --sskj-endpoint {info.endpoints[0]}, "
            "or pick another --engine"
        )
    _engine_checks(s, info)
    if s.launcher == "ssh" and not s.nodes:
        raise pytest.UsageError("--launcher ssh needs --nodes\n  Hint: --nodes 601-604 --launcher ssh")
    if s.target_url is not None:
        if s.sources.get("nodes") in ("cli", "env", "ini"):
            nodes_where = _where(s.sources["nodes"], opts["nodes"], None)
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
