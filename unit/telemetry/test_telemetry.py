"""Telemetry of a point: the engine's /metrics scraped during the measured phase, GPU samples (or the reason
there are none) from every node over the launcher, the row summary and the flags."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.telemetry import PointTelemetry, point_telemetry, read_gpu_log, summarise
from pytest_sskj.telemetry.gpu_script import nvml_unavailable
from pytest_sskj.telemetry.prometheus import generation_tokens, parse

VLLM_BODY = """# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 1200.0
vllm:generation_tokens_created{engine="0",model_name="tiny"} 1.7e9
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 5000.0
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:time_to_first_token_seconds_bucket{le="0.001"} 0.0
"""


def test_prometheus_text_keeps_token_counters_and_sums_label_sets() -> None:
    v = parse(VLLM_BODY + 'vllm:generation_tokens_total{engine="1",model_name="tiny"} 34.0\n')
    assert v == {
        "vllm:generation_tokens_total": 1234.0,
        "vllm:prompt_tokens_total": 5000.0,
        "vllm:num_requests_running": 3.0,
    }
    assert generation_tokens(v) == 1234.0
    assert generation_tokens(parse("sglang:generation_tokens_total 7\n")) == 7.0
    assert generation_tokens(parse("llamacpp:tokens_predicted_total 7\n")) is None


class _Counter:
    """A stand-in engine whose /metrics counter grows 100 generated tokens per second of wall time."""

    def __init__(self) -> None:
        self.t0 = time.time()

    def body(self) -> str:
        return f'sglang:generation_tokens_total{{tp_rank="0"}} {100.0 * (time.time() - self.t0):.3f}\n'


@pytest.fixture
def metrics_server() -> Iterator[str]:
    counter = _Counter()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = counter.body().encode() if self.path == "/metrics" else b""
            self.send_response(200 if data else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


class _Server:
    def __init__(self, url: str) -> None:
        self.spec = ServerSpec(engine="sglang", backend="marlin")
        self.urls = [url]
        self.external = False

    def pids(self) -> dict[str, list[int]]:
        return {"local/rank0": [1]}


def test_point_scrapes_metrics_samples_gpus_over_the_launcher_and_summarises(
    metrics_server: str, tmp_path: Path
) -> None:
    launcher = LocalLauncher()
    try:
        with point_telemetry(_Server(metrics_server), launcher, tmp_path, interval_s=0.2) as tel:
            time.sleep(1.5)
        assert launcher.leftover_pids() == {}, "the GPU sampler must be torn down with its tree"
    finally:
        launcher.close()
    lines = (tmp_path / "telemetry.jsonl").read_text().splitlines()
    scrapes = [r for r in tel.records if r["source"] == "metrics"]
    assert len(scrapes) >= 4 and len(lines) == len(tel.records), (len(scrapes), len(lines))
    gpu = [r for r in tel.records if r["source"] == "gpu"]
    assert gpu, "the sampler ran on the node and said something"
    cols = summarise(tel, {"output_throughput": 100.0}, tolerance_pct=25.0)
    assert cols["server_output_throughput"] == pytest.approx(100.0, rel=0.05), cols
    # the tokens are the counter's own delta between the first and the last scrape (what the server said, not
    # 100/s times the client's stamps: on a loaded box a reply's stamp lags the counter's reading by a few ms)
    first, last = (generation_tokens(r["values"]) for r in (scrapes[0], scrapes[-1]))
    assert first is not None and last is not None, (scrapes[0], scrapes[-1])
    assert cols["server_output_tokens"] == pytest.approx(last - first, abs=1), (cols, first, last)
    assert not [f for f in cols["telemetry_flags"] if "throughput" in f], cols["telemetry_flags"]
    why = nvml_unavailable()
    if why is not None:  # this box: no GPU; the row says why instead of inventing numbers
        assert cols["telemetry_gpu"] == f"local: {why}", cols
        assert cols["gpu_power_mean_w"] is None and cols["gpu_sm_clock_min_mhz"] is None
    else:  # a GPU box: measured figures (other flags, e.g. another test's CUDA process on the card, may appear)
        assert cols["gpu_power_mean_w"] is not None and cols["gpu_sm_clock_min_mhz"] is not None, cols
    wrong = summarise(tel, {"output_throughput": 160.0}, tolerance_pct=25.0)
    (flag,) = [f for f in wrong["telemetry_flags"] if "throughput" in f]
    assert flag.startswith("throughput disagreement: client 160.0 tok/s vs server "), flag
    assert "tolerance ±25 %" in flag


def _gpu(node: str, t: float, **g: Any) -> dict[str, Any]:
    base = {"index": 0, "power_w": 600.0, "sm_clock_mhz": 1980, "mem_used_mib": 120000, "util_pct": 90, "throttle": []}
    return {"source": "gpu", "node": node, "t": t, "gpus": [{**base, "pids": [[4242, "python3"]], **g}]}


def test_throttling_and_a_foreign_gpu_process_are_flagged_with_node_and_gpu(tmp_path: Path) -> None:
    tel = PointTelemetry(tmp_path, 1.0, server_pids={"601": [4242], "602": [5151]})
    tel.records = [
        _gpu("601", 1.0),
        _gpu("601", 2.0, sm_clock_mhz=1410, power_w=700.0, throttle=["sw_power_cap"]),
        _gpu("602", 1.0, pids=[[5151, "python3"], [777, "stress"]]),
    ]
    cols = summarise(tel, {}, tolerance_pct=25.0)
    assert cols["gpu_sm_clock_min_mhz"] == 1410 and cols["gpu_power_mean_w"] == pytest.approx(633.3, abs=0.1)
    assert cols["telemetry_flags"] == [
        "clock throttling on 601 GPU 0: sw_power_cap",
        "foreign GPU process on 602 GPU 0: 777 (stress)",
    ]
    assert cols["server_output_throughput"] is None, "no /metrics counter: undefined, not 0"


def test_sampler_lines_are_read_from_a_streamed_ssh_log(tmp_path: Path) -> None:
    log = tmp_path / "gpu.log"
    log.write_text(
        "[sskj] node=601 rank=0 pid=12 started\n"
        'SSKJ-GPU {"t": 1.0, "gpus": [{"index": 0, "power_w": 500.0}]}\n'
        "garbage SSKJ-GPU {not json\n"
        'SSKJ-GPU {"t": 2.0, "unavailable": "NVML sees no GPU"}\n'
    )
    recs = read_gpu_log(log, "601")
    assert [r.get("t") for r in recs] == [1.0, 2.0] and all(r["node"] == "601" for r in recs)
