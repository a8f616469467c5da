"""Client ingest benchmark: streamed tokens/s our client takes in on one core vs sglang's client.

One run, one zero-delay mock SSE server (its own process, pinned to another core when there is one),
and, interleaved round by round on the same server and workload:

- ours: :func:`pytest_sskj.bench.run_bench` in this process, pinned to one core;
- theirs: ``sglang.benchmark.serving``'s own request function (``async_request_openai_completions`` /
  ``async_request_sglang_generate``, one aiohttp session per request, line iteration) driven the way its
  ``benchmark()`` does (an asyncio semaphore at the concurrency), in a subprocess of the interpreter given
  by ``--sglang-python`` (a separate venv: ``python3 -m venv /tmp/sglvenv && /tmp/sglvenv/bin/pip install
  --no-deps sglang==0.5.23`` plus what its import asks for), pinned to the same core.

Ingest rate = output tokens received / wall time of the measured requests; because a shared machine
can take the core away from either client at any moment, tokens per *CPU second* of the client process
(``time.process_time``, everything in it counted: ours includes building the prompts and writing
``requests.jsonl``) is printed too -- that is the figure the "on one core" comparison rests on.

``--timing`` instead runs the timing-accuracy check (scripted TTFT/ITL at C=64, the client's stamps
against the server's write stamps) and prints the p50/p99/max errors.

    python benchmarks/bench_client_ingest.py --sglang-python /tmp/sglvenv/bin/python
    python benchmarks/bench_client_ingest.py --timing
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from pytest_sskj.bench import Workload, run_bench
from pytest_sskj.bench.workload import plan_requests
from pytest_sskj.testing.mock_server import MockConfig, spawn_mock_server
from pytest_sskj.testing.timing import timing_errors

# Runs in the sglang venv: drive sglang's own request function as its benchmark() does.
SGLANG_DRIVER = r"""
import asyncio, json, sys, time, warnings
from argparse import Namespace
warnings.filterwarnings("ignore")
cfg = json.loads(sys.argv[1])
if cfg.get("cpu") is not None:
    import os; os.sched_setaffinity(0, {cfg["cpu"]})
import sglang.benchmark.serving as S
S.set_global_args(Namespace(disable_stream=False, disable_ignore_eos=False, return_logprob=False,
    top_logprobs_num=0, cache_report=False, temperature=0.0, top_p=1.0, return_routed_experts=False,
    logprob_start_len=-1, token_ids_logprob=None))
fn = S.async_request_sglang_generate if cfg["endpoint"] == "generate" else S.async_request_openai_completions
path = "/generate" if cfg["endpoint"] == "generate" else "/v1/completions"
prompts = cfg["prompts"]
async def main():
    sem = asyncio.Semaphore(cfg["concurrency"])
    async def one(p):
        inp = S.RequestFuncInput(prompt=p, api_url=cfg["url"] + path, prompt_len=len(p),
                                 output_len=cfg["osl"], model="mock-model", lora_name="", image_data=None,
                                 extra_request_body={})
        async with sem:
            return await fn(inp)
    c0 = time.process_time()
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(one(p) for p in prompts))
    dur = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ok = sum(o.success for o in outs)
    toks = sum(o.output_len for o in outs if o.success)
    print(json.dumps({"duration": dur, "cpu_s": cpu, "success": ok, "output_tokens": toks,
                      "errors": [o.error[:200] for o in outs if not o.success][:3]}))
asyncio.run(main())
"""


def _cores() -> tuple[int | None, int | None]:
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        return cpus[0], cpus[1]
    return cpus[0], None


def run_ours(url: str, w: Workload, out: Path, repeat: int) -> dict[str, float]:
    c0 = time.process_time()
    r = run_bench(url, w, out, repeat=repeat, flush_cache=False)
    cpu = time.process_time() - c0
    if not r.ok:
        raise SystemExit(f"our client saw failures: {r.failures[:3]}")
    dur = float(r.metrics["duration"] or 0.0)
    toks = int(r.metrics["total_output_tokens"] or 0)
    return {
        "duration": dur,
        "output_tokens": toks,
        "tok_s": toks / dur,
        "tok_cpu_s": toks / cpu,
    }


def run_theirs(python: str, url: str, w: Workload, repeat: int, cpu: int | None) -> dict[str, float]:
    prompts = [list(p.prompt_ids) for p in plan_requests(w, repeat) if not p.warmup]
    cfg = {
        "url": url,
        "endpoint": w.endpoint,
        "osl": w.osl,
        "concurrency": w.concurrency,
        "prompts": prompts,
        "cpu": cpu,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(SGLANG_DRIVER)
        script = fh.name
    try:
        proc = subprocess.run(
            [python, script, json.dumps(cfg)], capture_output=True, text=True, timeout=900, check=False
        )
    finally:
        os.unlink(script)
    if proc.returncode != 0:
        raise SystemExit(f"sglang driver failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    if res["success"] != len(prompts):
        raise SystemExit(f"sglang client: {res['success']}/{len(prompts)} succeeded: {res['errors']}")
    res["tok_s"] = res["output_tokens"] / res["duration"]
    res["tok_cpu_s"] = res["output_tokens"] / res["cpu_s"]
    return res


def ingest(args: argparse.Namespace) -> None:
    client_cpu, server_cpu = _cores()
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    work = Path(tempfile.mkdtemp(prefix="sskj-ingest-"))
    for endpoint in args.endpoints:
        w = Workload(
            isl=args.isl,
            osl=args.osl,
            requests=args.requests,
            concurrency=args.concurrency,
            warmup=0,
            endpoint=endpoint,
        )
        ours: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        with spawn_mock_server(MockConfig(), work / "server", cpu=server_cpu) as url:
            run_ours(url, w, work / "warm", 99)  # warm caches / imports once
            for rnd in range(args.rounds):
                ours.append(run_ours(url, w, work / endpoint, rnd))
                if args.sglang_python:
                    theirs.append(run_theirs(args.sglang_python, url, w, rnd, client_cpu))

        def med(xs: list[dict[str, float]], k: str) -> float:
            return statistics.median(x[k] for x in xs)

        line = (
            f"{endpoint}: ISL {w.isl} OSL {w.osl} C {w.concurrency} x {w.requests} req, {args.rounds} rounds\n"
            f"  ours   {med(ours, 'tok_cpu_s'):>10,.0f} tok/CPU-s  {med(ours, 'tok_s'):>10,.0f} tok/s wall "
            f"(rounds {[round(x['tok_s']) for x in ours]})"
        )
        if theirs:
            line += (
                f"\n  sglang {med(theirs, 'tok_cpu_s'):>10,.0f} tok/CPU-s  {med(theirs, 'tok_s'):>10,.0f} tok/s wall "
                f"(rounds {[round(x['tok_s']) for x in theirs]})\n"
                f"  ratio  {med(ours, 'tok_cpu_s') / med(theirs, 'tok_cpu_s'):.2f}x per CPU second, "
                f"{med(ours, 'tok_s') / med(theirs, 'tok_s'):.2f}x wall"
            )
        print(line, flush=True)


def timing(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="sskj-timing-"))
    client_cpu, server_cpu = _cores()
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    for endpoint in args.endpoints:
        w = Workload(isl=256, osl=32, requests=256, concurrency=64, warmup=0, endpoint=endpoint)
        cfg = MockConfig(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms, record_stamps=True)
        with spawn_mock_server(cfg, work / "server", cpu=server_cpu) as url:
            r = run_bench(url, w, work / endpoint)
            stamps = httpx.get(url + "/_mock/stamps", timeout=60).json()["requests"]
        err = timing_errors(r.records, plan_requests(w, 0), stamps)
        print(
            f"{endpoint} timing at C=64 (scripted TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms): "
            f"{r.completed}/{len(r.records)} ok; TTFT error p50 {err['ttft_err_p50_ms']:.3f} / "
            f"p99 {err['ttft_err_p99_ms']:.3f} / max {err['ttft_err_max_ms']:.3f} ms; ITL error p50 "
            f"{err['itl_err_p50_ms']:.3f} / p99 {err['itl_err_p99_ms']:.3f} / max {err['itl_err_max_ms']:.3f} ms "
            f"({err['itl_samples']} gaps); measured median TTFT {r.metrics['median_ttft_ms']:.2f} ms, "
            f"ITL {r.metrics['median_itl_ms']:.2f} ms; client_bound={r.client_bound} "
            f"(loop lag p99 {r.client_evidence['loop_lag_p99_ms']:.2f} ms)",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-python", help="python of a venv with sglang==0.5.23 importable")
    ap.add_argument("--endpoints", nargs="+", default=["completions", "generate"])
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=1024)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timing", action="store_true", help="run the timing-accuracy check instead")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    args = ap.parse_args()
    (timing if args.timing else ingest)(args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
