"""The real vLLM CPU server's own ``/metrics`` scraped during a point: its generated-token counter over the
block equals the tokens the client received (exact counts: ``ignore_eos`` with ``max_tokens``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.pool import free_port
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.telemetry import point_telemetry

pytestmark = pytest.mark.slow  # a real vLLM server (one to four minutes to /health on a loaded CPU box)


def _venv() -> tuple[Path, Path]:
    venv = os.environ.get("SSKJ_VLLM_VENV", "")
    if not venv or not (Path(venv) / "bin" / "python").is_file():
        pytest.skip(f"SSKJ_VLLM_VENV={venv!r} has no bin/python (a venv made by .ci/install_vllm.sh)")
    model = Path(os.environ.get("SSKJ_VLLM_MODEL") or Path(venv) / "tiny-llama")
    if not (model / "config.json").is_file():
        pytest.skip(f"no tiny model at {model}")
    return Path(venv) / "bin" / "python", model


class _Server:
    def __init__(self, url: str, pid: int) -> None:
        self.spec = ServerSpec(engine="vllm", backend="auto")
        self.urls = [url]
        self.external = False
        self.pid = pid

    def pids(self) -> dict[str, list[int]]:
        return {"local/rank0": [self.pid]}


@pytest.mark.timeout(900)
def test_server_generated_tokens_over_the_point_equal_the_clients(tmp_path: Path) -> None:
    python, model = _venv()
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--max-model-len", "512", "--dtype", "bfloat16", "--enforce-eager"]
    log = (tmp_path / "vllm.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.perf_counter() + 600
        while True:
            assert proc.poll() is None, (tmp_path / "vllm.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.perf_counter() < deadline, "vLLM did not become healthy in 600 s"
            time.sleep(2)
        launcher = LocalLauncher()
        got = 0
        with point_telemetry(_Server(url, proc.pid), launcher, tmp_path / "point", interval_s=0.5) as tel:
            for i in range(4):
                body = {"model": str(model), "prompt": [1, 2, 3, 4 + i], "max_tokens": 12, "ignore_eos": True}
                r = httpx.post(url + "/v1/completions", json=body, timeout=120)
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
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()
