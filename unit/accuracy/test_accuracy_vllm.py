"""The accuracy client against the real vLLM CPU server (OpenAI ``/v1/completions``, text): the known-answer control
made from vLLM's own greedy answers, asked again one at a time and eight at a time, scores what it made and passes
the A/A gate -- the pipeline a user's GSM8K file goes through on vLLM, on a CPU box."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_shared import RealVllm

from pytest_sskj.accuracy import grade_all, judge, load, score
from pytest_sskj.accuracy.client import ask
from pytest_sskj.accuracy.control import known_answer_file
from pytest_sskj.accuracy.gate import Margin
from pytest_sskj.accuracy.generate import items, write

pytestmark = pytest.mark.slow  # the real vLLM server


def test_vllms_own_answers_score_back_and_pass_an_aa_gate_at_c1_and_c8(real_vllm: RealVllm, tmp_path: Path) -> None:
    write(items(64, 1), tmp_path / "questions.jsonl")
    questions = load("gsm8k", tmp_path / "questions.jsonl").subset(64)
    kept = known_answer_file(real_vllm.url, "openai-token-ids", questions, tmp_path / "control.jsonl", concurrency=8)
    assert kept >= 12, f"expected vLLM's tiny model to give a number for at least 12 of 64 questions, kept {kept}"
    known = load("gsm8k", tmp_path / "control.jsonl").subset(kept)
    graded = {}
    for c in (1, 8):
        answers = ask(real_vllm.url, "openai-token-ids", known, concurrency=c, max_tokens=48)
        assert not answers.errors, f"every question answered at C={c}: {answers.errors}"
        graded[c] = grade_all(known, answers.completions, "flexible")
        s = score(graded[c], "flexible")
        print(f"vLLM known-answer control: {kept} of 64 kept; asked again at C={c}: {s.line()}")
        assert s.correct >= kept - 2, f"vLLM asked again at C={c} must score (almost) every known answer: {s.line()}"
    v = judge(graded[1], graded[8], Margin(10.0))
    assert v.outcome == "non-inferior", f"C=8 vs C=1 on the same server: {v.message}"
