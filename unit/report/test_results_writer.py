"""results.csv / results.json / verdicts.json: known rows in, exact files out; damaged runs read back."""

from __future__ import annotations

import csv
import json
import multiprocessing
from pathlib import Path
from typing import Any

from pytest_sskj.report.results import RESULT_FIELDS, ResultsWriter, read_results, read_verdicts


def _row(backend: str, chunk: int, c: int, repeat: int, tps: float, ttft: float, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": "r1",
        "test_id": f"test_serving[{backend}-chunk{chunk}-c{c}-r{repeat}]",
        "engine": "sglang",
        "backend": backend,
        "chunk": chunk,
        "concurrency": c,
        "repeat": repeat,
        "isl": 16384,
        "osl": 1,
        "requests": 40,
        "status": "passed",
        "reasons": [],
        "findings": [],
        "client_bound": False,
        "completed": 40,
        "failed": 0,
        "input_throughput": tps,
        "median_ttft_ms": ttft,
        "p95_ttft_ms": ttft * 1.01,
        "mean_tpot_ms": None,
    }
    row.update(kw)
    return row


def test_rows_are_written_to_csv_and_json_with_sglang_field_order(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_row(_row("marlin", 4096, 8, 0, 2694.53, 48860.0))
    w.add_row(
        _row(
            "flashinfer_mxfp4",
            4096,
            8,
            0,
            2957.23,
            44480.0,
            findings=[{"category": "oom", "severity": "fatal", "node": "601", "line": 12}],
        )
    )
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["backend"] for r in data["rows"]] == ["marlin", "flashinfer_mxfp4"]
    assert data["rows"][1]["input_throughput"] == 2957.23
    assert data["rows"][0]["mean_tpot_ms"] is None, "undefined metrics must stay None, not 0"
    with open(tmp_path / "results.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames
        rows = list(reader)
    assert header is not None and tuple(header[: len(RESULT_FIELDS)]) == RESULT_FIELDS
    assert header[:6] == ["run_id", "test_id", "engine", "backend", "chunk", "concurrency"]
    assert rows[0]["input_throughput"] == "2694.53" and rows[0]["median_ttft_ms"] == "48860.0"
    assert rows[0]["mean_tpot_ms"] == "", f"None must be an empty CSV cell, got {rows[0]['mean_tpot_ms']!r}"
    assert rows[0]["client_bound"] == "false"
    assert json.loads(rows[1]["findings"]) == [{"category": "oom", "severity": "fatal", "node": "601", "line": 12}]


def test_nan_and_infinity_become_none_so_files_stay_strict_json(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_row(_row("marlin", 4096, 8, 0, float("nan"), float("inf")))
    text = (tmp_path / "results.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    row = json.loads(text)["rows"][0]
    assert row["input_throughput"] is None and row["median_ttft_ms"] is None


def test_a_rerun_point_replaces_the_earlier_row(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_row(_row("marlin", 4096, 8, 0, 1.0, 1.0, status="failed", reasons=["[crash] rank 0 exited -9"]))
    w.add_row(_row("marlin", 4096, 8, 1, 2.0, 2.0))
    w.add_row(_row("marlin", 4096, 8, 0, 3.0, 3.0))
    rows = read_results(tmp_path).rows
    assert [(r["repeat"], r["input_throughput"], r["status"]) for r in rows] == [(0, 3.0, "passed"), (1, 2.0, "passed")]


def test_csv_and_json_round_trip_through_the_reader(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_row(_row("marlin", 8192, 16, 2, 2934.9, 87090.0, reasons=["a", "b"], extra_field="x"))
    (tmp_path / "results.jsonl").unlink()
    from_json = read_results(tmp_path)
    assert from_json.source == "results.json" and from_json.rows[0]["reasons"] == ["a", "b"]
    (tmp_path / "results.json").unlink()
    from_csv = read_results(tmp_path)
    assert from_csv.source == "results.csv"
    r = from_csv.rows[0]
    assert (r["chunk"], r["concurrency"], r["input_throughput"], r["reasons"], r["extra_field"]) == (
        8192,
        16,
        2934.9,
        ["a", "b"],
        "x",
    )
    assert r["mean_tpot_ms"] is None and r["client_bound"] is False


def test_truncated_journal_line_of_a_crashed_run_is_skipped_and_reported(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    for rep in range(3):
        w.add_row(_row("marlin", 4096, 8, rep, 100.0 + rep, 10.0))
    with open(tmp_path / "results.jsonl", "a") as fh:  # the process died half way through a line
        fh.write('{"backend": "marlin", "chunk": 4096, "concur')
    back = read_results(tmp_path)
    assert [r["repeat"] for r in back.rows] == [0, 1, 2]
    assert any("line 4 is not valid JSON" in p for p in back.problems), back.problems
    assert any("recovered 3 row(s) from results.jsonl" in p for p in back.problems), back.problems
    w.add_row(_row("marlin", 4096, 8, 3, 200.0, 10.0))  # a resumed run keeps appending
    assert [r["repeat"] for r in json.loads((tmp_path / "results.json").read_text())["rows"]] == [0, 1, 2, 3]


def test_corrupt_results_json_without_journal_falls_back_to_csv(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_row(_row("marlin", 4096, 8, 0, 1.5, 10.0))
    w.add_row(_row("marlin", 4096, 8, 1, 2.5, 10.0))
    (tmp_path / "results.jsonl").unlink()
    (tmp_path / "results.json").write_text('{"rows": [{"backend": "marl')
    back = read_results(tmp_path)
    assert back.source == "results.csv" and [r["input_throughput"] for r in back.rows] == [1.5, 2.5]
    assert any("results.json is corrupt or truncated" in p for p in back.problems), back.problems


def test_csv_with_a_short_last_line_keeps_the_complete_rows(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_row(_row("marlin", 4096, 8, 0, 1.5, 10.0))
    (tmp_path / "results.jsonl").unlink()
    (tmp_path / "results.json").unlink()
    with open(tmp_path / "results.csv", "a") as fh:
        fh.write("r1,test_serving[x],sglang,marlin\n")
    back = read_results(tmp_path)
    assert len(back.rows) == 1 and back.rows[0]["input_throughput"] == 1.5
    assert any("line 3 has 4 of" in p for p in back.problems), back.problems


def test_missing_files_give_no_rows_and_say_so(tmp_path: Path) -> None:
    back = read_results(tmp_path)
    assert back.rows == [] and back.source is None
    assert back.problems == [f"no results.jsonl, results.json or results.csv in {tmp_path}"]
    assert read_verdicts(tmp_path).rows == []


def test_verdicts_json_lists_every_verdict_in_order(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path)
    w.add_verdict(
        {
            "kind": "comparison",
            "candidate": "flashinfer_mxfp4",
            "baseline": "marlin",
            "passed": True,
            "message": "+9.75 % input TPS",
        }
    )
    w.add_verdict({"kind": "search", "backend": "marlin", "best": 32, "passed": True, "message": "C=32"})
    data = json.loads((tmp_path / "verdicts.json").read_text())
    assert [v["kind"] for v in data["verdicts"]] == ["comparison", "search"]
    assert data["verdicts"][0]["message"] == "+9.75 % input TPS"


def _worker(args: tuple[str, int]) -> None:
    run_dir, k = args
    w = ResultsWriter(Path(run_dir))
    for rep in range(5):
        w.add_row(_row(f"b{k}", 4096, 8, rep, float(rep), 1.0))


def test_rows_from_several_processes_all_land(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        pool.map(_worker, [(str(tmp_path), 0), (str(tmp_path), 1)])
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert sorted((r["backend"], r["repeat"]) for r in rows) == [(f"b{k}", rep) for k in (0, 1) for rep in range(5)]
    assert len(list(csv.DictReader(open(tmp_path / "results.csv")))) == 10
