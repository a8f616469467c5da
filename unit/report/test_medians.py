"""The medians table is one set of numbers in three renderings: ``summary.md``, the terminal summary, and
``medians.csv`` / ``medians.json``; every row and every median says whether it met the SLO gates."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from pytest_sskj.acceptance.summary import table_lines
from pytest_sskj.report.plugin import regenerate
from pytest_sskj.report.results import read_results
from unit.history.conftest import make_run


def test_medians_files_terminal_and_summary_show_the_same_points(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r", [100.0, 120.0, 110.0], ttft_ms=[50.0, 70.0, 60.0])
    make_run(tmp_path, "r2", [200.0, 220.0, 210.0], ttft_ms=[40.0, 44.0, 42.0], backend="serial")
    for line in (tmp_path / "r2" / "results.jsonl").read_text().splitlines():  # two backends in one run
        with (run / "results.jsonl").open("a") as fh:
            fh.write(line.replace('"run_id": "r2"', '"run_id": "r"') + "\n")
    regenerate(run, plots=False, baseline="parallel")
    data = json.loads((run / "medians.json").read_text())
    assert data["baseline"] == "parallel"
    by_backend = {p["backend"]: p for p in data["points"]}
    assert by_backend["parallel"]["input_throughput"] == 110.0 and by_backend["parallel"]["is_baseline"] is True
    assert by_backend["serial"]["tps_vs_baseline_pct"] == (210.0 / 110.0 - 1) * 100
    assert by_backend["serial"]["slo_met"] is True and by_backend["parallel"]["median_ttft_ms"] == 60.0
    with (run / "medians.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["backend"] for r in rows] == ["parallel", "serial"] and rows[1]["input_throughput"] == "210.0"
    md = (run / "summary.md").read_text()
    term = "\n".join(table_lines(read_results(run).rows, "parallel"))
    for cells in (("256", "8", "parallel", "110.00", "60.0 ms"), ("256", "8", "serial", "210.00", "42.0 ms")):
        md_line = "| " + " | ".join(cells)
        assert md_line in md, f"expected {md_line!r} in summary.md:\n{md}"
        assert any(all(c in line for c in cells) for line in term.splitlines()), f"expected {cells} in:\n{term}"
    assert "+90.91% TPS / −30.00% TTFT" in md and "+90.91% TPS / −30.00% TTFT" in term
    row = json.loads((run / "results.json").read_text())["rows"][0]
    assert row["slo_met"] == {"p95_ttft_ms<30000": True}, "every row says whether it met each SLO gate"
    assert row["schema_version"] == "sskj-row/2"
