"""``--target-url`` against the real vLLM CPU server (``SSKJ_VLLM_VENV``, real-engines.md), started by hand the way
a user runs one (no ``VLLM_SERVER_DEV_MODE``; the session's shared server, unit/vllm_shared.py): the run verifies
what vLLM reports (``/version``, ``/v1/models``' model and ``max_model_len``, ``/metrics``), refuses a model-path
label that contradicts the served model, and says in its terminal, manifest and verdicts that the backend label
cannot be verified (vLLM exposes no MoE backend)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_shared import RealVllm

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a real vLLM server (a minute or more to load on a CPU box)


def _pytest(*args: str, reports: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest", "acceptance/", "--engine", "vllm", *args, "-k", "no_test_has_this_name",
            "-p", "no:xdist", "--reports-dir", str(reports)]  # fmt: skip
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def test_a_vllm_target_is_verified_where_vllm_reports_and_unverifiable_labels_are_stated(
    real_vllm: RealVllm, tmp_path: Path
) -> None:
    url, model = real_vllm.url, real_vllm.model
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
