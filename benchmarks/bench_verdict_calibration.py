"""Verdict calibration: simulated servers with known ground truth, and the real embedded engine.

``--simulate`` reproduces the figures of docs/verdicts.md for the sequential design (``--repeats`` ..
``--max-repeats``): the A/A false-positive rate of the whole procedure at 3 % between-repeat drift, the
power for a true +7.6 % at 3 % drift, and the mean number of repeats per side used at 0.2 % and at 3 % drift
(the simulation of unit/acceptance/test_sequential.py, more runs).  Without it, on the real engine:

N A/A comparisons (``parallel`` vs a second, independently launched ``parallel``) and N real-difference
comparisons (``microbatch`` baseline vs ``parallel`` candidate, the embedded default A/B) are each run
the way ``pytest acceptance/`` runs one: two freshly launched llama.cpp servers, ``--repeats`` repeats
per side interleaved A B A B, the bench client on the same workload, then
:func:`pytest_sskj.acceptance.compare.compare` (method ``sskj-verdict/3``,
sequential when ``--max-repeats`` > ``--repeats``).  Printed, measured in this
run: the fraction of A/A comparisons that claimed a difference (``better``/``worse``: false positives),
the fraction of real-difference comparisons found ``better`` (power), and every comparison's
primary delta and CI.  Client-bound repeats are reported; they make a comparison inconclusive, as in
the suite.  Figures, not assertions: the machine is shared.

    python benchmarks/bench_verdict_calibration.py --simulate --sims 2000
    python benchmarks/bench_verdict_calibration.py --n 3 --max-repeats 10
    python benchmarks/bench_verdict_calibration.py --n 10 --requests 40 --json calib.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_sskj.acceptance.compare import DECIDED, RepeatSample, Verdict, compare
from pytest_sskj.acceptance.sequential import Design, run_sequential
from pytest_sskj.acceptance.watch import raise_client_priority
from pytest_sskj.bench import Workload, run_bench
from pytest_sskj.engines.embedded import VARIANTS
from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="comparisons of each kind (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per side at the first look (default 3)")
    p.add_argument("--max-repeats", type=int, default=10, help="repeats per side at the last look (default 10)")
    p.add_argument("--simulate", action="store_true", help="simulated servers instead of the real engine")
    p.add_argument("--sims", type=int, default=1000, help="simulated comparisons per figure (default 1000)")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--isl", type=int, default=512)
    p.add_argument("--osl", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--json", type=Path, default=None, help="also write every comparison to this file")
    return p.parse_args(argv)


def _server_args(variant: str) -> dict[str, Any]:
    v = VARIANTS[variant]
    extra = ["--ubatch", str(v.ubatch)] if v.ubatch else []
    return {"slots": v.slots, "threads": v.threads, "extra_args": extra}


def _one(a: argparse.Namespace, base: str, cand: str, index: int, model: Path, work: Path) -> dict[str, Any]:
    """One comparison: two fresh servers, A B A B repeats, the verdict."""
    samples: dict[str, list[RepeatSample]] = {"base": [], "cand": []}
    bound: list[str] = []
    logs = work / f"cmp{index}-{base}-{cand}"
    logs.mkdir(parents=True, exist_ok=True)
    with (
        embedded_server(model, batch=a.chunk, log_path=logs / "base.log", **_server_args(base)) as url_b,
        embedded_server(model, batch=a.chunk, log_path=logs / "cand.log", **_server_args(cand)) as url_c,
    ):

        def pair(r: int) -> None:
            w = Workload(
                isl=a.isl,
                osl=a.osl,
                requests=a.requests,
                concurrency=a.concurrency,
                warmup=1,
                seed=42 + 100_003 * a.concurrency + 7919 * index,
                endpoint="completions",
            )
            for side, url in (("base", url_b), ("cand", url_c)):
                res = run_bench([url], w, logs / f"{side}-r{r}", repeat=r)
                row = {**res.metrics, "point_id": f"{side}-r{r}", "client_bound": res.client_bound}
                if res.client_bound:
                    bound.append(f"{side}-r{r}: {res.metrics.get('client_bound_reasons')}")
                samples[side].append(RepeatSample.from_row(row))

        for r in range(1, a.repeats + 1):
            pair(r)
        got = run_sequential(
            Design(a.repeats, max(a.repeats, a.max_repeats)),
            lambda n, conf: compare(
                base, cand, samples["base"][:n], samples["cand"][:n], confidence=conf, ordering="interleaved A B A B"
            ),
            pair,
        )
    assert got is not None
    v: Verdict = got
    p = v.primary
    return {
        "baseline": base,
        "candidate": cand,
        "outcome": v.outcome,
        "delta_pct": p.delta_pct,
        "ci_pct": [p.ci_low_pct, p.ci_high_pct],
        "client_bound": bound,
        "repeats_used": len(samples["base"]),
        "message": v.message(),
    }


def _sim_repeat(rng: Any, tps: float, ttft: float, drift: float) -> RepeatSample:
    """One simulated server run: lognormal drift, 40 lognormal request latencies, throughput noise drift/2."""
    import numpy as np

    slow = math.exp(rng.normal(0.0, drift))
    req = ttft * slow * np.exp(rng.normal(0.0, 0.3, 40))
    tput = tps / slow * math.exp(rng.normal(0.0, drift / 2))
    return RepeatSample(
        {
            "input_throughput": tput,
            "median_ttft_ms": float(np.median(req)),
            "p95_ttft_ms": float(np.percentile(req, 95)),
        }
    )


def _simulate_one(seed: int, ratio: float, drift: float, design: Design) -> tuple[str, int]:
    import numpy as np

    rng = np.random.default_rng(seed)
    base: list[RepeatSample] = []
    cand: list[RepeatSample] = []

    def pair(_r: int) -> None:
        base.append(_sim_repeat(rng, 1000.0, 500.0, drift))
        cand.append(_sim_repeat(rng, 1000.0 * ratio, 500.0 / ratio, drift))

    for r in range(design.first):
        pair(r)
    v = run_sequential(design, lambda n, conf: compare("a", "b", base[:n], cand[:n], confidence=conf), pair)
    assert v is not None
    return v.outcome, len(base)


def simulate(a: argparse.Namespace) -> dict[str, Any]:
    """The simulated figures: A/A false positives, power at +7.6 %, mean repeats used (0.2 % and 3 % drift)."""
    design = Design(a.repeats, max(a.repeats, a.max_repeats))
    out: dict[str, Any] = {"design": design.describe(), "sims": a.sims}
    for name, ratio, drift, seed in (
        ("aa_3pct", 1.0, 0.03, 1_000_000),
        ("ab_7.6pct_3pct", 1.076, 0.03, 2_000_000),
        ("aa_0.2pct", 1.0, 0.002, 3_000_000),
        ("ab_7.6pct_0.2pct", 1.076, 0.002, 4_000_000),
    ):
        runs = [_simulate_one(seed + i, ratio, drift, design) for i in range(a.sims)]
        decided = sum(o in DECIDED for o, _ in runs)
        better = sum(o == "better" for o, _ in runs)
        mean_n = sum(n for _, n in runs) / len(runs)
        out[name] = {"decided": decided, "better": better, "mean_repeats": mean_n}
        what = "false positives (better/worse)" if ratio == 1.0 else "found better (power)"
        count = decided if ratio == 1.0 else better
        print(f"{name}: {what} {count}/{a.sims} = {count / a.sims:.1%}; mean repeats per side {mean_n:.2f}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    if a.simulate:
        t0 = time.perf_counter()
        sim = simulate(a)
        print(f"{sim['design']}; {time.perf_counter() - t0:.0f} s")
        if a.json is not None:
            a.json.write_text(json.dumps(sim, indent=2) + "\n")
        return 0
    print(f"bench client priority: {raise_client_priority()} (as in the suite's bench thread)", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sskj-calib-") as tmp:
        work = Path(tmp)
        model = ensure_tiny_model(work / "model")
        runs: list[dict[str, Any]] = []
        for i in range(a.n):  # alternate the two kinds so load drift hits both alike
            for base, cand in (("parallel", "parallel"), ("microbatch", "parallel")):
                out = _one(a, base, cand, i, model, work)
                out["kind"] = "A/A" if base == cand else "A/B"
                runs.append(out)
                lo, hi = out["ci_pct"]
                fmt = "n/a" if out["delta_pct"] is None else f"{out['delta_pct']:+.1f} % (CI {lo:+.1f} … {hi:+.1f})"
                bound = f", client-bound: {len(out['client_bound'])}" if out["client_bound"] else ""
                print(
                    f"{out['kind']} #{i + 1} {cand} vs {base}: {out['outcome']} after {out['repeats_used']} repeats "
                    f"per side: input TPS {fmt}{bound}",
                    flush=True,
                )
    aa = [r for r in runs if r["kind"] == "A/A"]
    ab = [r for r in runs if r["kind"] == "A/B"]
    fp = sum(r["outcome"] in DECIDED for r in aa)
    found = sum(r["outcome"] == "better" for r in ab)
    wall = time.perf_counter() - t0
    mean_aa = sum(r["repeats_used"] for r in aa) / max(1, len(aa))
    mean_ab = sum(r["repeats_used"] for r in ab) / max(1, len(ab))
    print(f"mean repeats per side used: A/A {mean_aa:.2f}, A/B {mean_ab:.2f}")
    print(
        f"\nA/A false-positive rate: {fp}/{len(aa)} = {fp / max(1, len(aa)):.0%} (better/worse claimed between "
        f"identical servers)\nA/B power: {found}/{len(ab)} = {found / max(1, len(ab)):.0%} (microbatch -> parallel "
        f"found better)\nshape ISL {a.isl} / OSL {a.osl}, C={a.concurrency}, {a.requests} requests x "
        f"{a.repeats}..{a.max_repeats} repeats per side, chunk {a.chunk}; {wall:.0f} s"
    )
    if a.json is not None:
        a.json.write_text(json.dumps({"runs": runs, "fp": fp, "power": found, "n": a.n}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
