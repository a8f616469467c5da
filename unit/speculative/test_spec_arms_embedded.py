"""Speculative arms end to end on the real embedded engine (llama.cpp via xllamacpp).

``--backend parallel,parallel+self,parallel+other`` with ``--sskj-speculative`` naming two GGUF drafts of the tiny
model's vocabulary (its own weights; unrelated weights), judged on output throughput then TPOT P50 like a decode
change.  Each arm's rows carry the engine's own acceptance counters; the servers' specs differ only in the speculative
flags, so the A/B is comparable; greedy outputs at C=1 are identical to the plain server's (the lossless check); the
draft that is never right is a slow-down called ``worse``; the conclusions speak of the compared metrics for every
candidate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.engines.embedded import OTHER_SEED
from pytest_sskj.server.embedded import ensure_tiny_model

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"

pytestmark = pytest.mark.slow  # three embedded servers x 3 repeats, one with a draft that is never right


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spec-arms")
    own = ensure_tiny_model(root / "drafts")
    other = ensure_tiny_model(root / "drafts", seed=OTHER_SEED)
    spec = f"self=draft:draft={own};other=draft:draft={other},draft_tokens=4"
    cmd = [sys.executable, "-m", "pytest", str(ACCEPTANCE), "-p", "no:cacheprovider", "-q", "--reports-dir",
           str(root / "reports"), "--run-id", "arms", "--backend", "parallel,parallel+self,parallel+other",
           "--sskj-speculative", spec, "--isl", "128", "--osl", "64", "--requests", "16", "--repeats", "3",
           "--chunk", "512", "--concurrency", "8", "--sskj-search", "none", "--sskj-slo", "none",
           "--sskj-compare-metrics", "output_throughput,median_tpot_ms",
           "-k", "test_serving or test_backend"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-2000:]
    (root / "stdout.txt").write_text(proc.stdout)
    return root / "reports" / "arms"


def _rows(run: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.setdefault(r["backend"], []).append(r)
    return out


def _comparisons(run: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((run / "verdicts.json").read_text())
    items = data if isinstance(data, list) else data["verdicts"]
    return {str(v["candidate"]): v for v in items if v.get("kind") == "comparison"}


@pytest.mark.parametrize(("arm", "rate"), [("parallel+self", 1.0), ("parallel+other", 0.0)])
def test_each_arm_reads_its_acceptance_from_the_engines_own_counters(run: Path, arm: str, rate: float) -> None:
    rows = _rows(run)
    assert len(rows[arm]) == 3, rows[arm]
    assert all(r["status"] == "passed" for r in rows[arm]), [r.get("reasons") for r in rows[arm]]
    assert {r["spec_accept_rate"] for r in rows[arm]} == {rate}, [r["spec_accept_rate"] for r in rows[arm]]
    assert all(r["spec_draft_tokens"] > 0 for r in rows[arm])
    assert {r["spec_accept_rate"] for r in rows["parallel"]} == {None}


def test_the_arms_are_comparable_and_their_greedy_outputs_identical_at_c1(run: Path) -> None:
    for arm, v in _comparisons(run).items():
        agr = v["agreement"]
        assert "incomparable" not in str(v.get("outcome")) and "server spec" not in v["message"], (arm, v["message"])
        assert "identical_seq_frac>=1" in agr["gates"] and agr["passed"] is True, (arm, agr.get("message"))
        assert "(both sides at C=1)" in agr["message"] and "identical 32/32" in agr["message"], agr["message"]


def test_a_draft_that_is_never_right_is_a_slow_down_called_worse(run: Path) -> None:
    v = _comparisons(run)["parallel+other"]
    assert v["outcome"] == "worse" and v["metrics"][0]["name"] == "output_throughput", v["message"]
    stdout = (run.parent.parent / "stdout.txt").read_text()
    assert "parallel+other vs parallel C=8: −" in stdout and "Output TPS /" in stdout and "TPOT P50" in stdout, stdout
