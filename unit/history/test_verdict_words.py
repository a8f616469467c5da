"""Every verdict says what it measured (issue 46, item 1): ``better``, ``worse``, ``equivalent``, ``inconclusive`` and
``regression`` are five distinct words wherever a verdict is shown -- the failed assertion's tag, the terminal
summary, summary.md, the Allure categories, the results database and the export.  Before, every failed comparison
was tagged ``[regression]`` (a loss, an equivalent and an A/A control alike), and the baseline gate's words reached
neither the terminal nor summary.md.  ``regression`` is only the baseline gate's: this run against a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.acceptance.summary import verdict_lines
from pytest_sskj.history.db import ResultsDB
from pytest_sskj.history.export import export_run, verdict_word
from pytest_sskj.history.importer import import_run
from pytest_sskj.report import categories as cat
from pytest_sskj.report.plugin import regenerate
from pytest_sskj.report.results import ResultsWriter
from unit.history.conftest import make_run

WORDS = {
    # (kind, outcome, passed) -> the word shown, the failed test's tag (None: it passes) and its Allure category
    "better": ("comparison", "better", True, None, None),
    "worse": ("comparison", "worse", False, cat.WORSE, "Comparison: worse"),
    "equivalent": ("comparison", "equivalent", False, cat.EQUIVALENT, "Comparison: equivalent, not better"),
    "inconclusive": ("comparison", "inconclusive", False, cat.INCONCLUSIVE, "Inconclusive comparison"),
    "regression": ("baseline", "regression", False, cat.REGRESSION, "Performance regression (baseline gate)"),
}


def _verdict(word: str) -> dict[str, Any]:
    kind, outcome, passed, _, _ = WORDS[word]
    v: dict[str, Any] = {"kind": kind, "id": f"{word}-chunk256-c8", "passed": passed, "outcome": outcome,
                         "chunk": 256, "concurrency": 8, "message": f"the {word} case"}  # fmt: skip
    if kind == "comparison":
        v.update(baseline="parallel", candidate="serial")
    else:
        v.update(backend="parallel", baseline_ref="v1", baseline_run="runA")
    return v


@pytest.mark.parametrize("word", [w for w in WORDS if WORDS[w][3] is not None])
def test_a_failed_verdict_is_tagged_with_its_own_word_and_allure_files_it_under_its_own_category(word: str) -> None:
    kind, outcome, _, tag, category = WORDS[word]
    shown = cat.REGRESSION if kind == "baseline" else cat.verdict_tag(outcome)
    assert shown == tag == f"[{word}]", f"expected the {word} verdict tagged [{word}], got {shown}"
    assert cat.categorize(f"AssertionError: {shown} serial vs parallel: -9 % Input TPS") == category


def test_the_five_words_and_tags_are_distinct() -> None:
    tags = {cat.verdict_tag(o) for o in ("worse", "equivalent", "inconclusive")} | {cat.REGRESSION}
    assert len(tags) == 4 and cat.REGRESSION not in {cat.verdict_tag(o) for o in ("worse", "equivalent")}
    assert len({verdict_word(_verdict(w)) for w in WORDS}) == 5


def test_each_word_reaches_the_terminal_summary_md_the_database_and_the_export(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "reports", "words", [100.0, 110.0])
    writer = ResultsWriter(run_dir)
    for word in WORDS:
        writer.add_verdict(_verdict(word))
    lines = verdict_lines([_verdict(w) for w in WORDS])
    for word, line in zip(WORDS, lines, strict=True):
        assert f"[{word}]" in line, f"expected the terminal line of the {word} verdict to say [{word}]: {line}"
    regenerate(run_dir, plots=False)
    summary = (run_dir / "summary.md").read_text()
    for word in WORDS:
        assert f"({word})" in summary, f"expected summary.md to show ({word}):\n{summary[-2500:]}"
    exported = {json.loads(x)["id"]: json.loads(x) for x in (export_run(run_dir)[3]).read_text().splitlines()}
    assert {exported[f"{w}-chunk256-c8"]["verdict"] for w in WORDS} == set(WORDS), exported
    db = ResultsDB(f"sqlite:///{tmp_path / 'db.sqlite'}")
    import_run(db, run_dir)
    from sqlalchemy import select

    from pytest_sskj.history.tables import verdicts as table

    with db.engine.connect() as conn:
        stored = {r.verdict_id: r.record for r in conn.execute(select(table.c.verdict_id, table.c.record))}
    assert {stored[f"{w}-chunk256-c8"]["outcome"] for w in WORDS} == set(WORDS), stored
