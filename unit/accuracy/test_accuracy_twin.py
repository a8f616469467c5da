"""The stand-in's accuracy (docs/twin.md, "Accuracy"): a model file's ``[accuracy]`` (backend -> fraction answered
right) made into greedy answers by real stand-in ranks, asked through SGLang's ``/generate`` text API like any
server.  A file where the candidate answers worse makes the gate fail; one where both backends are equal passes; a
file that states no accuracy answers every question right; the answers are the same at C1 and C8.  Also the model
file's ``[accuracy]`` schema and the answer key's own rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_sskj.accuracy import Graded, grade_all, judge, load, score
from pytest_sskj.accuracy.client import PROMPT, ask
from pytest_sskj.accuracy.gate import Margin
from pytest_sskj.accuracy.generate import items, write
from pytest_sskj.twin.answers import AnswerKey
from pytest_sskj.twin.fidelity import rank_server
from pytest_sskj.twin.model import ModelError, load_model
from pytest_sskj.twin.plugin import DATA

BASE = DATA / "kimi3-pro6000.toml"


def _model(tmp: Path, accuracy: dict[str, float] | None) -> Path:
    path = tmp / f"model-{len(list(tmp.glob('model-*')))}.toml"
    table = "" if accuracy is None else "\n[accuracy]\n" + "".join(f"{k} = {v}\n" for k, v in accuracy.items())
    path.write_text(BASE.read_text() + table)
    return path


def _answers(tmp: Path, model: Path, backend: str, questions: Path, c: int) -> list[Graded]:
    cell = next(x for x in load_model(model).cells if x.backend == backend)
    qs = load("gsm8k", questions).subset(64)
    env = {"SSKJ_TWIN_ANSWERS": str(questions)}
    with rank_server(model, cell, tmp / f"{model.stem}-{backend}-c{c}.log", env=env) as url:
        answers = ask(url, "sglang-generate", qs, concurrency=c, max_tokens=64)
    assert not answers.errors, f"every question answered by the stand-in, saw {answers.errors}"
    return grade_all(qs, answers.completions, "flexible")


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("twinq") / "questions.jsonl"
    write(items(64, 1), path)
    return path


@pytest.mark.slow
def test_a_worse_accuracy_file_fails_the_gate_and_an_equal_one_passes(questions: Path, tmp_path: Path) -> None:
    worse = _model(tmp_path, {"marlin": 0.95, "flashinfer_mxfp4": 0.55})
    base = _answers(tmp_path, worse, "marlin", questions, 8)
    cand = _answers(tmp_path, worse, "flashinfer_mxfp4", questions, 8)
    sb, sc = score(base, "flexible"), score(cand, "flexible")
    assert sb.ci95 is not None and sb.ci95[0] <= 0.95 <= sb.ci95[1], f"marlin's stated 95 % within {sb.line()}"
    assert sc.ci95 is not None and sc.ci95[0] <= 0.55 <= sc.ci95[1], f"the candidate's stated 55 % within {sc.line()}"
    v = judge(base, cand, Margin(5.0))
    assert v.outcome == "worse" and v.pairs.candidate_only == 0, v.message
    equal = _model(tmp_path, {"marlin": 0.9, "flashinfer_mxfp4": 0.9})
    e_base = _answers(tmp_path, equal, "marlin", questions, 8)
    e_cand = _answers(tmp_path, equal, "flashinfer_mxfp4", questions, 1)
    v = judge(e_base, e_cand, Margin(5.0))
    assert v.outcome == "non-inferior" and v.pairs.baseline_only == v.pairs.candidate_only == 0, v.message


@pytest.mark.slow
def test_a_file_without_accuracy_answers_every_question_right(questions: Path, tmp_path: Path) -> None:
    s = score(_answers(tmp_path, _model(tmp_path, None), "marlin", questions, 8), "flexible")
    assert s.correct == s.questions == 64, s.line()


def test_the_answer_key_is_deterministic_nested_and_only_for_its_questions(questions: Path) -> None:
    key = AnswerKey.load(questions, {"a": 0.9, "b": 0.5}, seed=7)
    qs = load("gsm8k", questions).items
    prompts = [PROMPT.format(question=it.question) for it in qs]
    right = {b: {i for i, p in enumerate(prompts) if key.answer(p, b) == key.answer(p, "unnamed")} for b in "ab"}
    assert right["b"] <= right["a"], "a less accurate backend is right only where a more accurate one is"
    assert key.answer(prompts[0], "a") == AnswerKey.load(questions, {"a": 0.9}, seed=7).answer(prompts[0], "a")
    assert key.answer("Question: what is 2+2?\nAnswer:", "a") is None and key.answer("no question", "a") is None
    answers = {it.index: str(key.answer(p, "b")) for it, p in zip(qs, prompts, strict=True)}
    strict, flexible = grade_all(qs, answers, "strict"), grade_all(qs, answers, "flexible")
    assert [g.correct for g in strict] == [g.correct for g in flexible], "both extractions grade the stand-in alike"
    assert {i for i, g in enumerate(strict) if g.correct} == right["b"]


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('accuracy = "high"', "accuracy must be a table"),
        ("[accuracy]\nmarlin = 1.5", "fraction in [0, 1]"),
        ("[accuracy]\nmarlin = true", "fraction in [0, 1]"),
        ("[accuracy]\nmarlin = -0.1", "fraction in [0, 1]"),
    ],
)
def test_a_bad_accuracy_table_is_refused(tmp_path: Path, table: str, says: str) -> None:
    path = tmp_path / "m.toml"
    text = BASE.read_text()
    path.write_text(table + "\n" + text if table.startswith("accuracy =") else text + "\n" + table + "\n")
    with pytest.raises(ModelError, match=re.escape(says)):
        load_model(path)


@pytest.mark.slow
def test_the_stand_in_cluster_fails_a_worse_answering_backend_in_the_acceptance_run(
    questions: Path, tmp_path: Path
) -> None:
    """``pytest acceptance/`` on the twin platform (one local stand-in node, TP8/EP4): the run hands the question file
    to its ranks through the platform hook, each backend answers at C1 and C8, and the model file's
    ``flashinfer_mxfp4 = 0.60`` against ``marlin = 0.95`` fails the gate at ``delta>=-5pt`` while both score."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    for layer in ("platforms/twin.toml", "models/kimi-k3.toml"):
        (tmp_path / layer).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / layer).write_text((repo / "profiles" / layer).read_text())
    cells = re.sub(r"^(tp|ep|dp|pp) = .*\n", "", BASE.read_text(), flags=re.M)  # cells for any layout
    model = tmp_path / "model.toml"
    model.write_text(cells + "\n[accuracy]\nmarlin = 0.95\nflashinfer_mxfp4 = 0.60\n")
    profile = tmp_path / "job.toml"
    profile.write_text(
        'engine = "sglang"\ntp = 8\nep = 4\nbackends = ["marlin", "flashinfer_mxfp4"]\nchunks = ["8K"]\n'
        'concurrencies = [8]\nisl = "16K"\nosl = 1\nrequests = 8\nrepeats = 2\nslo = "none"\n'
        f'twin_model = "{model}"\n[layers]\nplatform = "twin"\nmodel = "kimi-k3"\n'
    )
    cmd = [sys.executable, "-m", "pytest", str(repo / "acceptance"), "--profile", str(profile),
           "-p", "no:cacheprovider", "--sskj-accuracy-set", f"gsm8k={questions}", "--sskj-accuracy-min",
           "delta>=-5pt", "--reports-dir", str(tmp_path / "r"), "--run-id", "twin", "--sskj-compare-expect", "report",
           "-q"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    verdicts = tmp_path / "r" / "twin" / "verdicts"
    assert verdicts.is_dir(), proc.stdout[-3000:] + proc.stderr[-2000:]
    for c in (1, 8):
        base = json.loads((verdicts / f"accuracy-marlin-acc-c{c}.json").read_text())
        gate = json.loads((verdicts / f"accuracy_gate-flashinfer_mxfp4-vs-marlin-acc-c{c}.json").read_text())
        assert base["passed"] is True and base["score"]["correct"] >= 55, base["message"]
        assert gate["outcome"] == "worse" and gate["passed"] is False, gate["message"]
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, "the worse-answering candidate fails the run"
