"""``--target-url`` against the real vLLM CPU server (``SSKJ_VLLM_VENV``, real-engines.md), started by hand the way
a user runs one (no ``VLLM_SERVER_DEV_MODE``): the run verifies what vLLM reports (``/version``, ``/v1/models``'
model and ``max_model_len``, ``/metrics``), refuses a model-path label that contradicts the served model, and says in
its terminal, manifest and verdicts that the backend label cannot be verified (vLLM exposes no MoE backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sskj.server.health import probe
from pytest_sskj.server.pool import free_port
from pytest_sskj.server.process import ManagedProcess

REPO = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("SSKJ_REQUIRE_VLLM", "") == "1"
pytestmark = pytest.mark.slow  # a real vLLM server (a minute or more to load on a CPU box)


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    venv = os.environ.get("SSKJ_VLLM_VENV", "")
    model = Path(os.environ.get("SSKJ_VLLM_MODEL") or Path(venv) / "tiny-llama")
    if not venv or not (Path(venv) / "bin" / "python").is_file() or not (model / "config.json").is_file():
        reason = f"no vLLM venv with a tiny model (SSKJ_VLLM_VENV={venv!r}; .ci/install_vllm.sh)"
        if REQUIRED:
            pytest.fail(f"SSKJ_REQUIRE_VLLM=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    port = free_port()
    argv = [str(Path(venv) / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "bfloat16",
            "--enforce-eager"]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("VLLM_SERVER_DEV_MODE", None)
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    proc = ManagedProcess(argv, log, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 480
        while probe(url, "/health", 5.0)[0] != 200:
            assert proc.poll() is None, f"vLLM exited ({proc.poll()}):\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"vLLM not healthy in 480 s:\n{log.read_text()[-3000:]}"
            time.sleep(2)
        yield url, model
    finally:
        proc.terminate(30.0)


def _pytest(*args: str, reports: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest", "acceptance/", "--engine", "vllm", *args, "-k", "no_test_has_this_name",
            "-p", "no:xdist", "--reports-dir", str(reports)]  # fmt: skip
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def test_a_vllm_target_is_verified_where_vllm_reports_and_unverifiable_labels_are_stated(
    vllm_url: tuple[str, Path], tmp_path: Path
) -> None:
    url, model = vllm_url
    reports = tmp_path / "reports"
    wrong = _pytest("--target-url", url, "--model-path", "/models/Kimi-K3", reports=reports)
    assert wrong.returncode == 4, f"a contradicting model label must be refused:\n{wrong.stdout}{wrong.stderr}"
    assert f"model_path: the run's label is /models/Kimi-K3, but the server at {url} serves {model}" in wrong.stderr

    run = _pytest("--target-url", url, "--backend", "triton", "--model-path", str(model), "--run-id", "v1",
                  reports=reports)  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 5, f"expected a verified session with no test selected (5):\n{out[-3000:]}"
    assert "verified model_path" in out and "max_model_len=2048" in out and "version=0.32.0" in out, out[-3000:]
    note = (
        "labels not verified: backend (vLLM exposes no MoE backend without VLLM_SERVER_DEV_MODE=1 (/server_info 404))"
    )
    assert note in out, out[-3000:]
    target = json.loads((reports / "v1" / "manifest.json").read_text())["target"]
    assert target["served"]["version"] == "0.32.0" and target["served"]["max_model_len"] == 2048, target
    assert "/metrics" in target["served"]["sources"] and target["verified"] == ["model_path"], target
    assert set(target["not_verified"]) == {"backend"}, target
