"""Resolve the option table into one frozen :class:`Settings` object.

Precedence, per setting: command line > ``SSKJ_<NAME>`` environment variable > ``sskj_<name>`` ini
key > ``--profile`` file > engine default (:mod:`pytest_sskj.engines`) > table default.  Each value is
parsed where it is found, and a bad value raises ``pytest.UsageError`` naming its source, what is
accepted and a hint.  Cross-setting checks (GPUs per node, backends of the engine, ...) follow.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sskj import names, parsing, schema
from pytest_sskj.errors import ValueProblem
from pytest_sskj.redact import REDACTED, redact_argv, redact_url, url_without_userinfo

if TYPE_CHECKING:
    from pytest_sskj.acceptance.agreement import AgreementGate
    from pytest_sskj.accuracy.gate import Margin
    from pytest_sskj.accuracy.options import SetRef
    from pytest_sskj.deploy.layouts import Layout
    from pytest_sskj.deploy.topology import Topology
    from pytest_sskj.options import Option
    from pytest_sskj.profile import Profile
    from pytest_sskj.registry import Registry
    from pytest_sskj.server.container import ContainerConfig
    from pytest_sskj.slo import SloGate
    from pytest_sskj.speculative import SpecConfig

__all__ = ["Settings", "new_run_id", "resolve_settings", "usage_error", "where"]


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
    cpu_partition: str
    allow_mixed_builds: bool
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
    twin_model: str | None = None
    """The stand-in cluster's performance model (``--sskj-twin-model``; platform ``twin`` only)."""
    max_repeats: int | None = None
    """``--sskj-max-repeats``: the last look of the sequential A/B design (``None``: ``repeats``, fixed)."""
    plan_difference_pct: float = 5.0
    plan_spread_pct: float | None = None
    percentile_strict: bool = False
    container_image: str | None = None
    """``--sskj-container-image``: the image of ``--launcher container`` (else the platform's ``[container]``)."""
    container: ContainerConfig | None = None
    """``--launcher container``: the platform layer's ``[container]`` table as resolved (image, mounts, GPUs, env)."""
    serve_deployment: str | None = None
    """``--sskj-deployment``: the named deployment (``serve start``) whose URL became ``target_url``."""
    deployment: Topology | None = None
    """Named server groups and a router (PD disaggregation) from the profile's ``[deployment]`` table."""
    run_cpus: tuple[int, ...] = ()
    """The cores this run may use, read when the settings were built (before a CPU partition pins anything):
    what :func:`pytest_sskj.server.cpus.launch_partition` splits between the client and a local server."""
    compare_metrics: tuple[str, ...] = ("input_throughput", "median_ttft_ms", "p95_ttft_ms")
    """``--sskj-compare-metrics``: what every A/B judges, primary first (canonical names)."""
    speculative: tuple[SpecConfig, ...] = ()
    """``--sskj-speculative``: the configurations ``+NAME`` arms run (``()``: none)."""
    accuracy_set: SetRef | None = None
    """``--sskj-accuracy-set``: the question file as checked at parse time (``None``: no accuracy tests)."""
    accuracy_questions: int = 64
    accuracy_concurrencies: tuple[int, ...] = (1, 8)
    accuracy_extract: str = "flexible"
    accuracy_max_tokens: int = 256
    accuracy_min: Margin | None = None
    """``--sskj-accuracy-min``: the non-inferiority margin of every candidate (``None``: scores only)."""
    max_context: tuple[int, int] | None = None
    """``--sskj-max-context``: the (LO, HI) input lengths of the max-context probe (``None``: no probe)."""
    max_context_timeout_s: float = 300.0
    budget_prefill_tps: float = 2000.0
    """``--sskj-budget-prefill-tps``: the floor prefill rate a point's time budget assumes (acceptance/budget.py)."""
    budget_tpot_ms: float = 200.0
    plan_budget_h: float = 72.0
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
        d["accuracy_set"] = self.accuracy_set.as_dict() if self.accuracy_set else None
        d["accuracy_min"] = str(self.accuracy_min) if self.accuracy_min else None
        d["speculative"] = [c.as_dict() for c in self.speculative]
        d["env"] = sorted(k for k, _ in self.env)  # names only: values may be secrets
        d["server_args"] = redact_argv(self.server_args)  # --api-key V and --api-key=V
        d["request_rate"] = None if self.request_rate == float("inf") else self.request_rate
        d["sources"] = dict(self.sources)
        d["layouts"] = [lay.as_dict() for lay in self.layouts]
        d["shapes"] = [list(sh) for sh in self.shapes]
        d["deployment"] = self.deployment.as_dict() if self.deployment else None
        if self.container is not None:  # env by name only, as the container gets it
            d["container"] = {**d["container"], "env": sorted(k for k, _ in self.container.env)}
        d["db"] = redact_url(self.db) if self.db else None
        return d


def new_run_id() -> str:
    """A sortable, unique run id: ``20261129-235959-a1b2``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _accepted(opt: Option) -> str:
    return schema.accepted(opt)


def where(source: str, opt: Option, profile: Profile | None) -> str:
    """Where a value came from, for messages: ``--tp on the command line``, ``environment variable SSKJ_TP``, ..."""
    return {
        "cli": f"{opt.display} on the command line",
        "env": f"environment variable {opt.env}",
        "ini": f"ini key {opt.ini}",
        "profile": f"key {opt.dest!r} of profile {profile.origin(opt.dest) if profile else '?'}",
    }.get(source, opt.display)


def usage_error(opt: Option, where: str, problem: str, hint: str | None = None) -> pytest.UsageError:
    """The what / accepted / hint usage error of ``opt``."""
    msg = f"{where}: {problem}\n  accepted: {_accepted(opt)}"
    if hint:
        msg += f"\n  Hint: {hint}"
    return pytest.UsageError(msg)


class _Resolver:
    def __init__(self, config: pytest.Config, environ: Mapping[str, str], registry: Registry) -> None:
        self.config = config
        self.registry = registry
        self.environ = environ
        self.profile: Profile | None = None
        self.sources: dict[str, str] = {}
        self.node_template = "{}"
        """Resolved before ``nodes`` (which it expands), through the same precedence chain."""

    def raw(self, opt: Option) -> tuple[Any, str] | None:
        cli = self.config.getoption(f"sskj_{opt.dest}", None)
        if cli is not None:
            return cli, "cli"
        if opt.env in self.environ:  # an empty SSKJ_X= is a value too (and refused as empty), never "unset"
            val: Any = self.environ[opt.env]
            if opt.kind in ("append", "env", "ssh_options") and val.strip():
                # split on the separator only: a line break or tab in an item is the schema's to refuse
                val = [v for v in val.split(";" if opt.kind == "env" else " ") if v.strip()]
            return val, "env"
        ini = self.config.getini(opt.ini)
        if ini not in (None, "", []):
            return ini, "ini"
        if self.profile is not None and opt.dest in self.profile.values:
            return self.profile.values[opt.dest], "profile"
        return None

    def parse(self, opt: Option, value: Any, source: str) -> Any:
        """The typed value by the option's schema (:mod:`pytest_sskj.schema`), whatever its source."""
        place = where(source, opt, self.profile)
        try:
            return schema.parse_value(
                opt, value, extra=self.registry.parsers, nodes=lambda text: self._nodes(text, source)
            )
        except ValueError as exc:
            raise usage_error(opt, place, str(exc), _hint(opt)) from None

    def _nodes(self, text: str, source: str) -> tuple[str, ...]:
        base = self.profile.origin("nodes").parent if source == "profile" and self.profile else Path.cwd()
        return parsing.expand_nodes(text, template=self.node_template, base_dir=base)

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
        if opt.kind == "choice":
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
    from pytest_sskj.nodes import is_local_node

    return is_local_node(host)


def _check_environment(env: Mapping[str, str], options: tuple[Option, ...]) -> None:
    try:
        schema.check_environment(env, (o.env for o in options))
    except ValueError as exc:
        what, _, hint = str(exc).partition("\n  Hint: ")
        raise pytest.UsageError(
            f"{what}\n  accepted: the SSKJ_* variables of the options table (`pytest --help`, README.md) and the "
            f"declared infrastructure variables (pytest_sskj/schema.py: SSKJ_NETNS_*, SSKJ_REQUIRE_*, SSKJ_*_PYTHON, "
            f"SSKJ_VLLM_VENV, ...)\n  Hint: {hint}"
        ) from None


def _invocation_dir(config: pytest.Config) -> Path | None:
    params = getattr(config, "invocation_params", None)  # a stand-in config (tests) has none
    return Path(params.dir) if params is not None else None


def _load_profile(r: _Resolver, opt: Option) -> None:
    """The ``--profile`` of any source, loaded before every other option (it is a layer of their precedence)."""
    prof = r.raw(opt)
    if prof is None:
        return
    path = r.parse(opt, prof[0], prof[1])
    r.sources["profile"] = prof[1]
    invoked = _invocation_dir(r.config)
    search = [invoked] if invoked is not None else []
    search.append(Path(str(r.config.rootpath)))
    try:
        r.profile = r.registry.load_profile(path, search)
    except ValueProblem as exc:
        msg = f"{where(prof[1], opt, None)}: {exc.problem}\n  accepted: {exc.accepted}\n  Hint: {exc.hint}"
        raise pytest.UsageError(msg) from None
    except ValueError as exc:
        raise usage_error(
            opt, where(prof[1], opt, None), str(exc), "create the file, or fix the key names it reports"
        ) from None


def _settle(values: dict[str, Any], config: pytest.Config) -> None:
    """Empty repeatables as ``()``, the run id, the reports folder anchored where pytest was invoked, and the
    fallbacks of values that no engine default gave."""
    for dest in ("nodes", "server_args", "env", "ssh_options"):
        values[dest] = values[dest] or ()
    values["run_id"] = values["run_id"] or values.get("resume") or new_run_id()
    if values.get("target_url"):  # nothing sends URL credentials (the client never authenticates): none is kept
        values["target_url"] = url_without_userinfo(values["target_url"])
    # anchored where pytest was invoked: tests (pytester) and servers change the working directory later
    base = _invocation_dir(config) or Path.cwd()
    reports = Path(values["reports_dir"])
    values["reports_dir"] = reports if reports.is_absolute() else base / reports
    try:  # the run directory stays inside the reports dir, symlinks followed (the name itself was checked)
        names.inside(values["reports_dir"], values["run_id"], what="run id")
    except names.NameRefused as exc:
        raise pytest.UsageError(f"--run-id: {exc}\n  Hint: pick another run id, or remove the link") from None
    values["health_timeout_s"] = values["health_timeout_s"] or 60.0
    if values["stall_timeout_s"] is None:
        values["stall_timeout_s"] = 600.0
    if values["port"] is None:
        values["port"] = 0


def resolve_settings(config: pytest.Config, registry: Registry, environ: Mapping[str, str] | None = None) -> Settings:
    """Resolve every option row of ``registry``; raise ``pytest.UsageError`` on the first bad value or combination.

    What only a subsystem knows (its value parsers, the engines and their defaults, profiles, layouts and
    deployments, the cross-setting checks) comes through ``registry`` (:mod:`pytest_sskj.registry`, filled by
    :func:`pytest_sskj.subsystems.build_registry`); this module imports none of those subsystems."""
    env = os.environ if environ is None else environ
    options = registry.options
    _check_environment(env, options)
    r = _Resolver(config, env, registry)
    by_dest = {o.dest: o for o in options}
    _load_profile(r, by_dest["profile"])
    engine = r.get(by_dest["engine"], {}) or registry.default_engine
    info = registry.engine(engine)
    values: dict[str, Any] = {"engine": engine}
    registry.check_ini_keys(config, {o.ini for o in options})
    values["node_template"] = r.node_template = str(r.get(by_dest["node_template"], info.defaults) or "{}")
    for opt in options:
        if opt.dest not in values:
            values[opt.dest] = r.get(opt, info.defaults)
    values["profile"] = r.profile.path if r.profile else None
    _settle(values, config)
    registry.dimensions(values, r.profile, r.sources, by_dest)  # before the launcher: groups bring their nodes
    if values["launcher"] is None:
        remote = [h for h in values["nodes"] if not _is_local_host(h)]
        values["launcher"] = "ssh" if remote else "local"
        r.sources["launcher"] = "derived"
    values["run_cpus"] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    settings = Settings(sources=dict(r.sources), **values)
    registry.check_settings(settings, by_dest)
    return settings
