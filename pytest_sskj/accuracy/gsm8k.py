"""A GSM8K-format question set read from the user's file: one JSON object per line with ``question`` and ``answer``,
the answer a worked rationale whose last line is ``#### <number>`` (openai/grade-school-math; docs/accuracy.md).

The questions are never shipped with the project: the user names their own copy (their machines keep data sets at
machine-specific paths), and the run pins it by sha256 and record count.  CI reads a file of GSM-style items it
generates itself (:mod:`pytest_sskj.accuracy.generate`).  Every problem in a file is refused with the line, what
was wrong, what is accepted and a hint -- before anything is launched.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sskj.accuracy.extract import reference_answer

SUBSET_SEED = 20261207
"""The seed of the fixed subset: the same record indices on every run, backend and engine (docs/accuracy.md)."""
DEFAULT_QUESTIONS = 64
"""The users' job: "a fixed set of 64 GSM8K questions at C1/C8"."""
FORMAT = 'JSONL, one object per line: {"question": "...", "answer": "... #### 42"} (the GSM8K test split\'s format)'
MAX_BYTES = 64 * 1024 * 1024
"""Larger files are refused (GSM8K's test split is ~0.7 MB): a wrong path to a multi-GB file is told at once."""


class AccuracySetError(ValueError):
    """A question set that cannot be used; the message says what, what is accepted and a hint."""


@dataclass(frozen=True)
class Item:
    """One question: its 0-based record number in the file, the text sent, and the reference answer (the number
    after ``####``, normalised as the extractors normalise a completion)."""

    index: int
    question: str
    reference: str


@dataclass(frozen=True)
class QuestionSet:
    """A whole file, pinned: name (``gsm8k``), path, sha256 of its bytes, record count and every item."""

    name: str
    path: Path
    sha256: str
    items: tuple[Item, ...]

    @property
    def records(self) -> int:
        return len(self.items)

    def subset(self, n: int = DEFAULT_QUESTIONS, seed: int = SUBSET_SEED) -> tuple[Item, ...]:
        """``n`` items chosen without replacement by ``seed``, in file order: the same indices on every run."""
        if n <= 0 or n > self.records:
            raise AccuracySetError(
                f"{self.name}: {n} question(s) asked of a set of {self.records} record(s) ({self.path}); "
                f"accepted: 1 to {self.records}; hint: ask for fewer, or name a larger file"
            )
        picked = sorted(random.Random(seed).sample(range(self.records), n))
        return tuple(self.items[i] for i in picked)

    def manifest(self, subset: tuple[Item, ...]) -> dict[str, Any]:
        """What the run keeps about the set: enough to tell whether two runs asked the same questions."""
        return {
            "name": self.name,
            "path": str(self.path),
            "sha256": self.sha256,
            "records": self.records,
            "questions": len(subset),
            "subset_seed": SUBSET_SEED,
            "indices": [it.index for it in subset],
        }


def _bad(path: Path, where: str, what: str, hint: str) -> AccuracySetError:
    return AccuracySetError(f"{path}{where}: {what}; accepted: {FORMAT}; hint: {hint}")


def _item(path: Path, lineno: int, line: str, index: int) -> Item:
    where = f" line {lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise _bad(path, where, f"not JSON ({e.msg} at column {e.colno})", "one JSON object per line") from None
    if not isinstance(obj, dict):
        raise _bad(path, where, f"a JSON {type(obj).__name__}, not an object", "one JSON object per line")
    missing = [k for k in ("question", "answer") if k not in obj]
    if missing:
        have = ", ".join(sorted(obj)) or "no keys"
        raise _bad(path, where, f"no {' and no '.join(missing)} (it has {have})", "GSM8K's keys are question, answer")
    for key in ("question", "answer"):
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise _bad(path, where, f"{key} is {type(obj[key]).__name__} {obj[key]!r:.40}, not text", "strings")
    ref = reference_answer(obj["answer"])
    if ref is None:
        tail = obj["answer"].strip().splitlines()[-1][:60]
        raise _bad(path, where, f"the answer has no '#### <number>' line (its last line: {tail!r})", "end with #### N")
    return Item(index, obj["question"], ref)


def load(name: str, path: Path) -> QuestionSet:
    """Read and check a whole GSM8K-format file; :class:`AccuracySetError` names the first problem."""
    if not path.is_file():
        raise AccuracySetError(
            f"{name}={path}: no such file; accepted: a readable file in {FORMAT}; "
            "hint: give the path of your copy of the GSM8K test split (e.g. gsm8k/test.jsonl), or generate CI's "
            "stand-in with `python -m pytest_sskj.accuracy.generate --out FILE`"
        )
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise _bad(path, "", f"{size} bytes, more than the {MAX_BYTES} accepted", "is this the right file?")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, "", f"not UTF-8 (byte {e.start})", "save the file as UTF-8") from None
    items: list[Item] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            items.append(_item(path, lineno, line, len(items)))
    if not items:
        raise _bad(path, "", "no records", "the file is empty: is it the right one?")
    return QuestionSet(name, path, hashlib.sha256(data).hexdigest(), tuple(items))
