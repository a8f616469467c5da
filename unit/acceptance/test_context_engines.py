"""The max-context-length probe against the real engines (issue 48, item 2): their own context limits, found to the
token, with their own refusals kept.

* llama.cpp (the embedded engine, xllamacpp): 8 slots of 4096 tokens; a prompt of >= the slot's n_ctx is refused
  with HTTP 400 ``exceed_context_size_error``, so 4095 is the largest served; ``/props`` advertises 4096.
* vLLM 0.32 on CPU (``--max-model-len 2048``, the shared server): a prompt of max_model_len tokens leaves no room
  for the one requested output token (refused: "max_tokens must be at least 1, got 0"; longer prompts: "This
  model's maximum context length is 2048 tokens"), so 2047 is the largest served; ``/v1/models`` advertises 2048.
* The acceptance run end to end on the embedded engine: ``--sskj-max-context 16:64K`` makes
  ``test_max_context[parallel-ctx]`` pass with the limit, every probe kept in the host point's folder.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_shared import RealVllm

from pytest_sskj.acceptance.context_probe import search
from pytest_sskj.server.embedded import CTX_PER_SLOT, ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server

pytestmark = pytest.mark.slow  # real servers

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


def test_llamacpp_serves_one_token_less_than_its_slot_context(tmp_path: Path) -> None:
    with embedded_server(ensure_tiny_model(tmp_path / "models"), slots=8, log_path=tmp_path / "s.log") as url:
        got = search(url, "llamacpp", 16, 65536, timeout_s=120.0)
    trace = [(p.isl, p.outcome, p.message[:60]) for p in got.probes]
    assert got.largest == CTX_PER_SLOT - 1 and got.settled, trace
    assert (got.advertised, got.advertised_from) == (CTX_PER_SLOT, "/props n_ctx"), trace
    bad = got.first_failed
    assert bad is not None and bad.isl == CTX_PER_SLOT and bad.outcome == "rejected" and bad.status == 400, trace
    assert "exceeds the available context size" in bad.message, bad.message
    assert len(got.probes) == 4, f"the advertised limit is true: LO, HI and its two sides settle it; saw {trace}"


def test_vllm_serves_its_max_model_len_less_the_output_token(real_vllm: RealVllm) -> None:
    got = search(real_vllm.url, "openai-token-ids", 16, 65536, timeout_s=120.0)
    trace = [(p.isl, p.outcome, p.message[:60]) for p in got.probes]
    assert got.largest == 2047 and got.settled and got.advertised == 2048, trace
    bad = got.first_failed
    assert bad is not None and bad.isl == 2048 and bad.outcome == "rejected" and bad.status == 400, trace
    # vLLM's own words, kept: at max_model_len the output budget it clamps to is 0 tokens; past it, the limit
    assert "max_tokens must be at least 1, got 0" in bad.message, bad.message
    hi = next(p for p in got.probes if p.isl == 65536)
    assert hi.outcome == "rejected" and "maximum context length is 2048 tokens" in hi.message, hi


def test_the_acceptance_run_reports_the_embedded_servers_limit(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    cmd = [sys.executable, "-m", "pytest", str(ACCEPTANCE), "-p", "no:cacheprovider", "-rA", "-k", "max_context",
           "--reports-dir", str(reports), "--run-id", "ctx", "--backend", "parallel", "--isl", "128", "--osl", "4",
           "--requests", "4", "--repeats", "1", "--chunk", "512", "--concurrency", "4", "--sskj-search", "none",
           "--sskj-slo", "p95_ttft_ms<60000", "--sskj-allow-client-bound", "--sskj-max-context", "16:64K"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "test_max_context.py::test_max_context[parallel-ctx]" in out and proc.returncode == 0, out[-3000:]
    assert f"largest input served within the SLO {CTX_PER_SLOT - 1} tokens" in out, out[-3000:]
    kept = json.loads((reports / "ctx" / "points" / "parallel-chunk512-c4-r1" / "max-context.json").read_text())
    assert kept["largest"] == CTX_PER_SLOT - 1 and kept["api"] == "llamacpp", kept
    assert {p["outcome"] for p in kept["probes"]} == {"accepted", "rejected"}, kept["probes"]
    with sqlite3.connect(reports / "results.sqlite") as db:
        rows = db.execute("select kind, passed from verdicts where run_id = 'ctx' and kind = 'max_context'").fetchall()
    assert rows == [("max_context", 1)], f"the verdict reaches the results database like every verdict: {rows}"
    settings = json.loads((reports / "ctx" / "manifest.json").read_text())["settings"]
    assert settings["max_context"] == [16, 65536], settings["max_context"]
