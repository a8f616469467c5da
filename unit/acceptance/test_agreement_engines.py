"""Output-agreement dialects against the real engines: the token ids are the engine's own generated ids.

* llama.cpp (xllamacpp, the embedded engine): ``/completion`` with ``return_tokens`` -- the ids detokenize
  to the returned text, exactly ``n_predict`` of them, the prompt ids are taken as sent (no BOS added).
* vLLM (the real CPU server of ``.ci/install_vllm.sh``; ``SSKJ_VLLM_VENV``/``SSKJ_VLLM_MODEL``, skipped with
  the reason without it, a failure under ``SSKJ_REQUIRE_VLLM=1``): ``/v1/completions`` with
  ``return_token_ids`` -- prompt ids echoed as sent, OSL ids that detokenize to the text; and the A/A
  control measured on one server at two batch sizes (C=8 and C=1).
* SGLang (the real ``sglang`` package's source, read without importing it; skipped without it, a failure
  under ``SSKJ_REQUIRE_SGLANG=1``): ``/generate`` answers a finished non-streaming request with
  ``output_ids``, the fields we send exist in ``GenerateReqInput`` / ``SamplingParams``, and temperature 0
  is greedy.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from vllm_shared import RealVllm

from pytest_sskj.acceptance.agreement import DIALECTS, agreement, probe_set, run_probe
from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server


@pytest.fixture(scope="module")
def llamacpp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = ensure_tiny_model(tmp_path_factory.mktemp("models"))
    with embedded_server(model, slots=8, log_path=tmp_path_factory.mktemp("logs") / "embedded.log") as url:
        yield url


def test_llamacpp_dialect_returns_the_generated_ids_exactly(llamacpp: str) -> None:
    d = DIALECTS["llamacpp"]
    prompt = [300, 301, 302, 303, 304, 305, 306, 307]
    r = httpx.post(llamacpp + d.path, json=d.body(prompt, 12, 42, None), timeout=60, trust_env=False)
    assert r.status_code == 200, r.text
    ans = r.json()
    ids = d.tokens(ans)
    assert len(ids) == 12, f"expected exactly n_predict=12 ids (ignore_eos), saw {len(ids)}"
    assert ans["tokens_evaluated"] == len(prompt), "the prompt ids must be taken as sent (no BOS added)"
    text = httpx.post(llamacpp + "/detokenize", json={"tokens": ids}, timeout=30, trust_env=False).json()["content"]
    assert text == ans["content"], f"the ids must be the generated ones: {text!r} vs {ans['content']!r}"


def test_llamacpp_probe_is_repeatable_on_one_server(llamacpp: str) -> None:
    ps = probe_set(42, 8, isl=64, osl=8)
    a = run_probe(llamacpp, "llamacpp", ps, concurrency=1)
    b = run_probe(llamacpp, "llamacpp", ps, concurrency=1)
    assert not a.failed() and not any(a.errors), a.errors
    assert all(t is not None and len(t) == 8 for t in a.tokens)
    same = agreement(a, b)
    assert same.identical_seq_frac == 1.0, f"one request at a time, twice: expected identical, saw {same}"


# -- vLLM ------------------------------------------------------------------------------------------------
@pytest.fixture
def vllm(real_vllm: RealVllm) -> str:
    """The session's shared real vLLM server (unit/vllm_shared.py: no prefix caching, max-model-len 2048)."""
    return real_vllm.url


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_vllm_dialect_returns_the_generated_ids_exactly(vllm: str) -> None:
    d = DIALECTS["openai-token-ids"]
    model = httpx.get(vllm + "/v1/models", timeout=30, trust_env=False).json()["data"][0]["id"]
    prompt = [300, 301, 302, 303, 304, 305, 306, 307]
    r = httpx.post(vllm + d.path, json=d.body(prompt, 12, 42, model), timeout=120, trust_env=False)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    ids = d.tokens(r.json())
    assert len(ids) == 12, f"expected exactly max_tokens=12 ids (ignore_eos), saw {len(ids)}"
    assert choice["prompt_token_ids"] == prompt, "the prompt ids must be taken as sent"
    det = httpx.post(vllm + "/detokenize", json={"model": model, "tokens": ids}, timeout=30, trust_env=False)
    assert det.json()["prompt"] == choice["text"], f"the ids must be the generated ones: {det.text} vs {choice}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_vllm_aa_control_at_two_batch_sizes_is_measured(vllm: str) -> None:
    ps = probe_set(42, 32, isl=512, osl=16)
    batched = run_probe(vllm, "openai-token-ids", ps, concurrency=8)
    single = run_probe(vllm, "openai-token-ids", ps, concurrency=1, role="aa")
    assert not any(batched.errors) and not any(single.errors), (batched.errors, single.errors)
    assert all(t is not None and len(t) == 16 for t in (*batched.tokens, *single.tokens))
    distinct_first = {t[0] for t in batched.tokens if t}
    assert len(distinct_first) > 8, f"a degenerate model would make agreement trivial: {distinct_first}"
    aa = agreement(batched, single)
    assert aa.compared == 32
    print(
        f"\nvLLM A/A (one server, C=8 vs C=1): first token {aa.first_token_agreement_frac}, identical "
        f"{aa.identical_seq_frac}, prefix {aa.mean_prefix_match_tokens}/16; probes {batched.wall_s:.2f} s + "
        f"{single.wall_s:.2f} s"
    )


# -- SGLang (source contract) ------------------------------------------------------------------------------
def _sglang_root() -> Path:
    """The installed sglang package's folder: the contract venv's (``SSKJ_SGLANG_PYTHON``, .ci/install_sglang.sh)
    when it is given, else this interpreter's (no import: ``find_spec`` of a top-level package runs nothing)."""
    python = os.environ.get("SSKJ_SGLANG_PYTHON")
    if python:
        import subprocess

        probe = "import importlib.util as u; s = u.find_spec('sglang'); print(next(iter(s.submodule_search_locations)))"
        res = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
        if res.returncode == 0 and res.stdout.strip():
            return Path(res.stdout.strip().splitlines()[-1])
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        reason = "the sglang package is not installed (pip install --no-deps sglang==0.5.23; .ci/install_sglang.sh)"
        if os.environ.get("SSKJ_REQUIRE_SGLANG", "") == "1":
            pytest.fail(f"SSKJ_REQUIRE_SGLANG=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return Path(next(iter(spec.submodule_search_locations)))


def test_sglang_generate_answers_output_ids_and_takes_our_fields() -> None:
    root = _sglang_root() / "srt"
    tm = (root / "managers" / "tokenizer_manager.py").read_text()
    assert re.search(r"state\.finished:\s*\n\s*out_dict = \{[^}]*\"output_ids\": state\.output_ids", tm), (
        "a finished /generate request must answer the generated ids as output_ids"
    )
    io = (root / "managers" / "io_struct.py").read_text()
    gen = io[io.index("class GenerateReqInput") :][:6000]
    body = DIALECTS["sglang-generate"].body([300, 301], 16, 42, None)
    for name in body:
        assert re.search(rf"^\s+{name}\s*:", gen, re.M), f"GenerateReqInput has no field {name!r}"
    sp = (root / "sampling" / "sampling_params.py").read_text()
    cls = sp[sp.index("class SamplingParams") :]
    fields = cls[: cls.index("    def ")]
    for name in body["sampling_params"]:
        assert re.search(rf"^\s+{name}\s*:", fields, re.M), f"SamplingParams has no field {name!r}"
    assert re.search(r"if 0 <= self\.temperature < _SAMPLING_EPS:\s*\n(.*\n){0,3}\s*self\.top_k = 1", cls), (
        "temperature 0 must mean greedy (top_k = 1)"
    )
