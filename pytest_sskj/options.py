"""The option table: every pytest-sskj setting, its command-line flags, ini key and env variable.

One row per setting.  ``pytest_addoption`` registers the flags (group ``sskj``) and the ini keys
from this table; :mod:`pytest_sskj.settings` resolves each row CLI > ``SSKJ_*`` > ``sskj_*`` ini >
profile > engine default > default.  Help strings are written once, here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pytest

__all__ = ["OPTIONS", "Option", "check_raw_args", "register_options"]

Kind = Literal[
    "str",
    "int",
    "int0",
    "port",
    "port1",
    "float",
    "bool",
    "size",
    "size_list",
    "int_list",
    "name_list",
    "backend_list",
    "nodes",
    "path",
    "choice",
    "append",
    "env",
    "ssh_options",
    "slo",
    "agreement",
    "size_seq",
    "layouts",
    "url",
    "db",
    "run_id",
    "ref",
    "name",
    "user",
    "template",
    "command",
]
"""The value kinds of :mod:`pytest_sskj.schema` (each kind's rules are written there)."""

MAX_TOKENS = 10 * 1024 * 1024
"""Longest prompt or output of any model (Llama 4 Scout's 10M-token context); sizes above it cannot run."""
MAX_CONCURRENCY = 65536
"""A client holds one connection per request in flight; one box has at most ~64K ephemeral ports."""
DAY_S = 86400.0


@dataclass(frozen=True)
class Option:
    """One setting of the option table: its flags, its value's schema (kind, bounds, unit) and its help."""

    dest: str
    flags: tuple[str, ...]
    kind: Kind
    help: str
    default: object = None
    choices_of: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    """The accepted words of a ``choice`` row, or a function giving them (asked only when needed)."""
    metavar: str | None = None
    lo: float | None = None
    """Smallest accepted number (``lo_open``: the number must be greater)."""
    hi: float | None = None
    """Largest accepted number: what the system can do (``bound_why`` says why)."""
    unit: str = ""
    lo_open: bool = False
    allow_inf: bool = False
    bound_why: str = ""

    @property
    def choices(self) -> tuple[str, ...]:
        return self.choices_of() if callable(self.choices_of) else self.choices_of

    @property
    def ini(self) -> str:
        return f"sskj_{self.dest}"

    @property
    def env(self) -> str:
        return f"SSKJ_{self.dest.upper()}"

    @property
    def display(self) -> str:
        return self.flags[0]


def _engine_names() -> tuple[str, ...]:
    from pytest_sskj.registry import engine_names

    return engine_names()


OPTIONS: tuple[Option, ...] = (
    # --- what to launch -------------------------------------------------------------------------
    Option(
        "engine",
        ("--engine",),
        "choice",
        "Serving engine: embedded (default: the CPU llama.cpp engine), sglang, vllm, or another registered engine",
        choices_of=_engine_names,
    ),
    Option(
        "nodes",
        ("--nodes",),
        "nodes",
        "Nodes to launch on, rank 0 first: 601-604, 601,603, gpu601-gpu604, host names or inventory:FILE.toml "
        "(a TOML file with nodes = [...]; on the command line pytest itself reads @FILE as an argument file)",
        metavar="LIST",
    ),
    Option(
        "node_template",
        ("--sskj-node-template",),
        "template",
        "Host name template for bare node numbers, '{}' is the number (default '{}': node 601 is host 601)",
        default="{}",
    ),
    Option(
        "launcher",
        ("--launcher",),
        "choice",
        "How servers are started: local (subprocess here), ssh (one rank per node) or container (every rank in "
        "docker/podman run on its node: the platform layer's [container] table, --sskj-container-image); default "
        "ssh when --nodes names hosts other than this one, else local",
        choices_of=("local", "ssh", "container"),
    ),
    Option(
        "container_image",
        ("--sskj-container-image",),
        "str",
        "Image of --launcher container (overrides the platform layer's [container] image)",
        metavar="IMAGE",
    ),
    Option(
        "placement",
        ("--sskj-placement",),
        "choice",
        "ranks: one multi-node server (a rank per node); replicas: an independent server on every node, "
        "requests spread over them",
        default="ranks",
        choices_of=("ranks", "replicas"),
    ),
    Option(
        "target_url",
        ("--target-url",),
        "url",
        "Benchmark an already running server at this URL and launch nothing",
        metavar="URL",
    ),
    Option(
        "serve_deployment",
        ("--sskj-deployment",),
        "name",
        "Benchmark the named deployment of `python -m pytest_sskj serve start NAME` (its URL from "
        "<reports dir>/deployments/NAME.json) and launch nothing; like --target-url, its labels are verified "
        "against the server",
        metavar="NAME",
    ),
    Option(
        "model_path",
        ("--model-path",),
        "str",
        "Model path on the nodes (sglang/vllm); embedded generates its own",
    ),
    Option("model_name", ("--sskj-model",), "str", "Model name for reports (e.g. Kimi-K3); profile key 'model'"),
    Option(
        "platform",
        ("--sskj-platform",),
        "str",
        "Platform name for reports (e.g. pro6000); profile key 'platform'",
    ),
    Option(
        "profile",
        ("--profile",),
        "path",
        "TOML profile naming platform, model, engine, parallel sizes, server args and environment",
        metavar="FILE",
    ),
    # --- parallelism ----------------------------------------------------------------------------
    Option(
        "tp",
        ("--tp",),
        "int",
        "Tensor-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "ep",
        ("--ep",),
        "int",
        "Expert-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "dp",
        ("--dp",),
        "int",
        "Data-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "pp",
        ("--pp",),
        "int",
        "Pipeline-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "gpus_per_node",
        ("--sskj-gpus-per-node",),
        "int",
        "GPUs on every node (default 8)",
        default=8,
        lo=1,
        hi=64,
        unit="GPUs",
        bound_why="no node holds more",
    ),
    # --- the matrix -----------------------------------------------------------------------------
    Option(
        "backends",
        ("--backend",),
        "backend_list",
        "Comma list of MoE/runner backends to compare, baseline first (sglang: marlin,flashinfer_mxfp4); "
        "a backend named twice (marlin,marlin) is an A/A control: two independently launched identical servers",
        metavar="LIST",
    ),
    Option(
        "chunks",
        ("--chunk",),
        "size_list",
        "Chunked-prefill sizes, e.g. 4K,8K,16K (4096,8192,16384)",
        metavar="LIST",
        lo=1,
        hi=MAX_TOKENS,
        unit="tokens",
        bound_why="the longest context of any model",
    ),
    Option(
        "concurrencies",
        ("--concurrency",),
        "int_list",
        "Client concurrencies, e.g. 8,16",
        metavar="LIST",
        lo=1,
        hi=MAX_CONCURRENCY,
        unit="requests",
        bound_why="one connection each; a box has ~64K ports",
    ),
    Option(
        "requests",
        ("--requests",),
        "int",
        "Requests per point (default 40)",
        lo=1,
        hi=1_000_000,
        unit="requests",
        bound_why="a point of more would run for days",
    ),
    Option(
        "repeats",
        ("--repeats",),
        "int",
        "Repeats per point (default 3)",
        lo=1,
        hi=1000,
        bound_why="each repeat is a collected test per point",
    ),
    Option(
        "warmup",
        ("--sskj-warmup",),
        "int0",
        "Warmup requests before each point, not measured (default 1)",
        default=1,
        lo=0,
        hi=10_000,
        unit="requests",
    ),
    Option(
        "isl",
        ("--isl",),
        "size_seq",
        "Input tokens per request, e.g. 16K; a list makes shapes: 1K,16K",
        lo=1,
        hi=MAX_TOKENS,
        unit="tokens",
        bound_why="the longest context of any model",
    ),
    Option(
        "osl",
        ("--osl",),
        "size_seq",
        "Output tokens per request, e.g. 1; a list makes shapes: 128,1",
        lo=1,
        hi=MAX_TOKENS,
        unit="tokens",
        bound_why="the longest context of any model",
    ),
    Option(
        "shape_mode",
        ("--sskj-shape-mode",),
        "choice",
        "How --isl and --osl lists combine: grid (every ISL with every OSL, default) or pairs (1st with 1st, ...)",
        default="grid",
        choices_of=("grid", "pairs"),
    ),
    Option(
        "grid_limit",
        ("--sskj-grid-limit",),
        "int",
        "Keep only the first N shapes of the ISL x OSL grid (the users' GRID_LIMIT)",
        lo=1,
        hi=10_000,
        unit="shapes",
    ),
    Option(
        "layouts",
        ("--layout",),
        "layouts",
        "Parallel layouts to compare, each its own server: tp2dp4,tp4dp2,tp8dp1 or layout names of the profile",
        metavar="LIST",
    ),
    Option(
        "endpoint",
        ("--sskj-endpoint",),
        "choice",
        "Endpoint the client drives: generate (SGLang native), completions or chat",
        choices_of=("generate", "completions", "chat"),
    ),
    Option(
        "request_rate",
        ("--sskj-request-rate",),
        "float",
        "Poisson request rate in req/s (default inf: all requests at once, bounded by concurrency)",
        default=float("inf"),
        lo=0,
        lo_open=True,
        hi=1e6,
        allow_inf=True,
        unit="req/s",
        bound_why="a rate of 0 sends nothing",
    ),
    Option(
        "seed",
        ("--sskj-seed",),
        "int0",
        "Seed of the random prompt token ids (default 42)",
        default=42,
        lo=0,
        hi=2**32 - 1,
    ),
    # --- verdicts -------------------------------------------------------------------------------
    Option(
        "slo",
        ("--sskj-slo",),
        "slo",
        "SLO gates, strict by default: 'p95_ttft_ms<3000,p95_tpot_ms<50' (results.csv names; the older "
        "'ttft_p95_ms' spelling maps onto them); 'none' disables",
        default="p95_ttft_ms<3000,p95_tpot_ms<50",
    ),
    Option(
        "margin_pct",
        ("--sskj-margin",),
        "float",
        "Candidate must beat the baseline by at least this many percent (default 0)",
        default=0.0,
        lo=0,
        hi=1000,
        unit="%",
    ),
    Option(
        "compare_expect",
        ("--sskj-compare-expect",),
        "choice",
        "What test_backend_comparison enforces: better (every candidate beats the baseline by --sskj-margin and "
        "the run's A/A noise floor, default) or report (verdicts are recorded, not enforced)",
        default="better",
        choices_of=("better", "report"),
    ),
    Option(
        "percentile_strict",
        ("--sskj-percentile-strict",),
        "bool",
        "Refuse (exit 4) an SLO gate on a percentile that --requests cannot support at 95 percent confidence "
        "(default: a warning naming the requests it needs)",
        default=False,
    ),
    Option(
        "max_repeats",
        ("--sskj-max-repeats",),
        "int",
        "Sequential A/B: add interleaved repeat pairs while a comparison is inconclusive, up to N repeats per side "
        "(group-sequential alpha spending keeps the A/A false-positive rate at or below 5 percent; "
        "default: --repeats, fixed)",
        lo=1,
        hi=1000,
        bound_why="each repeat is a collected test per point",
    ),
    Option(
        "plan_difference_pct",
        ("--sskj-plan-difference",),
        "float",
        "Power planner: the difference in percent the plan (dry run, inconclusive verdicts) sizes repeats for "
        "(default 5)",
        default=5.0,
        lo=0,
        lo_open=True,
        hi=1000,
        unit="%",
    ),
    Option(
        "plan_spread_pct",
        ("--sskj-plan-spread",),
        "float",
        "Power planner: the between-repeat spread in percent to plan with (default: the observed one; "
        "the dry run assumes 3)",
        lo=0,
        lo_open=True,
        hi=1000,
        unit="%",
    ),
    Option(
        "agreement_min",
        ("--sskj-agreement-min",),
        "agreement",
        "Output-agreement gates of every A/B on the fixed greedy probe prompts: "
        "'first_token_agreement_frac>=0.95' (default; a bare number means the same), "
        "'identical_seq_frac>=1' for a change that must be bit-identical, also mean_prefix_match_frac; "
        "'none' records the figures without a gate",
        default="first_token_agreement_frac>=0.95",
    ),
    Option(
        "agreement_prompts",
        ("--sskj-agreement-prompts",),
        "int0",
        "Greedy probe prompts per side of every A/B whose exact output token ids are compared "
        "(default 32; 0 turns output agreement off)",
        default=32,
        lo=0,
        hi=1024,
        unit="prompts",
    ),
    Option(
        "allow_client_bound",
        ("--sskj-allow-client-bound",),
        "bool",
        "Let a client-bound point pass (it fails with category client-bound by default; comparisons with a "
        "client-bound side stay inconclusive)",
        default=False,
    ),
    Option(
        "cpu_partition",
        ("--sskj-cpu-partition",),
        "choice",
        "CPU cores of a local launch: auto (default) keeps one core for the benchmark client and pins the server's "
        "whole process tree (threads, children, vLLM's OMP binding) to the others, so that the server cannot starve "
        "the client's clock; one core: nothing is pinned (the run header says so); off: no pinning",
        default="auto",
        choices_of=("auto", "off"),
    ),
    Option(
        "allow_mixed_builds",
        ("--sskj-allow-mixed-builds",),
        "bool",
        "Launch even when the nodes run different builds (engine/commit, torch+CUDA, driver, image differ; refused "
        "with category environment by default); the mix is recorded in the manifest",
        default=False,
    ),
    Option(
        "expect_best_chunk",
        ("--expect-best-chunk",),
        "size",
        "Fail test_chunk_curve unless this chunk is best",
        lo=1,
        hi=MAX_TOKENS,
        unit="tokens",
    ),
    Option(
        "search",
        ("--sskj-search",),
        "choice",
        "Adaptive concurrency search: none, double (from C=1, x2) or add16 (from C=16 in +16 steps, step back)",
        default="none",
        choices_of=("none", "double", "add16"),
    ),
    Option(
        "search_max",
        ("--sskj-search-max",),
        "int",
        "Highest concurrency the search tries (default 256)",
        default=256,
        lo=1,
        hi=MAX_CONCURRENCY,
        unit="requests",
        bound_why="one connection each; a box has ~64K ports",
    ),
    Option(
        "search_floor",
        ("--sskj-search-floor",),
        "int",
        "Fail the search unless the highest SLO-meeting concurrency is at least this",
        lo=1,
        hi=MAX_CONCURRENCY,
        unit="requests",
    ),
    Option(
        "expect_layout",
        ("--sskj-expect-layout",),
        "name",
        "Fail test_recommendation unless this layout is the recommended one (and its lead is conclusive)",
        metavar="LAYOUT",
    ),
    Option(
        "throughput_floor",
        ("--sskj-throughput-floor",),
        "float",
        "Fail test_recommendation unless the recommended point's throughput (tok/s) is at least this",
        lo=0,
        hi=1e9,
        unit="tok/s",
    ),
    Option(
        "recommend_metric",
        ("--sskj-recommend-metric",),
        "choice",
        "Throughput that ranks layouts in test_recommendation (tok/s or req/s; default total_throughput)",
        default="total_throughput",
        choices_of=("total_throughput", "input_throughput", "output_throughput", "request_throughput"),
    ),
    Option(
        "resume",
        ("--resume",),
        "run_id",
        "Continue run RUN_ID: finished points are read back, not repeated",
        metavar="RUN_ID",
    ),
    # --- server process -------------------------------------------------------------------------
    Option(
        "port",
        ("--sskj-port",),
        "port",
        "HTTP port of the server (0: pick a free one; sglang default 30000)",
        lo=0,
        hi=65535,
    ),
    Option(
        "dist_init_port",
        ("--sskj-dist-init-port",),
        "port1",
        "Port of --dist-init-addr on node 0 (default 5000)",
        default=5000,
        lo=1,
        hi=65535,
    ),
    Option(
        "health_timeout_s",
        ("--sskj-health-timeout",),
        "float",
        "Seconds to wait for rank 0 to become healthy (default: embedded 60, sglang/vllm 1800)",
        lo=0,
        lo_open=True,
        hi=DAY_S,
        unit="s",
        bound_why="a server cannot be healthy in no time",
    ),
    Option(
        "stall_timeout_s",
        ("--sskj-stall-timeout",),
        "float",
        "Seconds without a token while a request is open (first token included) after which the server counts "
        "as hung: the point fails as 'hang' and its server is torn down; a request's deadline is this plus 2 s "
        "per further output token (default: embedded 30, sglang/vllm 600)",
        lo=0,
        lo_open=True,
        hi=DAY_S,
        unit="s",
        bound_why="0 would call every request hung",
    ),
    Option(
        "server_args",
        ("--sskj-server-arg",),
        "append",
        "Extra server argument, repeatable (e.g. --sskj-server-arg=--mem-fraction-static=0.85)",
        metavar="ARG",
    ),
    Option(
        "env",
        ("--sskj-env",),
        "env",
        "Environment for the server, KEY=VALUE, repeatable",
        metavar="KEY=VALUE",
    ),
    Option(
        "python",
        ("--sskj-python",),
        "command",
        "Python interpreter on the nodes (default: python3 remote, this one local)",
    ),
    Option(
        "router_python",
        ("--sskj-router-python",),
        "command",
        "Python that has sglang-router installed, for a deployment's router (default: --sskj-python, else this one)",
    ),
    Option(
        "twin_model",
        ("--sskj-twin-model",),
        "str",
        "Performance model the stand-in SGLang cluster serves (platform twin, docs/twin.md): a TOML/JSON file or a "
        "shipped name: kimi3-pro6000 (default, seed 000), kimi3-pro6000-pd (seed 004), kimi3-pro6000-worse, "
        "kimi3-pro6000-equal, dsv4-layouts",
    ),
    Option("ssh_user", ("--sskj-ssh-user",), "user", "SSH user for --launcher ssh"),
    Option(
        "ssh_port",
        ("--sskj-ssh-port",),
        "port1",
        "SSH port for --launcher ssh (default 22)",
        default=22,
        lo=1,
        hi=65535,
    ),
    Option("ssh_identity", ("--sskj-ssh-identity",), "path", "SSH identity file for --launcher ssh"),
    Option(
        "ssh_options",
        ("--sskj-ssh-option",),
        "ssh_options",
        "Extra ssh -o option, repeatable (e.g. StrictHostKeyChecking=no)",
    ),
    Option(
        "ssh_config",
        ("--sskj-ssh-config",),
        "path",
        "ssh_config file (ssh -F) mapping node names such as 601 to HostName, User, IdentityFile for --launcher ssh",
        metavar="FILE",
    ),
    # --- GPUs -----------------------------------------------------------------------------------
    Option(
        "require_gpu",
        ("--sskj-require-gpu",),
        "bool",
        "Fail, instead of skip, tests whose GPU request cannot be met (release runs)",
        default=False,
    ),
    Option(
        "gpu_wait_s",
        ("--sskj-gpu-wait",),
        "float",
        "Seconds a gpu-marked test waits for busy matching GPUs (leased by another worker or session, "
        "foreign processes, too little free memory) before it is skipped (default 600)",
        default=600.0,
        lo=0,
        hi=DAY_S,
        unit="s",
    ),
    # --- output ---------------------------------------------------------------------------------
    Option(
        "reports_dir",
        ("--reports-dir",),
        "path",
        "Root of generated output (default reports/)",
        default="reports",
    ),
    Option("run_id", ("--run-id",), "run_id", "Run id, the folder under --reports-dir (default: time stamp)"),
    # --- results history ------------------------------------------------------------------------
    Option(
        "db",
        ("--sskj-db",),
        "db",
        "Results database every point, verdict and run is also written to: a SQLAlchemy URL "
        "(postgresql://user:pass@host/db, sqlite:///path) or a file path (default: <reports dir>/results.sqlite; "
        "'none' disables); the password never reaches a report",
        metavar="URL",
    ),
    Option(
        "baseline_ref",
        ("--sskj-baseline",),
        "ref",
        "Judge every point against this earlier run's matching point: a release tag, a run id or last-release "
        "(a regression beyond the baseline's repeat spread plus --sskj-regression-margin fails)",
        metavar="REF",
    ),
    Option(
        "regression_margin_pct",
        ("--sskj-regression-margin",),
        "float",
        "Percent a point may be worse than its baseline on top of the baseline's own repeat spread (default 5)",
        default=5.0,
        lo=0,
        hi=1000,
        unit="%",
    ),
    Option(
        "dry_run",
        ("--sskj-dry-run",),
        "bool",
        "Print the test matrix and every node's command; launch nothing",
        default=False,
    ),
)


_REPEATABLE = ("append", "env", "ssh_options")


def _help(opt: Option) -> str:
    from pytest_sskj.schema import bounds_text

    bounds = bounds_text(opt)
    return opt.help + (f" [{bounds}]" if bounds else "")


def register_options(parser: pytest.Parser) -> None:
    """Register every row of :data:`OPTIONS` as a flag of group ``sskj`` and as an ini key."""
    group = parser.getgroup(
        "sskj",
        "pytest-sskj: LLM serving acceptance (settings: CLI > SSKJ_* env > sskj_* ini > --profile > default)",
    )
    for opt in OPTIONS:
        text = (_help(opt) + f" [env {opt.env}, ini {opt.ini}]").replace("%", "%%")  # argparse %-formats help
        if opt.kind == "bool":
            group.addoption(*opt.flags, action="store_true", dest=f"sskj_{opt.dest}", default=None, help=text)
        else:
            group.addoption(
                *opt.flags,
                action="append" if opt.kind in _REPEATABLE else "store",
                dest=f"sskj_{opt.dest}",
                default=None,
                metavar=opt.metavar or ("VALUE" if opt.kind in _REPEATABLE else opt.dest.upper()),
                help=text,
            )
        if opt.kind in _REPEATABLE:
            parser.addini(opt.ini, help=_help(opt), type="linelist", default=None)
        else:
            parser.addini(opt.ini, help=_help(opt), type="string", default=None)


def check_raw_args(args: list[str]) -> None:
    """Refuse command-line spellings that pytest's own parser mangles before pytest-sskj sees them.

    ``--nodes @FILE``: pytest expands ``@FILE`` as an argument file (each line becomes an argument), so the
    inventory form is spelled ``--nodes inventory:FILE`` on the command line.
    """
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith("--nodes=") else None
        if arg == "--nodes" and i + 1 < len(args):
            value = args[i + 1]
        if value is not None and value.startswith("@"):
            raise pytest.UsageError(
                f"--nodes {value}: pytest reads @FILE on its command line as a file of arguments, so the node "
                "inventory never reaches pytest-sskj\n"
                "  accepted: --nodes inventory:FILE.toml (a TOML file with nodes = [...]), or @FILE.toml in "
                "SSKJ_NODES / the ini key sskj_nodes\n"
                f"  Hint: --nodes inventory:{value[1:]}"
            )
