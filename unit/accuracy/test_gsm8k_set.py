"""A GSM8K-format file is read, pinned and subset the same way every run; every problem in it is refused with the
line, what was wrong, what is accepted and a hint (no traceback)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pytest_sskj.accuracy import SUBSET_SEED, AccuracySetError, Graded, grade_all, load, score, wilson


def _records(n: int) -> list[dict[str, str]]:
    return [{"question": f"Q{i}: {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i:,}"} for i in range(n)]


def _write(path: Path, records: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_a_file_is_pinned_by_sha256_and_record_count(tmp_path: Path) -> None:
    path = _write(tmp_path / "test.jsonl", _records(200))
    qs = load("gsm8k", path)
    assert qs.records == 200 and qs.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert qs.items[150].reference == "300", "the reference is the '#### 300' of the record, commas removed"
    manifest = qs.manifest(qs.subset(64))
    assert manifest["records"] == 200 and manifest["questions"] == 64 and manifest["subset_seed"] == SUBSET_SEED


def test_the_subset_is_the_same_indices_every_time_in_file_order(tmp_path: Path) -> None:
    qs = load("gsm8k", _write(tmp_path / "test.jsonl", _records(1319)))
    first = [it.index for it in qs.subset(64)]
    again = [it.index for it in load("gsm8k", qs.path).subset(64)]
    assert first == again, "the same file gives the same 64 questions on every run"
    assert first == sorted(first) and len(set(first)) == 64
    assert first != list(range(64)), "a seeded draw, not the file's head"
    assert [it.index for it in qs.subset(64, seed=SUBSET_SEED + 1)] != first


@pytest.mark.parametrize("n", [0, -1, 201])
def test_a_subset_larger_than_the_file_or_empty_is_refused(tmp_path: Path, n: int) -> None:
    qs = load("gsm8k", _write(tmp_path / "test.jsonl", _records(200)))
    with pytest.raises(AccuracySetError, match=r"accepted: 1 to 200; hint:"):
        qs.subset(n)


BAD = {
    "not-json": ('{"question": "q", "answer": "#### 1"\n', r"line 1: not JSON"),
    "array": ('["q", "#### 1"]\n', r"line 1: a JSON list, not an object"),
    "no-answer": ('{"question": "q"}\n', r"line 1: no answer \(it has question\)"),
    "number-answer": ('{"question": "q", "answer": 18}\n', r"line 1: answer is int 18, not text"),
    "no-hashes": ('{"question": "q", "answer": "so 18"}\n', r"line 1: the answer has no '#### <number>' line"),
    "empty": ("\n\n", r"no records"),
    "second-line": ('{"question": "q", "answer": "#### 1"}\n{"question": ""}\n', r"line 2: no answer"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_every_bad_file_is_refused_with_what_is_accepted_and_a_hint(tmp_path: Path, case: str) -> None:
    text, what = BAD[case]
    path = tmp_path / f"{case}.jsonl"
    path.write_text(text)
    with pytest.raises(AccuracySetError, match=what) as err:
        load("gsm8k", path)
    assert "accepted: JSONL" in str(err.value) and "; hint: " in str(err.value), str(err.value)


def test_a_missing_or_undecodable_file_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(AccuracySetError, match=r"no such file.*python -m pytest_sskj.accuracy.generate"):
        load("gsm8k", tmp_path / "absent.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes('{"question": "caf\xe9", "answer": "#### 1"}\n'.encode("latin-1"))
    with pytest.raises(AccuracySetError, match=r"not UTF-8 \(byte 17\)"):
        load("gsm8k", tmp_path / "latin1.jsonl")


def test_scores_count_right_wrong_invalid_and_missing_answers(tmp_path: Path) -> None:
    qs = load("gsm8k", _write(tmp_path / "test.jsonl", _records(10)))
    items = qs.subset(10)
    completions = {it.index: f"{it.index} + {it.index} = {2 * it.index}.\n#### {2 * it.index}" for it in items}
    completions[3] = "I think 7"  # wrong (flexible finds 7)
    completions[4] = "no idea"  # invalid
    del completions[5]  # missing (the request failed)
    graded = grade_all(items, completions, "flexible")
    assert [g.correct for g in graded] == [i not in (3, 4, 5) for i in range(10)]
    s = score(graded, "flexible")
    assert (s.questions, s.correct, s.invalid, s.missing) == (10, 7, 1, 1), s
    assert s.accuracy == 0.7 and s.ci95 is not None and s.ci95[0] < 0.7 < s.ci95[1]
    assert s.line() == "exact match (flexible) 7/10 = 70.0 % (95 % CI 39.7 .. 89.2 %), 1 invalid, 1 missing"
    strict = score(grade_all(items, completions, "strict"), "strict")
    assert strict.correct == 7 and strict.invalid == 2, "strict finds no '####' in 'I think 7'"
    assert isinstance(graded[0], Graded) and graded[5].missing


def test_the_wilson_interval_is_the_standard_one() -> None:
    lo, hi = wilson(32, 32) or (0.0, 0.0)
    assert round(lo, 4) == 0.8928 and hi == 1.0
    lo, hi = wilson(0, 64) or (0.0, 0.0)
    assert lo == 0.0 and round(hi, 4) == 0.0566  # z^2 / (n + z^2)
    assert wilson(0, 0) is None
