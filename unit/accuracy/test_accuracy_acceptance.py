"""Accuracy gates as acceptance tests, end to end on the real embedded engine (llama.cpp via xllamacpp).

The known-answer control set (the f32 tiny model's own greedy answers to CI's generated questions) is given as the
user's question file.  One run of ``acceptance/`` with ``parallel`` (the baseline: f32, 8 slots), ``q8_0`` (the
same weights quantized), ``serial`` (f32, one slot: a scheduling change) and ``parallel`` again (the A/A control)
at ``delta>=-5pt``: every backend answers every question at C1 and C8, the quantized copy loses more than the
margin and fails,
the scheduling change and the A/A control are ``non-inferior`` and pass.  A second run at ``delta>=-1pt`` cannot
decide the margin on the control's questions and fails saying how many questions would.  Answers, verdicts, the
results database and the manifest keep what was asked.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.accuracy import load
from pytest_sskj.accuracy.control import known_answer_file
from pytest_sskj.accuracy.generate import items, write
from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
MAX_TOKENS = 48

pytestmark = pytest.mark.slow  # every backend served end to end, twice


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The known-answer file (the ``parallel`` variant's own answers: f32, 8 slots, 48 tokens) and its size."""
    tmp = tmp_path_factory.mktemp("control")
    write(items(64, 1), tmp / "questions.jsonl")
    questions = load("questions", tmp / "questions.jsonl").subset(64)
    with embedded_server(ensure_tiny_model(tmp / "models"), slots=8, log_path=tmp / "f32.log") as url:
        kept = known_answer_file(url, "llamacpp", questions, tmp / "control.jsonl", concurrency=8, max_tokens=48)
    assert kept >= 40, f"expected most of 64 questions to get a numeric answer, kept {kept}"
    return tmp / "control.jsonl", kept


def _run(root: Path, control: Path, backends: str, margin: str, *extra: str) -> tuple[pytest.RunResult, Path]:
    reports = root / "reports"
    cmd = [sys.executable, "-m", "pytest", str(ACCEPTANCE), "-p", "no:cacheprovider", "-rA",
           "--reports-dir", str(reports), "--run-id", "acc", "--backend", backends, "--isl", "128", "--osl", "4",
           "--requests", "4", "--repeats", "1", "--chunk", "512", "--concurrency", "8", "--sskj-search", "none",
           "--sskj-slo", "none", "--sskj-compare-expect", "report", "--sskj-allow-client-bound",
           "--sskj-agreement-prompts", "0", "--sskj-accuracy-set", f"gsm8k={control}",
           "--sskj-accuracy-max-tokens", str(MAX_TOKENS), "--sskj-accuracy-min", margin, *extra]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    return pytest.RunResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(), 0.0), reports / "acc"


@pytest.fixture(scope="module")
def run(control: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory) -> tuple[pytest.RunResult, Path]:
    path, kept = control
    root = tmp_path_factory.mktemp("acc5")
    return _run(root, path, "parallel,q8_0,serial,parallel", "delta>=-5pt", "--sskj-accuracy-questions", str(kept))


def _verdict(run_dir: Path, kind: str, vid: str) -> dict[str, Any]:
    path = run_dir / "verdicts" / f"{kind}-{vid}.json"
    assert path.is_file(), f"expected the verdict file {path}; have {sorted(p.name for p in path.parent.glob('*'))}"
    return dict(json.loads(path.read_text()))


def _outcome(result: pytest.RunResult, test: str) -> str:
    for line in result.outlines:
        if test in line and line.split(" ", 1)[0] in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
            return line.split(" ", 1)[0]
    raise AssertionError(f"no outcome line for {test}:\n" + "\n".join(result.outlines[-40:]))


@pytest.mark.parametrize("arm", ["parallel", "q8_0", "serial", "parallel@2"])
@pytest.mark.parametrize("c", [1, 8])
def test_every_backend_answers_every_question_and_the_score_is_kept(
    run: tuple[pytest.RunResult, Path], control: tuple[Path, int], arm: str, c: int
) -> None:
    result, run_dir = run
    assert _outcome(result, f"test_accuracy[{arm}-acc-c{c}]") == "PASSED"
    v = _verdict(run_dir, "accuracy", f"{arm}-acc-c{c}")
    score = v["score"]
    assert score["questions"] == control[1] and score["missing"] == 0, f"every question answered, saw {score}"
    assert v["set"]["sha256"] and v["set"]["records"] == control[1], v["set"]
    answers = (run_dir / "points" / f"{arm}-chunk512-c8-r1" / f"accuracy-c{c}.jsonl").read_text().splitlines()
    first = json.loads(answers[0])
    assert len(answers) == control[1] and first["prompt"].startswith("Question: "), first
    if arm in ("parallel", "parallel@2"):
        assert score["correct"] == control[1], f"the reference model scores every known answer, saw {score}"


@pytest.mark.parametrize("c", [1, 8])
def test_a_quantized_copy_answers_worse_and_fails_the_gate(run: tuple[pytest.RunResult, Path], c: int) -> None:
    result, run_dir = run
    assert _outcome(result, f"test_accuracy_gate[q8_0-vs-parallel-acc-c{c}]") == "FAILED"
    v = _verdict(run_dir, "accuracy_gate", f"q8_0-vs-parallel-acc-c{c}")
    assert v["passed"] is False and v["delta_pt"] < -5, f"expected a loss beyond 5 points, saw {v['message']}"
    assert v["margin"] == "delta>=-5pt" and v["method"].startswith("sskj-accuracy/1"), v
    tag = f"[{v['outcome']}]"
    assert any(f"{tag} accuracy of q8_0 vs parallel at C={c}:" in line for line in result.outlines), (
        f"expected the failure line tagged {tag}"
    )


@pytest.mark.parametrize("arm", ["serial", "parallel@2"])
def test_a_scheduling_change_and_the_aa_control_pass(run: tuple[pytest.RunResult, Path], arm: str) -> None:
    result, run_dir = run
    for c in (1, 8):
        assert _outcome(result, f"test_accuracy_gate[{arm}-vs-parallel-acc-c{c}]") == "PASSED"
        v = _verdict(run_dir, "accuracy_gate", f"{arm}-vs-parallel-acc-c{c}")
        assert v["outcome"] == "non-inferior" and v["control"] is (arm == "parallel@2"), v["message"]


def test_the_verdicts_reach_the_results_database_and_the_manifest(run: tuple[pytest.RunResult, Path]) -> None:
    _, run_dir = run
    with sqlite3.connect(run_dir.parent / "results.sqlite") as db:
        kinds = dict(db.execute("select kind, count(*) from verdicts where run_id = 'acc' group by kind").fetchall())
    assert kinds.get("accuracy") == 8 and kinds.get("accuracy_gate") == 6, f"expected 8 scores and 6 gates: {kinds}"
    settings = json.loads((run_dir / "manifest.json").read_text())["settings"]
    assert settings["accuracy_set"]["sha256"] and settings["accuracy_min"] == "delta>=-5pt", settings["accuracy_set"]


def test_too_few_questions_for_the_margin_fail_and_say_how_many_would_decide(
    control: tuple[Path, int], tmp_path: Path
) -> None:
    path, kept = control
    result, run_dir = _run(
        tmp_path, path, "parallel,serial", "delta>=-1pt", "--sskj-accuracy-concurrency", "1",
        "--sskj-accuracy-questions", str(kept),
    )  # fmt: skip
    assert _outcome(result, "test_accuracy_gate[serial-vs-parallel-acc-c1]") == "FAILED"
    v = _verdict(run_dir, "accuracy_gate", "serial-vs-parallel-acc-c1")
    assert v["outcome"] == "inconclusive" and v["questions_needed"] > kept, v["message"]
    assert f"about {v['questions_needed']} questions would decide" in v["message"], v["message"]
