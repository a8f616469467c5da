"""CI's GSM-style items: reasoning-gym 0.1.25's GSM-Symbolic generators (installed ``--no-deps`` as the README says),
one item per distinct template, the same file for the same seed, every record a valid GSM8K-format record whose own
rationale scores right and another item's scores wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pytest_sskj.accuracy import grade_all, load, score
from pytest_sskj.accuracy.generate import PIN, items, main


def test_the_same_seed_writes_the_same_file_of_distinct_templates(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path / "a.jsonl"), "--questions", "64", "--seed", "3"]) == 0
    assert main(["--out", str(tmp_path / "b.jsonl"), "--questions", "64", "--seed", "3"]) == 0
    a = (tmp_path / "a.jsonl").read_bytes()
    assert a == (tmp_path / "b.jsonl").read_bytes(), "a seed must give the same bytes on every run"
    sources = [json.loads(line)["source"] for line in a.decode().splitlines()]
    assert len(set(sources)) == 64 and all(s.startswith(f"reasoning-gym {PIN} gsm_symbolic ") for s in sources)
    assert main(["--out", str(tmp_path / "c.jsonl"), "--questions", "64", "--seed", "4"]) == 0
    assert (tmp_path / "c.jsonl").read_bytes() != a


def test_generated_items_load_and_only_their_own_rationale_scores(tmp_path: Path) -> None:
    records = items(85, 1)
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    qs = load("gsm-symbolic", path)
    assert qs.records == 85
    subset = qs.subset(64)
    own = {it.index: records[it.index]["answer"] for it in subset}
    for method in ("strict", "flexible"):
        s = score(grade_all(subset, own, method), method)
        assert s.correct == 64, f"each item's own rationale must be right ({method}): {s.line()}"
    shifted = {it.index: records[(it.index + 1) % 85]["answer"] for it in subset}
    wrong = score(grade_all(subset, shifted, "strict"), "strict")
    assert wrong.correct <= 3, f"another item's answer must (nearly always) be wrong: {wrong.line()}"


def test_loading_the_generators_leaves_no_reasoning_gym_module_behind() -> None:
    code = (
        "import sys; from pytest_sskj.accuracy.generate import generators; g = generators(); "
        "print(len(g), sorted(m for m in sys.modules if m.startswith('reasoning_gym')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["85", "[]"], f"85 tasks_ok generators and no reasoning_gym module left imported: {out}"


def test_too_many_questions_are_refused_naming_the_limit(tmp_path: Path, capsys: object) -> None:
    assert main(["--out", str(tmp_path / "x.jsonl"), "--questions", "86"]) == 2
    assert not (tmp_path / "x.jsonl").exists()
