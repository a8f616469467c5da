"""How the stand-in answers the accuracy questions: a model file's ``[accuracy]`` (backend -> fraction answered right)
made into greedy answers to the user's question file (docs/twin.md, "Accuracy").

The twin has no model weights, so it is given the answer key: the question file the run asks from
(``SSKJ_TWIN_ANSWERS``, the run's ``--sskj-accuracy-set`` path; :mod:`pytest_sskj.twin.plugin`).  Each question
draws one uniform number from the model's seed and the question's text, the same for every backend and every
concurrency: a backend whose accuracy is above it answers right (``... The answer is <reference>.`` and
``#### <reference>``: both extractions find it), the others give a wrong number.  So the answers are deterministic
(greedy), and a less accurate backend is right only on questions a more accurate one gets right -- the paired
outcome of a change that loses answers.  A question that is not in the key gets no number; a backend the file does
not name answers every question right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_sskj.accuracy.client import PROMPT

__all__ = ["AnswerKey"]

_HEAD, _, _TAIL = PROMPT.partition("{question}")


def _uniform(seed: int, text: str, salt: str = "") -> float:
    digest = hashlib.sha256(f"{seed}\0{salt}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class AnswerKey:
    """The references of a question file by question text, and the model's accuracy per backend."""

    references: Mapping[str, str]
    accuracy: Mapping[str, float]
    seed: int

    @classmethod
    def load(cls, path: Path, accuracy: Mapping[str, float], seed: int) -> AnswerKey:
        """Read the question file (GSM8K format, as the run checked it)."""
        from pytest_sskj.accuracy.gsm8k import load

        qs = load("answers", path)
        return cls({it.question: it.reference for it in qs.items}, dict(accuracy), seed)

    def question_of(self, prompt: str) -> str | None:
        """The question a prompt asks (the accuracy client's prompt format), or ``None``."""
        if not prompt.startswith(_HEAD) or not prompt.endswith(_TAIL):
            return None
        return prompt[len(_HEAD) : len(prompt) - len(_TAIL)]

    def answer(self, prompt: str, backend: str) -> str | None:
        """The greedy answer of ``backend`` to ``prompt`` (``None``: not a question of the key)."""
        question = self.question_of(prompt)
        ref = self.references.get(question) if question is not None else None
        if ref is None:
            return None
        right = _uniform(self.seed, question or "") < self.accuracy.get(backend, 1.0)
        said = ref if right else _wrong(ref, _uniform(self.seed, question or "", "wrong"))
        return f" Working through the numbers step by step gives {said}. The answer is {said}.\n#### {said}"


def _wrong(ref: str, u: float) -> str:
    """A number that is not ``ref`` (an off-by-a-little slip), deterministic in ``u``."""
    try:
        value = float(ref)
    except ValueError:
        return "0" if ref != "0" else "1"
    step = 1 + int(u * 9)
    out = value + step if value.is_integer() else round(value + step / 10, 2)
    return str(int(out)) if float(out).is_integer() else str(out)
