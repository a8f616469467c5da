"""The option rows the acceptance suite owns: the test matrix (backends, chunks, concurrencies, requests,
repeats, shapes, layouts, the request stream) and the verdicts (SLO and agreement gates, margins, the
sequential A/B, the power planner, the search and the recommendation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.options.row import MAX_CONCURRENCY, MAX_TOKENS, Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["MATRIX", "VERDICTS", "register"]

MATRIX: tuple[Option, ...] = (
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
        "Warmup requests before each server run's first measured phase, not measured (default 1; a server already "
        "warm from a measured phase gets none; the embedded engine's next server gets its warmup as soon as it is "
        "healthy, while nothing is measured)",
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
)
"""Backends, chunks, concurrencies, requests, repeats, shapes, layouts, endpoint, rate, seed."""

VERDICTS: tuple[Option, ...] = (
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
        "compare_metrics",
        ("--sskj-compare-metrics",),
        "metric_list",
        "What every A/B judges, primary first (the outcome is the primary's; a secondary one significantly worse "
        "is a trade-off): default input_throughput,median_ttft_ms,p95_ttft_ms (the users' prefill table); for "
        "decode or speculative decoding e.g. output_throughput,median_tpot_ms (results.csv names)",
        default="input_throughput,median_ttft_ms,p95_ttft_ms",
        metavar="LIST",
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
)
"""What each verdict enforces and how it is judged."""


def parse_metric_list(text: str) -> tuple[str, ...]:
    """``output_throughput,median_tpot_ms`` -> canonical names, primary first; each a metric with a direction,
    named once; ``ValueError`` saying what is wrong otherwise."""
    from pytest_sskj.vocabulary import METRICS, canonical

    out: list[str] = []
    for raw in text.split(","):
        if not raw.strip():
            raise ValueError(f"{text!r} has an empty name; hint: output_throughput,median_tpot_ms")
        name = canonical(raw)
        if METRICS[name].direction == "none":
            raise ValueError(f"{name} has no better direction (a count or a setting): it cannot decide an A/B")
        if name in out:
            raise ValueError(f"{name} is named twice")
        out.append(name)
    return tuple(out)


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``) and
    the ``metric_list`` value kind's parser."""
    registry.add_options(*MATRIX, *VERDICTS)
    registry.add_parser("metric_list", parse_metric_list)
