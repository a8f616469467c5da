"""The plots of a run drawn by a child process (``draw_plots``): the same files as ``render_all`` draws in the
session's process, which never imports matplotlib for them; a child that fails, plans other plots or does not
answer in time leaves its plots to the session, which draws them itself."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.report import plot_drawing, plots
from pytest_sskj.report.results import ResultsWriter, read_results, read_verdicts

VERDICTS: list[dict[str, Any]] = [
    {
        "kind": "search",
        "id": "s0",
        "backend": "marlin",
        "chunk": 4096,
        "metric": "p95_ttft_ms",
        "threshold": 3000,
        "best_concurrency": 16,
        "steps": [{"concurrency": c, "value": 100.0 * c, "passed": True} for c in (8, 16)],
    },
    {
        "kind": "chunk_curve",
        "id": "c0",
        "backend": "marlin",
        "concurrency": 8,
        "best_chunk": 8192,
        "points": [{"chunk": 4096, "input_tps": 100.0}, {"chunk": 8192, "input_tps": 120.0}],
    },
]


def _run(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A run directory as a session leaves it: rows and verdicts in their files, per-request files named by the
    rows; returns what the reporter reads back."""
    writer = ResultsWriter(run_dir)
    for backend in ("marlin", "fi"):
        for chunk in (4096, 8192):
            for c in (8, 16):
                point = f"{backend}-chunk{chunk}-c{c}-r0"
                req = run_dir / "points" / point / "requests.jsonl"
                req.parent.mkdir(parents=True)
                lines = [{"index": i, "t_send": 1.0, "t_first": 1.0 + 0.01 * (i + c)} for i in range(8)]
                req.write_text("".join(json.dumps(x) + "\n" for x in lines))
                row = {"run_id": "r1", "backend": backend, "chunk": chunk, "concurrency": c, "repeat": 0}
                row.update(point_id=point, status="passed", request_file=f"points/{point}/requests.jsonl")
                row.update(input_throughput=1000.0 + chunk / 8, median_ttft_ms=10.0 * c, p95_ttft_ms=12.0 * c)
                writer.add_row(row)
    for v in VERDICTS:
        writer.add_verdict(v)
    return read_results(run_dir).rows, read_verdicts(run_dir).rows


def _alive_in_group(pgid: int, wait_s: float = 5.0) -> list[int]:
    """Processes of group ``pgid`` that are not zombies, after waiting up to ``wait_s`` for them to go."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(stat.parent.name))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _pngs(paths: list[Path]) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in paths}


def test_plots_drawn_by_the_child_processes_are_the_files_render_all_draws(tmp_path: Path) -> None:
    rows, verdicts = _run(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    here = plots.render_all(tmp_path / "a", rows, verdicts, slo=["p95_ttft_ms<3000"])
    drawing = plot_drawing.draw_plots(tmp_path / "b", rows, verdicts, ["p95_ttft_ms<3000"], workers=2)
    assert drawing.child is not None, "two workers must draw in a child process"
    there = drawing.wait()
    assert [p.name for p in there] == [p.name for p in here], "the same plots, in render_all's order"
    assert [p.parent for p in there] == [tmp_path / "b" / "plots"] * len(there), there
    assert len(here) == 5, f"expected every plot of the run (throughput, TTFT, CDF, search, chunk curve): {here}"
    differ = [n for n, data in _pngs(there).items() if data != _pngs(here)[n]]
    assert not differ, f"the child's PNGs must be byte for byte render_all's; these differ: {differ}"


def test_the_session_process_never_imports_matplotlib_to_draw_its_plots(tmp_path: Path) -> None:
    _run(tmp_path / "run")
    script = (
        "import sys; from pathlib import Path; from pytest_sskj.report import plot_drawing as p; "
        "from pytest_sskj.report.results import read_results, read_verdicts; r = Path(sys.argv[1]); "
        "out = p.draw_plots(r, read_results(r).rows, read_verdicts(r).rows, workers=2).wait(); "
        "print(len(out), sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run")], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split(" ", 1) == ["5", "[]\n"], f"expected 5 plots and no matplotlib module, got {res.stdout!r}"


def test_a_child_that_plans_other_plots_leaves_them_to_the_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The child plans from the files; here the session holds one verdict more than they do."""
    rows, verdicts = _run(tmp_path)
    extra = {**VERDICTS[1], "id": "c1", "concurrency": 16}
    with caplog.at_level(logging.WARNING, logger="pytest_sskj.report.plot_drawing"):
        got = plot_drawing.draw_plots(tmp_path, rows, [*verdicts, extra], workers=2).wait()
    assert "chunk_curve_marlin_c16.png" in [p.name for p in got], f"the session must draw it itself: {got}"
    assert len(got) == 6 and all(p.is_file() for p in got), got
    assert "ended with 3" in caplog.text and "drawing 6 plot(s) here" in caplog.text, caplog.text


def test_a_child_that_does_not_answer_in_time_is_stopped_with_its_forks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows, verdicts = _run(tmp_path)
    drawing = plot_drawing.draw_plots(tmp_path, rows, verdicts, workers=2)
    assert drawing.child is not None
    group = drawing.child.pid
    forked = time.monotonic() + 10
    while len(_alive_in_group(group, wait_s=0)) < 2 and time.monotonic() < forked:
        time.sleep(0.01)  # until the child has forked its second worker (or gave up on it)
    drawing.deadline = time.monotonic()  # no time left: stopped at once
    with caplog.at_level(logging.WARNING, logger="pytest_sskj.report.plot_drawing"):
        got = drawing.wait()
    assert "no answer in time" in caplog.text, caplog.text
    assert len(got) == 5 and all(p.is_file() for p in got), f"the session draws what the child did not: {got}"
    assert _alive_in_group(group) == [], "the child and every fork of it must be gone"


def test_close_stops_a_drawing_nobody_waits_for(tmp_path: Path) -> None:
    rows, verdicts = _run(tmp_path)
    drawing = plot_drawing.draw_plots(tmp_path, rows, verdicts, workers=2)
    assert drawing.child is not None
    child = drawing.child
    drawing.close()
    assert child.returncode is not None, "close must reap the child"
    assert _alive_in_group(child.pid) == [], "close must stop the child's forks too"


def test_no_workers_or_nothing_to_draw_starts_no_child(tmp_path: Path) -> None:
    rows, verdicts = _run(tmp_path / "run")
    drawing = plot_drawing.draw_plots(tmp_path / "run", rows, verdicts, workers=0)
    assert drawing.child is None and len(drawing.wait()) == 5
    empty = plot_drawing.draw_plots(tmp_path / "empty", [], [])
    assert empty.child is None and empty.wait() == [], "a run without rows or verdicts has nothing to draw"


def test_shares_balance_the_plots_by_their_axes() -> None:
    """The default run: the 3-panel TTFT CDF and 8 one-axes plots, on 2 cores: 6 against 5."""
    weights = [1, 1, 3, 1, 1, 1, 1, 1, 1]
    shares = plot_drawing._shares(weights, 2)
    assert sorted(i for s in shares for i in s) == list(range(9)), shares
    assert sorted(sum(weights[i] for i in s) for s in shares) == [5, 6], shares
    assert plot_drawing._shares([1], 4) == [[0]], "no empty share: one plot is one process"


def test_a_plot_drawn_once_is_the_png_savefig_writes(tmp_path: Path) -> None:
    """``_save`` draws once (the layout inside the draw); ``savefig``, which a changed savefig setting brings
    back, writes the very same bytes, and its settings still apply."""
    import matplotlib as mpl

    rows, _ = _run(tmp_path / "run")
    once = plots.plot_throughput_vs_chunk(rows, tmp_path / "once.png", "r1")
    with mpl.rc_context({"savefig.dpi": 100}):  # the figure's own dpi: savefig, same picture
        saved = plots.plot_throughput_vs_chunk(rows, tmp_path / "savefig.png", "r1")
    with mpl.rc_context({"savefig.dpi": 50}):
        half = plots.plot_throughput_vs_chunk(rows, tmp_path / "half.png", "r1")
    assert once is not None and saved is not None and half is not None
    assert once.read_bytes() == saved.read_bytes(), "one draw must write what savefig writes"
    assert half.read_bytes()[16:24] == (400).to_bytes(4, "big") + (250).to_bytes(4, "big"), "savefig.dpi applies"


def test_without_fork_the_child_draws_every_share_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off Linux the child forks nothing: it draws both shares, one JSON line per plot, as the forks would."""
    rows, verdicts = _run(tmp_path)
    tasks = plots.plot_tasks(tmp_path, rows, verdicts)
    shares = plot_drawing._shares([t.weight for t in tasks], 2)
    spec = {"run_dir": str(tmp_path), "slo": [], "plan": plot_drawing._plan_digest(tasks), "shares": shares}
    monkeypatch.setattr(sys, "platform", "darwin")
    assert plot_drawing.draw_main([json.dumps(spec)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(x["task"] for x in lines) == list(range(5)), lines
    assert {x["file"] for x in lines} == {t.name for t in tasks}, lines
    assert plot_drawing.draw_main([json.dumps({**spec, "plan": "other"})]) == 3, "another plan must be refused"
