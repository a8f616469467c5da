"""The acceptance suite driven end to end against the real embedded CPU engine, with injected faults.

Each test runs ``acceptance/`` in a pytest subprocess (small workloads: a few requests, two repeats) and
checks the verdicts and messages a user would see, and what stays on disk.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


def _run(pytester: pytest.Pytester, run_id: str | None, *args: str, plugin: str | None = None) -> pytest.RunResult:
    extra: list[str] = ["--run-id", run_id] if run_id else []
    if plugin is not None:
        pytester.makepyfile(sskj_faults=plugin)
        extra += ["-p", "sskj_faults"]
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")]))
    return pytester.runpytest_subprocess(
        str(ACCEPTANCE),
        "--reports-dir",
        str(pytester.path / "reports"),
        "-p",
        "no:cacheprovider",
        "--isl",
        "128",
        "--osl",
        "4",
        "--requests",
        "8",
        "--repeats",
        "2",
        "--chunk",
        "512",
        "--sskj-search",
        "none",
        # the fault tests name the variants and C they were written for (the embedded default A/B is now
        # microbatch vs parallel at C=16; test_default_* below runs it)
        "--backend",
        "parallel,serial",
        "--concurrency",
        "8",
        # these tests inject faults into tiny points (TTFT of a few ms) run next to other pytester sessions:
        # whether the client kept up is not what they check, so a client-bound point may pass here
        "--sskj-allow-client-bound",
        *extra,
        *args,
        timeout=300,
    )


def _row(pytester: pytest.Pytester, run_id: str, point: str) -> dict[str, Any]:
    path = pytester.path / "reports" / run_id / "points" / point / "result.json"
    assert path.is_file(), f"expected {path} on disk"
    return dict(json.loads(path.read_text()))


def _verdict(pytester: pytest.Pytester, run_id: str, name: str) -> dict[str, Any]:
    return dict(json.loads((pytester.path / "reports" / run_id / "verdicts" / f"{name}.json").read_text()))


KILL_SERIAL_MID_POINT = """
import os, signal, threading, time
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

TARGET = "serial-chunk512-c8-r1"

def _kill(config):
    path = config.stash[SETTINGS_KEY].run_dir / "points" / TARGET / "requests.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        n = len(path.read_text().splitlines()) if path.is_file() else 0
        pool = config.stash[EXTRA_KEY].get("server_pool")
        if n >= 3 and pool is not None:
            for server in list(pool.running.values()):
                if server.spec.backend == "serial":
                    for h in server.handles:
                        for pid in h.pids():
                            os.kill(pid, signal.SIGKILL)
                    return
        time.sleep(0.005)

def pytest_runtest_setup(item):
    if item.name == "test_serving[" + TARGET + "]":
        threading.Thread(target=_kill, args=(item.config,), daemon=True).start()
"""


@pytest.mark.slow
def test_server_killed_mid_point_fails_it_and_skips_the_rest_of_its_config(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    res = _run(
        pytester,
        "kill",
        "-k",
        "test_serving or test_backend_comparison",
        "--requests",
        "24",
        plugin=KILL_SERIAL_MID_POINT,
    )
    res.stdout.fnmatch_lines(
        [
            "*FAILED *test_serving.py::test_serving[[]serial-chunk512-c8-r1[]]*",
            "*FAILED *test_backend_comparison.py::test_backend_comparison[[]serial-vs-parallel-chunk512-c8[]]*",
        ]
    )
    res.stdout.fnmatch_lines(["SKIPPED [[]1[]] *test_serving.py:*: not run: server crashed at serial-chunk512-c8-r1"])
    crashed = _row(pytester, "kill", "serial-chunk512-c8-r1")
    assert crashed["status"] == "failed" and crashed["category"] == "crash", crashed
    assert crashed["reasons"][0].startswith("[crash] server serial-chunk512 crashed during serial-chunk512-c8-r1"), (
        crashed["reasons"]
    )
    assert _row(pytester, "kill", "serial-chunk512-c8-r2")["status"] == "not_run"
    assert _row(pytester, "kill", "parallel-chunk512-c8-r1")["status"] in ("passed", "failed"), (
        "finished points stay on disk"
    )
    assert "[crash] cannot compare serial with parallel" in res.stdout.str()


CANNOT_START_SERIAL = """
import sys
from pytest_sskj.server.spec import NodeCommand

def pytest_sskj_server_commands(config, spec):
    if spec.backend != "serial":
        return None
    code = ("import sys; sys.stderr.write('sskj-embedded: cannot initialise backend serial: illegal instruction\\\\n');"
            " sys.exit(3)")
    return [NodeCommand("local", 0, (sys.executable, "-c", code), port=0)]
"""


@pytest.mark.slow
def test_variant_that_cannot_start_fails_once_with_its_log_and_is_not_retried(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    res = _run(pytester, "nostart", "-k", "test_serving", plugin=CANNOT_START_SERIAL)
    res.stdout.fnmatch_lines(["*FAILED *test_serving.py::test_serving[[]serial-chunk512-c8-r1[]]*"])
    res.stdout.fnmatch_lines(
        ["SKIPPED [[]1[]] *test_serving.py:*: not run: server failed to start at serial-chunk512-c8-r1"]
    )
    assert "test_serving[parallel-chunk512-c8-r1]" not in " ".join(ln for ln in res.stdout.lines if "SKIPPED" in ln), (
        "the other variant must still run"
    )
    row = _row(pytester, "nostart", "serial-chunk512-c8-r1")
    assert row["reasons"][0].startswith("[crash] server serial-chunk512 failed to start (ServerLaunchError)"), row
    assert "illegal instruction" in row["reasons"][0], "the launch log excerpt belongs in the message"


@pytest.mark.slow
def test_slo_violation_and_failing_comparison_give_their_verdicts_and_messages(pytester: pytest.Pytester) -> None:
    res = _run(
        pytester,
        "gate",
        # 3 repeats a side: with 2, Welch's df falls to 1 when one side holds the spread (t = 12.7), and CI's
        # ~60 % repeat spread of these few-ms points made even an 11x margin undecidable (inconclusive, ci 30).
        # Under load 3 were not enough either (issue 55: 146 % spread, CI -70.7 % ... +1713.7 %): 24 requests a
        # point (3x longer points, a smaller share of any one scheduling hiccup) and the sequential design's extra
        # repeat pairs up to 8 a side (docs/verdicts.md), so the loss is decided under the noise this box can meet
        "--repeats",
        "3",
        "--sskj-max-repeats",
        "8",
        "--requests",
        "24",
        "-k",
        "test_slo or test_backend_comparison",
        "--osl",
        "1",
        "--sskj-slo",
        "ttft_p95_ms<1,tpot_p95_ms<0.001",
        "--sskj-compare-expect",
        "better",
        "--sskj-margin",
        "1000",  # the schema's most (1000 %): serial never beats parallel by 11x
    )
    res.assert_outcomes(failed=3)
    out = res.stdout.str()
    v = _verdict(pytester, "gate", "slo-parallel-chunk512-c8")
    assert v["passed"] is False
    assert "p95_ttft_ms=" in v["message"] and ">= 1" in v["message"], v["message"]
    assert "p95_tpot_ms not judged (undefined for this run)" in v["message"], "OSL 1: TPOT must not be judged"
    assert "[slo] parallel-chunk512-c8 misses the SLO (p95_ttft_ms<1, p95_tpot_ms<0.001)" in out
    c = _verdict(pytester, "gate", "comparison-serial-vs-parallel-chunk512-c8")
    pdir = pytester.path / "reports" / "gate" / "points"
    points = sorted(p.name for r in ("parallel", "serial") for p in pdir.glob(f"{r}-chunk512-c8-r*"))
    ran = [p for p in points if _row(pytester, "gate", p)["status"] != "not_run"]
    assert 6 <= len(ran) <= 16, f"expected 3 to 8 measured repeats a side, saw {ran}"
    bound = [p for p in ran if _row(pytester, "gate", p)["client_bound"]]
    if bound:  # allowed client-bound repeats make any comparison inconclusive, whatever the numbers
        assert c["outcome"] == "inconclusive" and "client-bound" in c["message"], (bound, c["message"])
    else:
        assert c["outcome"] == "worse", c["message"]
    assert c["passed"] is False
    # the CI's level is the sequential design's (99.30 % at its first look of 8, 95 % without one): docs/verdicts.md
    tag = "[inconclusive]" if bound else "[worse]"  # each outcome its own word (issue 46), never [regression]
    assert f"{tag} serial vs parallel: " in out and re.search(r"% Input TPS \([\d.]+ % CI ", out), out[-3000:]
    if not bound:
        assert "serial does not beat parallel by 1000 %: Input TPS below it" in out, out[-3000:]


def test_default_comparison_is_recorded_and_resume_repeats_no_point(pytester: pytest.Pytester) -> None:
    first = _run(pytester, "mx", "-k", "test_serving or test_backend_comparison", "--sskj-compare-expect", "report")
    seen = first.parseoutcomes()
    # (serving points are not asserted to pass here: that is test_serving's business, not resume's)
    assert seen.get("skipped") == 1 and seen.get("passed", 0) + seen.get("failed", 0) == 4, seen
    first.stdout.fnmatch_lines(["*verdict recorded, not enforced: serial vs parallel: *--sskj-compare-expect better*"])
    first.stdout.fnmatch_lines(
        [
            "*sskj acceptance summary*",
            "Chunk | C | Backend * | vs baseline*",
            "512*| 8 | parallel*| baseline",
            "512*| 8 | serial*% TPS / *% TTFT",
        ]
    )
    path = pytester.path / "reports" / "mx" / "points" / "parallel-chunk512-c8-r1" / "result.json"
    stamp = path.stat().st_mtime_ns
    again = _run(
        pytester,
        None,
        "-k",
        "test_serving or test_backend_comparison",
        "--sskj-compare-expect",
        "report",
        "--resume",
        "mx",
    )
    assert again.parseoutcomes() == seen, "a resumed run reports the stored verdicts"
    assert path.stat().st_mtime_ns == stamp, "a finished point was measured again on --resume"
    logs = list((pytester.path / "reports" / "mx" / "logs").rglob("*.log"))
    assert len(logs) == 4, f"the resumed run must start no server (2 variants x 2 repeats, interleaved): {logs}"


@pytest.mark.slow
def test_search_writes_steps_and_resume_repeats_nothing(pytester: pytest.Pytester) -> None:
    args = (
        "-k",
        "test_concurrency_search",
        "--backend",
        "parallel",
        "--sskj-search",
        "double",
        "--sskj-search-max",
        "4",
    )
    first = _run(pytester, "srch", *args)
    seen = first.parseoutcomes()
    assert seen.get("passed", 0) + seen.get("failed", 0) == 1, seen
    steps = pytester.path / "reports" / "srch" / "search" / "parallel-chunk512" / "steps-double.jsonl"
    before = steps.read_text()
    assert before.count("\n") >= 1, before
    v = _verdict(pytester, "srch", "search-parallel-chunk512")
    # the answer names what it is: the highest C meeting the SLO, or the saturation knee reached first
    answers = ("double: highest concurrency meeting", "double: saturation knee")
    assert v["best_concurrency"] in (None, 1, 2, 4) and v["message"].startswith(answers), v["message"]
    again = _run(pytester, None, *args, "--resume", "srch")
    assert again.parseoutcomes() == seen
    assert steps.read_text() == before, "a resumed search must not measure a step again"
    v2 = _verdict(pytester, "srch", "search-parallel-chunk512")
    assert all(s["resumed"] for s in v2["steps"]) and v2["best_concurrency"] == v["best_concurrency"]


FREEZE_SERIAL_MID_POINT = """
import os, signal, threading, time
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

TARGET = "serial-chunk512-c8-r1"

def _freeze(config):
    path = config.stash[SETTINGS_KEY].run_dir / "points" / TARGET / "requests.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        n = len(path.read_text().splitlines()) if path.is_file() else 0
        pool = config.stash[EXTRA_KEY].get("server_pool")
        if n >= 2 and pool is not None:
            for server in list(pool.running.values()):
                for h in server.handles:
                    for pid in h.pids():
                        os.kill(pid, signal.SIGSTOP)
            return
        time.sleep(0.005)

def pytest_runtest_setup(item):
    if item.name == "test_serving[" + TARGET + "]":
        threading.Thread(target=_freeze, args=(item.config,), daemon=True).start()
"""


@pytest.mark.slow
def test_hung_server_is_bounded_by_pytest_timeout_torn_down_and_its_config_not_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    res = _run(
        pytester,
        "hang",
        "-k",
        "test_serving",
        "--backend",
        "serial",
        "--requests",
        "64",
        "--timeout",
        "8",
        plugin=FREEZE_SERIAL_MID_POINT,
    )
    res.stdout.fnmatch_lines(["*FAILED *test_serving.py::test_serving[[]serial-chunk512-c8-r1[]]*"])
    assert "Timeout (>8.0s) from pytest-timeout" in res.stdout.str()
    res.stdout.fnmatch_lines(["SKIPPED [[]1[]] *test_serving.py:*: not run: server hung at serial-chunk512-c8-r1"])
    row = _row(pytester, "hang", "serial-chunk512-c8-r1")
    assert row["category"] == "timeout", row
    assert row["reasons"][0].startswith("[timeout] server serial-chunk512 hung during serial-chunk512-c8-r1"), row
    res.stdout.fnmatch_lines(["*server pool closed*every PID on every node is gone*"])


@pytest.mark.slow  # a whole interleaved session with searches (~8 s): the slow phase keeps the inner loop short
def test_every_server_of_an_interleaved_run_and_its_searches_starts_once(pytester: pytest.Pytester) -> None:
    """The runner starts servers one and two points ahead of their turn (the next one warmed, the one after it
    idle: A B A B makes it a fresh server of the spec just measured), and each search's server while the
    previous search still steps: every server run still starts exactly once, none redundant."""
    res = _run(
        pytester,
        "ahead",
        *("--sskj-search", "double", "--sskj-search-max", "2"),
        *("-k", "test_serving or test_concurrency_search"),
    )
    manifest = json.loads((pytester.path / "reports" / "ahead" / "manifest.json").read_text())
    line = str(manifest["session"]["overhead"])
    # 2 backends x 2 repeats of the serving point, and one server per search (C=1 then C=2 on it)
    ok = "6 server start(s) for 6 server run(s)" in line and ", 0 redundant;" in line
    assert ok, (line, res.stdout.str()[-3000:])
    logs = sorted(p.name for p in (pytester.path / "reports" / "ahead" / "logs").rglob("*.log"))
    assert len(logs) == 6, f"one log per server start: {logs}"


@pytest.mark.slow
def test_an_aa_control_on_the_real_engine_passes_saying_equivalent_or_inconclusive(pytester: pytest.Pytester) -> None:
    """``--backend parallel,parallel``: two identical servers.  The control passes when its repeats come out
    ``equivalent`` or ``inconclusive``, and says which in its own word (issue 46): never ``better``, ``worse`` or the
    baseline gate's ``regression``."""
    res = _run(pytester, "aa", "--backend", "parallel,parallel", "--repeats", "3")
    out = res.stdout.str()
    c = _verdict(pytester, "aa", "comparison-parallel@2-vs-parallel-chunk512-c8")
    assert c["control"] is True and c["outcome"] in ("equivalent", "inconclusive"), c["message"]
    assert c["passed"] is True, f"expected the A/A control to pass as {c['outcome']}: {c['message']}"
    assert f"[A/A control, {c['outcome']}]" in out, out[-3000:]
    assert "[regression]" not in out and "[better]" not in out and "[worse]" not in out, out[-3000:]
