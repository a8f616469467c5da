"""The known-answer control on the real embedded llama.cpp engine: the tiny model's own greedy answers become the
references, so the same model scores 100 % and passes an A/A gate, while its quantized copies answer differently
and fail the gate -- extraction, scoring and the gate proven able to fail on a CPU box."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_sskj.accuracy import Graded, Item, grade_all, judge, load, score
from pytest_sskj.accuracy.client import ask
from pytest_sskj.accuracy.control import known_answer_file
from pytest_sskj.accuracy.gate import Margin
from pytest_sskj.accuracy.generate import items, write
from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server


@dataclass(frozen=True)
class _Control:
    kept: int
    graded: dict[str, list[Graded]]


def _grade(url: str, known: tuple[Item, ...]) -> list[Graded]:
    return grade_all(known, ask(url, "llamacpp", known, concurrency=4, max_tokens=48).completions, "flexible")


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> _Control:
    """CI's GSM-style items (reasoning-gym, seed 1) made a known-answer set by the f32 tiny model, then answered
    by the same model and by its q8_0 and mxfp4 copies."""
    tmp = tmp_path_factory.mktemp("control")
    write(items(64, 1), tmp / "questions.jsonl")
    questions = load("questions", tmp / "questions.jsonl").subset(64)
    models = tmp / "models"
    graded: dict[str, list[Graded]] = {}
    with embedded_server(ensure_tiny_model(models), slots=4, log_path=tmp / "f32.log") as url:
        kept = known_answer_file(url, "llamacpp", questions, tmp / "control.jsonl")
        known = load("control", tmp / "control.jsonl").subset(kept)
        graded["f32"] = grade_all(
            known, ask(url, "llamacpp", known, concurrency=4, max_tokens=48).completions, "flexible"
        )
    for fmt in ("q8_0", "mxfp4"):
        with embedded_server(ensure_tiny_model(models, model_format=fmt), slots=4, log_path=tmp / f"{fmt}.log") as url:
            graded[fmt] = grade_all(
                known, ask(url, "llamacpp", known, concurrency=4, max_tokens=48).completions, "flexible"
            )
    return _Control(kept, graded)


def test_the_same_model_scores_every_known_answer_and_passes_an_aa_gate(control: _Control) -> None:
    assert control.kept >= 40, f"expected most of 64 questions to get a numeric answer, kept {control.kept}"
    s = score(control.graded["f32"], "flexible")
    assert s.correct == s.questions == control.kept, f"the reference model asked again must score 100 %: {s.line()}"
    v = judge(control.graded["f32"], control.graded["f32"], Margin(5.0))
    assert v.outcome == "non-inferior", v.message


@pytest.mark.parametrize("fmt", ["q8_0", "mxfp4"])
def test_a_quantized_copy_answers_differently_and_fails_the_gate(control: _Control, fmt: str) -> None:
    s = score(control.graded[fmt], "flexible")
    print(f"{fmt}: {s.line()}")
    assert s.correct < s.questions, f"{fmt} weights must change some answers: {s.line()}"
    v = judge(control.graded["f32"], control.graded[fmt], Margin(1.0))
    print(v.message)
    assert v.outcome == "worse", f"{fmt} changes answers the reference gave: expected worse, {v.message}"
