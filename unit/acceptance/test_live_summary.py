"""The live status line, the terminal summary table and the plugin's collection hooks."""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance import live as live_mod
from pytest_sskj.acceptance.live import LiveLine, live_enabled, log_enabled, log_text, status_text
from pytest_sskj.acceptance.matrix import Point
from pytest_sskj.acceptance.summary import HEADER, summary_lines, table_lines


class Writer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.width_of_current_line = 42

    def write(self, s: str, *, flush: bool = False) -> None:
        self.out.append(s)


P = Point("flashinfer_mxfp4", 8192, 8, 2, 3)


def test_status_text_names_backend_chunk_c_repeat_and_progress() -> None:
    assert status_text(P, 17, 40) == "sskj: flashinfer_mxfp4 chunk8192 C=8 r2/3: 17/40 requests"
    assert "search step" in status_text(Point("x", 1, 16, 0, 0, kind="search"), 0, 32)


def test_live_line_rewrites_in_place_and_erases_itself() -> None:
    w = Writer()
    live = LiveLine(w)
    live.update(P, 0, 40)
    live.update(P, 40, 40)
    live.finish()
    assert w.out[0] == "\n" + status_text(P, 0, 40)
    assert w.out[1].startswith("\r" + status_text(P, 40, 40))
    assert w.out[2] == "\r\x1b[2K\x1b[1A\x1b[42C", "the cursor must return to the end of the test's line"
    live.finish()
    assert len(w.out) == 3, "finish twice writes nothing"


def test_disabled_live_line_writes_nothing() -> None:
    live = LiveLine(None)
    live.update(P, 1, 2)
    live.finish()
    assert not live.enabled


def test_live_line_is_quiet_when_not_a_tty_under_q_and_on_workers(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure()
    assert live_enabled(config, isatty=True)
    assert not live_enabled(config, isatty=False)
    assert not live_enabled(pytester.parseconfigure("-q"), isatty=True)
    config.workerinput = {"workerid": "gw0"}  # type: ignore[attr-defined]
    assert not live_enabled(config, isatty=True)


def test_off_a_tty_a_plain_progress_line_at_least_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27: piped or in CI the rewritten line is invisible; a plain line names point, repeat, requests,
    elapsed and ETA, once per interval (the clock is the test's, not the box's)."""
    clock = [100.0]
    monkeypatch.setattr(live_mod.time, "monotonic", lambda: clock[0])
    w = Writer()
    live = LiveLine(w, log=True, interval_s=10.0)
    for t, done in ((101.0, 0), (105.0, 10), (111.0, 20), (112.0, 25), (121.5, 30), (121.6, 40)):
        clock[0] = t
        live.update(P, done, 40)
    live.finish()
    assert w.out == [
        "\nsskj: progress flashinfer_mxfp4 chunk8192 C=8 r2/3: 20/40 requests, 10 s elapsed, ETA 10 s (session 11 s)\n",
        "\nsskj: progress flashinfer_mxfp4 chunk8192 C=8 r2/3: 30/40 requests, 20 s elapsed, ETA 7 s (session 22 s)\n",
    ], w.out


def test_log_text_without_a_finished_request_has_no_eta_and_minutes_read_as_such() -> None:
    assert log_text(P, 0, 40, 75.0, 3600.0).endswith("0/40 requests, 1m15s elapsed, ETA unknown (session 60m00s)")


def test_plain_progress_lines_only_off_a_tty_on_the_controller_and_not_under_q(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure()
    tr = config.pluginmanager.get_plugin("terminalreporter")
    assert tr is not None
    tr.isatty = False  # pytester's terminal is not a tty either way: set it both ways
    assert log_enabled(config)
    tr.isatty = True
    assert not log_enabled(config)
    tr.isatty = False
    assert not log_enabled(pytester.parseconfigure("-q"))


def _row(backend: str, tps: float, p50: float, p95: float, status: str = "passed") -> dict[str, object]:
    return {
        "backend": backend,
        "chunk": 8192,
        "concurrency": 8,
        "status": status,
        "input_throughput": tps,
        "median_ttft_ms": p50,
        "p95_ttft_ms": p95,
        "point_id": f"{backend}-chunk8192-c8-r1",
        "reasons": ["[crash] boom\nexcerpt"] if status != "passed" else [],
    }


def test_table_in_the_users_format() -> None:
    rows = [_row("marlin", 2930.03, 43587.0, 46287.0), _row("flashinfer_mxfp4", 3251.25, 39267.0, 41694.0)]
    lines = table_lines(rows, "marlin")
    assert [c.strip() for c in lines[0].split("|")] == list(HEADER)
    assert [c.strip() for c in lines[2].split("|")] == [
        "8K",
        "8",
        "marlin",
        "2930.03",
        "43.59 s",
        "46.29 s",
        "n/a",  # TPOT P50/P95: undefined at OSL 1
        "n/a",
        "n/a",  # E2E P95: not in these rows
        "baseline",
    ]
    assert [c.strip() for c in lines[3].split("|")][-1] == "+10.96% TPS / −9.91% TTFT"


def test_summary_lists_points_that_did_not_pass_and_verdicts() -> None:
    rows = [_row("marlin", 1.0, 1.0, 1.0), _row("flashinfer_mxfp4", 0.0, 0.0, 0.0, status="failed")]
    lines = summary_lines(
        rows,
        [{"kind": "slo", "passed": False, "message": "x: ttft_p95_ms=3120.00 >= 3000"}],
        baseline="marlin",
        run_dir="/r",
    )
    assert "  flashinfer_mxfp4-chunk8192-c8-r1: failed: [crash] boom" in lines
    assert "FAIL slo: x: ttft_p95_ms=3120.00 >= 3000" in lines and lines[-1] == "results: /r"
    assert summary_lines([], [], baseline=None) == []


def _collected(pytester: pytest.Pytester, *args: str) -> list[pytest.Item]:
    rec = pytester.inline_run("--collect-only", *args)
    return list(rec.getcalls("pytest_collection_finish")[0].session.items)


def test_collection_orders_points_first_and_bounds_each_test_with_a_signal_timeout(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_a="""
        def test_compare(sskj_comparison): pass
        def test_point(sskj_point): pass
        def test_slo(sskj_slo_config): pass
        """
    )
    items = _collected(
        pytester,
        "--engine",
        "sglang",
        "--backend",
        "marlin,flashinfer_mxfp4",
        "--chunk",
        "8K",
        "--concurrency",
        "8",
        "--repeats",
        "2",
    )
    assert [i.name for i in items] == [
        "test_point[marlin-chunk8192-c8-r1]",
        "test_point[marlin-chunk8192-c8-r2]",
        "test_point[flashinfer_mxfp4-chunk8192-c8-r1]",
        "test_point[flashinfer_mxfp4-chunk8192-c8-r2]",
        "test_slo[marlin-chunk8192-c8]",
        "test_slo[flashinfer_mxfp4-chunk8192-c8]",
        "test_compare[flashinfer_mxfp4-vs-marlin-chunk8192-c8]",
    ]
    marker = items[0].get_closest_marker("timeout")
    assert marker is not None and marker.kwargs["method"] == "signal"
    assert marker.args[0] >= 1800, "a serving test must outlast the sglang health timeout"


def test_single_backend_comparison_is_one_explained_parameter(pytester: pytest.Pytester) -> None:
    """One backend: the comparison does not apply -- deselected and listed with the reason, not skipped."""
    from pytest_sskj.stash import NOT_APPLICABLE_KEY

    pytester.makepyfile(test_b="def test_compare(sskj_comparison): assert sskj_comparison is None")
    rec = pytester.inline_run("--collect-only", "--backend", "parallel")
    assert [i.name for i in rec.getcalls("pytest_collection_finish")[0].session.items] == []
    na = rec.getcalls("pytest_collection_finish")[0].session.config.stash[NOT_APPLICABLE_KEY]
    assert list(na.values()) == ["one backend (parallel): no A/B to judge; give a baseline and a candidate, "
                                 "e.g. --backend marlin,flashinfer_mxfp4"], na  # fmt: skip


def test_resume_of_an_unknown_run_is_a_usage_error_naming_known_runs(pytester: pytest.Pytester) -> None:
    (pytester.path / "reports" / "20261129-010203-abcd" / "points" / "p").mkdir(parents=True)
    pytester.makepyfile(test_c="def test_x(): pass")
    res = pytester.runpytest("--reports-dir", "reports", "--resume", "nope")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [
            "*--resume nope: *nope holds no finished points to resume",
            "*Hint: runs with points under *reports: 20261129-010203-abcd",
        ]
    )


def test_overhead_line_counts_server_starts_configurations_and_wall_vs_benchmark_time() -> None:
    from pytest_sskj.acceptance.summary import overhead_line

    rows = [{"duration": 2.0}, {"duration": 3.0}, {"duration": None}, {"status": "not_run"}]
    line = overhead_line(rows, {"a": 3, "b": 3}, 11.0)
    assert line == (
        "overhead: 6 server start(s) for 2 distinct server configuration(s); "
        "session wall 11.0 s vs 5.0 s measured benchmark time (2.20x)"
    ), line
    assert overhead_line([], None, 1.0) == "overhead: session wall 1.0 s vs 0.0 s measured benchmark time (n/a)"
    # two configurations x two repeats, two points (C) per repeat sharing its server run
    runs = [{"spec_key": k, "repeat": r, "duration": 1.0} for k in "ab" for r in (1, 2) for _ in range(2)]
    assert overhead_line(runs, {"a": 2, "b": 2}, 10.0).startswith(
        "overhead: 4 server start(s) for 4 server run(s) (2 distinct server configuration(s) x their repeats; "
        "every repeat is its own server run), 0 redundant; session wall 10.0 s vs 8.0 s"
    )
    assert ", 2 redundant;" in overhead_line(runs, {"a": 3, "b": 3}, 10.0), "a restart inside a repeat is redundant"


def test_a_verdict_headline_is_one_short_line_naming_the_winner_the_delta_its_ci_and_the_point() -> None:
    """Issue 27: each verdict was one ~780-character line; the terminal now shows one headline per verdict
    (the long evidence is verdicts.txt in the run directory)."""
    from pytest_sskj.acceptance.summary import headline, headline_lines

    comparison = {
        "kind": "comparison",
        "passed": True,
        "outcome": "better",
        "candidate": "flashinfer_mxfp4",
        "baseline": "marlin",
        "chunk": 8192,
        "concurrency": 8,
        "metrics": [{"label": "Input TPS", "delta_pct": 11.04, "ci_low_pct": 9.81, "ci_high_pct": 12.07}],
        "message": "x" * 800,
    }
    assert headline(comparison) == (
        "PASS flashinfer_mxfp4 > marlin by +11.0 % Input TPS (CI +9.8..+12.1 %) at chunk 8192 C=8 [better]"
    )
    slo = {
        "kind": "slo",
        "passed": False,
        "backend": "marlin",
        "chunk": 8192,
        "concurrency": 8,
        "gates": [
            {"metric": "p95_ttft_ms", "op": "<", "threshold": 3000, "value": v, "repeat": r}
            for r, v in ((1, 2900.0), (2, 3120.0))
        ],
    }
    assert headline(slo) == "FAIL SLO marlin at chunk 8192 C=8: worst of 2 repeat(s) p95_ttft_ms 3120.0 < 3000"
    assert headline_lines([comparison, slo])[0].startswith("FAIL SLO"), "failures first"
    assert all(len(line) <= 160 for line in headline_lines([comparison, slo, {"kind": "x", "message": "y" * 900}]))
