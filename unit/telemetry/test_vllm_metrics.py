"""The real vLLM CPU server's own ``/metrics`` scraped during a point: its generated-token counter over the
block equals the tokens the client received (exact counts: ``ignore_eos`` with ``max_tokens``).  The server is the
session's shared one (unit/vllm_shared.py): the counter is read as a difference over the point, so what other tests
sent before does not count."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from vllm_shared import RealVllm

from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.telemetry import point_telemetry

pytestmark = pytest.mark.slow  # a real vLLM server (one to four minutes to /health on a loaded CPU box)


class _Server:
    def __init__(self, url: str, pid: int) -> None:
        self.spec = ServerSpec(engine="vllm", backend="auto")
        self.urls = [url]
        self.external = False
        self.pid = pid

    def pids(self) -> dict[str, list[int]]:
        return {"local/rank0": [self.pid]}


@pytest.mark.timeout(900)
def test_server_generated_tokens_over_the_point_equal_the_clients(real_vllm: RealVllm, tmp_path: Path) -> None:
    url, model = real_vllm.url, real_vllm.model
    launcher = LocalLauncher()
    got = 0
    with point_telemetry(_Server(url, real_vllm.pid), launcher, tmp_path / "point", interval_s=0.5) as tel:
        for i in range(4):
            body = {"model": str(model), "prompt": [1, 2, 3, 4 + i], "max_tokens": 12, "ignore_eos": True}
            r = httpx.post(url + "/v1/completions", json=body, timeout=120, trust_env=False)
            assert r.status_code == 200, r.text
            got += int(r.json()["usage"]["completion_tokens"])
        time.sleep(0.6)
    launcher.close()
    cols = tel.summary({"output_throughput": None}, tolerance_pct=25.0)
    assert got == 48
    assert cols["server_output_tokens"] == got, (cols, [r for r in tel.records if r["source"] == "metrics"][-1:])
    assert cols["server_output_throughput"] and cols["server_output_throughput"] > 0, cols
    assert (tmp_path / "point" / "telemetry.jsonl").is_file()
    print(
        f"\nvLLM /metrics: {cols['server_output_tokens']} generated tokens over the point, client {got}; "
        f"{cols['server_output_throughput']} tok/s server-side; GPU: {cols['telemetry_gpu']}",
        file=sys.stderr,
    )
