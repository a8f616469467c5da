"""Our client's TTFT/TPOT against a packet capture on ``lo`` (the wire as referee), real vLLM CPU server,
server pinned away from the client's core vs. sharing both cores (issue 28).

For each layout the script starts the real vLLM server (``SSKJ_VLLM_VENV``, its tiny model), captures its port on
``lo`` with ``tcpdump`` (nanosecond stamps), runs our bench client (``run_bench``), and compares per request:

- wire TTFT: the packet carrying the first token frame minus the packet carrying the request;
- wire TPOT: (last token packet - first token packet) / (tokens - 1);
- ours: ``t_first - t_send`` and ``(last read - t_first) / (tokens - 1)`` from ``requests.jsonl``.

Requests are matched in send order (one per connection turn).  Printed: the medians of ours, the wire's and of
the per-request difference (ours - wire), the client-bound verdict and the multi-frame read share.  Needs root
(tcpdump on lo), 2+ cores, and the vLLM venv (``.ci/install_vllm.sh``)::

    SSKJ_VLLM_VENV=/work/main/.venv-vllm python benchmarks/bench_wire_referee.py --requests 40 --concurrency 2
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_vllm(venv: Path, port: int, pinned: bool, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    argv = [str(venv / "bin/python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(venv / "tiny-llama")]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "bfloat16"]
    argv += ["--enforce-eager"]
    if pinned:  # as --sskj-cpu-partition auto does: the server tree on core 1, its OMP threads bound there
        env["VLLM_CPU_OMP_THREADS_BIND"] = "1"
        argv = ["taskset", "-c", "1", *argv]
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], limit_s: float = 400) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError("vLLM did not become healthy")


def _packets(pcap: Path, port: int) -> list[tuple[float, int, bool, bytes]]:
    """``(realtime, client_port, to_server, payload)`` of every TCP payload packet (nanosecond pcap, DLT_EN10MB)."""
    data = pcap.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    endian, nano = ("<", magic == 0xA1B23C4D) if magic in (0xA1B2C3D4, 0xA1B23C4D) else (">", magic == 0x4D3CB2A1)
    off, out = 24, []
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(endian + "IIII", data[off : off + 16])
        frame = data[off + 16 : off + 16 + incl]
        off += 16 + incl
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
            continue
        ihl = (frame[14] & 15) * 4
        tcp = frame[14 + ihl :]
        sport, dport = struct.unpack(">HH", tcp[:4])
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if payload:
            ts = sec + frac / (1e9 if nano else 1e6)
            out.append((ts, dport if sport == port else sport, dport == port, payload))
    return out


def _wire_requests(pkts: list[tuple[float, int, bool, bytes]], osl: int) -> list[dict[str, float]]:
    """Per request (in send order): wire TTFT and TPOT in ms, from the request packet and the token packets."""
    by_conn: dict[int, list[dict[str, Any]]] = {}
    for ts, cport, to_server, payload in pkts:
        turns = by_conn.setdefault(cport, [])
        if to_server and payload.startswith(b"POST "):
            turns.append({"send": ts, "tokens": [], "done": False})
        elif not to_server and turns:
            n = payload.count(b'"choices":[{')
            turns[-1]["tokens"].extend([ts] * n)
            turns[-1]["done"] = turns[-1]["done"] or b"data: [DONE]" in payload
    out = []
    for turns in by_conn.values():
        for t in turns:
            toks = t["tokens"]
            if len(toks) < 2 or not t["done"]:  # a stream the capture did not see to its end
                continue
            out.append(
                {
                    "send": t["send"],
                    "ttft_ms": (toks[0] - t["send"]) * 1e3,
                    "tpot_ms": (toks[-1] - toks[0]) * 1e3 / (osl - 1),
                    "e2e_ms": (toks[-1] - t["send"]) * 1e3,
                }
            )
    return sorted(out, key=lambda r: r["send"])


def _ours(requests_jsonl: Path, osl: int) -> list[dict[str, float]]:
    out = []
    for line in requests_jsonl.read_text().splitlines():
        r = json.loads(line)
        if r.get("error") or not r.get("t_first") or len(r.get("chunk_times") or []) < 1:
            continue
        last = r["chunk_times"][-1]
        out.append(
            {"send": r["t_send"], "ttft_ms": (r["t_first"] - r["t_send"]) * 1e3,
             "tpot_ms": (last - r["t_first"]) * 1e3 / (osl - 1), "e2e_ms": (last - r["t_send"]) * 1e3,
             "warmup": bool(r.get("warmup"))}
        )  # fmt: skip
    return sorted(out, key=lambda r: r["send"])


def _match(
    ours: list[dict[str, float]], wire: list[dict[str, float]], offset: float
) -> list[tuple[dict[str, float], dict[str, float]]]:
    """Each of our requests with the wire request sent at the same instant (``offset``: realtime minus
    ``perf_counter``): among the wire requests sent within 2 ms of ours, the one whose E2E agrees best (E2E is
    what a late loop does not distort)."""
    free, pairs = list(wire), []
    for o in ours:
        near = [w for w in free if abs(w["send"] - o["send"] - offset) < 0.002]
        if near:
            best = min(near, key=lambda w: abs(w["e2e_ms"] - o["e2e_ms"]))
            free.remove(best)
            pairs.append((o, best))
    return pairs


def _layout(venv: Path, pinned: bool, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from pytest_sskj.bench.runner import run_bench
    from pytest_sskj.bench.workload import Workload

    name = "pinned" if pinned else "unpinned"
    port = _free_port()
    proc = _start_vllm(venv, port, pinned, work / f"vllm-{name}.log")
    tcpdump: subprocess.Popen[bytes] | None = None
    try:
        startup = _wait_healthy(port, proc)
        os.sched_setaffinity(0, {0} if pinned else set(range(os.cpu_count() or 2)))
        pcap = work / f"{name}.pcap"
        tcpdump = subprocess.Popen(
            ["tcpdump", "-i", "lo", "-U", "-n", "-s", "0", "--time-stamp-precision=nano", "-w", str(pcap),
             f"tcp port {port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)
        w = Workload(isl=args.isl, osl=args.osl, requests=args.requests, concurrency=args.concurrency, warmup=2,
                     vocab_high=4000)  # fmt: skip
        res = run_bench(f"http://127.0.0.1:{port}", w, work / name)
        offset = time.time() - time.perf_counter()  # the two clocks of this process, as the transport maps them
        time.sleep(2.0)  # the capture's last packets reach the file
    finally:
        if tcpdump is not None:
            tcpdump.send_signal(signal.SIGINT)
            tcpdump.wait(10)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    wire = _wire_requests(_packets(pcap, port), args.osl)
    ours = _ours(work / name / "requests.jsonl", args.osl)
    pairs = [(o, x) for o, x in _match(ours, wire, offset) if not o["warmup"]]
    ours = [o for o in ours if not o["warmup"]]
    n = len(pairs)
    diff = {k: [o[k] - x[k] for o, x in pairs] for k in ("ttft_ms", "tpot_ms", "e2e_ms")}
    med = statistics.median
    return {
        "layout": name,
        "startup_s": round(startup, 1),
        "matched": n,
        "wire_complete": len(wire),
        "ours_ttft_ms": med(o["ttft_ms"] for o in ours),
        "wire_ttft_ms": med(x["ttft_ms"] for x in wire),
        "ours_tpot_ms": med(o["tpot_ms"] for o in ours),
        "wire_tpot_ms": med(x["tpot_ms"] for x in wire),
        "ttft_diff_p50_ms": med(diff["ttft_ms"]),
        "ttft_diff_max_ms": max(diff["ttft_ms"], key=abs),
        "tpot_diff_p50_ms": med(diff["tpot_ms"]),
        "tpot_diff_max_ms": max(diff["tpot_ms"], key=abs),
        "e2e_diff_p50_ms": med(diff["e2e_ms"]),
        "client_bound": res.metrics.get("client_bound"),
        "client_bound_reasons": res.metrics.get("client_bound_reasons"),
        "multi_frame_read_share": res.metrics.get("multi_frame_read_share"),
        "event_loop_lag_p90_ms": res.metrics.get("event_loop_lag_p90_ms"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--layouts", default="pinned,unpinned")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    args = ap.parse_args()
    venv = Path(os.environ.get("SSKJ_VLLM_VENV", ROOT / ".venv-vllm"))
    with tempfile.TemporaryDirectory(prefix="sskj-wire-") as tmp:
        rows = [_layout(venv, name == "pinned", args, Path(tmp)) for name in args.layouts.split(",")]
    for r in rows:
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
