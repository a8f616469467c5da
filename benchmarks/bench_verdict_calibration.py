"""Verdict calibration on the real embedded engine: false-positive rate of A/A controls and power.

N A/A comparisons (``parallel`` vs a second, independently launched ``parallel``) and N real-difference
comparisons (``microbatch`` baseline vs ``parallel`` candidate, the embedded default A/B) are each run
the way ``pytest acceptance/`` runs one: two freshly launched llama.cpp servers, ``--repeats`` repeats
per side interleaved A B A B, the bench client on the same workload, then
:func:`pytest_sskj.acceptance.compare.compare` (method ``sskj-verdict/2``).  Printed, measured in this
run: the fraction of A/A comparisons that claimed a difference (``better``/``worse``: false positives),
the fraction of real-difference comparisons found ``better`` (power), and every comparison's
primary delta and CI.  Client-bound repeats are reported; they make a comparison inconclusive, as in
the suite.  Figures, not assertions: the machine is shared.

    python benchmarks/bench_verdict_calibration.py --n 3
    python benchmarks/bench_verdict_calibration.py --n 10 --requests 40 --json calib.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_sskj.acceptance.compare import DECIDED, RepeatSample, Verdict, compare
from pytest_sskj.acceptance.runner import raise_client_priority
from pytest_sskj.bench import Workload, run_bench
from pytest_sskj.engines.embedded import VARIANTS
from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3, help="comparisons of each kind (default 3)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per side (default 3, as the suite)")
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
        for r in range(1, a.repeats + 1):
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
    v: Verdict = compare(base, cand, samples["base"], samples["cand"], ordering="interleaved A B A B")
    p = v.primary
    return {
        "baseline": base,
        "candidate": cand,
        "outcome": v.outcome,
        "delta_pct": p.delta_pct,
        "ci_pct": [p.ci_low_pct, p.ci_high_pct],
        "client_bound": bound,
        "message": v.message(),
    }


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
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
                print(f"{out['kind']} #{i + 1} {cand} vs {base}: {out['outcome']}: input TPS {fmt}{bound}", flush=True)
    aa = [r for r in runs if r["kind"] == "A/A"]
    ab = [r for r in runs if r["kind"] == "A/B"]
    fp = sum(r["outcome"] in DECIDED for r in aa)
    found = sum(r["outcome"] == "better" for r in ab)
    wall = time.perf_counter() - t0
    print(
        f"\nA/A false-positive rate: {fp}/{len(aa)} = {fp / max(1, len(aa)):.0%} (better/worse claimed between "
        f"identical servers)\nA/B power: {found}/{len(ab)} = {found / max(1, len(ab)):.0%} (microbatch -> parallel "
        f"found better)\nshape ISL {a.isl} / OSL {a.osl}, C={a.concurrency}, {a.requests} requests x {a.repeats} "
        f"repeats per side, chunk {a.chunk}; {wall:.0f} s"
    )
    if a.json is not None:
        a.json.write_text(json.dumps({"runs": runs, "fp": fp, "power": found, "n": a.n}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
