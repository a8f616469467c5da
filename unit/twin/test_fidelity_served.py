"""The twin serves ANY valid model file as the file says (issue 47): generated files -- rates that differ between
concurrencies, chunks and backends in either direction, spreads and wake-ups drawn within the documented bounds
(docs/twin.md) -- served cell by cell through a real stand-in rank process and the real bench client, every
stated figure within 1 % of the file at the cell's own concurrency; with the calibration switched off the same
check fails.  Minutes of serving: CI's twin phase (``unit/twin/conftest.py`` deselects it elsewhere)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from pytest_sskj.report.allure import attach_text
from pytest_sskj.twin.fidelity import CellError, error_table, generate_model, serve_model, shapes, write_model

pytestmark = pytest.mark.slow

BOUND_PCT = 1.0
REPO = Path(__file__).resolve().parents[2]


def _served(tmp: Path, seed: int, *, calibrated: bool = True) -> tuple[str, list[CellError]]:
    path = write_model(generate_model(seed), tmp / f"generated-{seed}.toml")
    rows = serve_model(path, tmp / f"served-{seed}-{'on' if calibrated else 'off'}", repeats=1, calibrated=calibrated)
    table = error_table(f"generated-{seed}", rows)
    attach_text(f"per-cell error, generated-{seed}{'' if calibrated else ' (calibration off)'}", table)
    print(table)
    return table, rows


@settings(max_examples=2, deadline=None, database=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@example(seed=3)  # 24 requests at C=16 (ramp-heavy) with a C-dependence: 22 % off before the calibration
@given(seed=st.integers(min_value=1, max_value=10**6))
def test_every_cell_of_a_generated_model_is_served_within_1_percent(tmp_path: Path, seed: int) -> None:
    """One repeat per cell; a cell beyond the bound is served again, 3 repeats, and judged by their median (the
    bench's own statistic): one repeat can be thrown by the box -- seen once in CI, seed 3's flashinfer 8K C=16
    cell at -2.22 % input TPS / +3.78 % TTFT P50 alone on the idle box, within 0.35 % in every other run -- a
    systematic miss stays beyond it."""
    table, rows = _served(tmp_path, seed)
    off = [r for r in rows if r.worst > BOUND_PCT]
    if off:
        path = tmp_path / f"generated-{seed}.toml"
        again = serve_model(path, tmp_path / f"served-{seed}-again", repeats=3, only=[r.cell for r in off])
        retable = error_table(f"generated-{seed} (again, median of 3)", again)
        attach_text(f"per-cell error, generated-{seed}, the cells served again", retable)
        print(retable)
        off = [r for r in again if r.worst > BOUND_PCT]
        table = f"{table}\n\nserved again, median of 3 repeats:\n{retable}"
    assert not off, f"expected every figure within {BOUND_PCT} % of the file; {len(off)} cell(s) beyond:\n{table}"


def test_with_the_calibration_switched_off_the_same_check_fails(tmp_path: Path) -> None:
    table, rows = _served(tmp_path, 3, calibrated=False)
    assert max(r.worst for r in rows) > 3 * BOUND_PCT, (
        f"expected the uncalibrated twin to miss the file by more than {3 * BOUND_PCT} % somewhere:\n{table}"
    )


GAINS = (1.12, 0.88, 1.0, 0.9)
"""The candidate's input TPS over the reference's, per shape (chunk x concurrency): better, worse, the reference's
very figures, worse."""
EXPECTED = {1.12: "better", 0.88: "worse", 1.0: "equivalent", 0.9: "worse"}
PROFILE = """description = "a generated twin file's backend A/B on one local stand-in node (issue 47, item 3)"
engine = "sglang"
model_path = "/models/generated"  # the stand-in rank serves the model file, whatever the path
nodes = "local"
tp = 8
ep = 1
dp = 1
backends = ["marlin", "flashinfer_mxfp4"]
repeats = 3
max_repeats = 6
slo = "none"
[layers]
platform = "twin"
"""


def test_the_ab_verdict_orders_the_backends_as_the_file_does_in_every_cell(tmp_path: Path) -> None:
    """``pytest acceptance/`` against a generated file whose candidate is better, worse and equal in different cells:
    each shape's comparison says what the file says (served by one local stand-in rank per server)."""
    doc = generate_model(5, gains=GAINS, osl=1)  # the users' prefill job's shape: ISL -> 1
    model = write_model(doc, tmp_path / "ab.toml")
    (tmp_path / "platforms").mkdir()
    shutil.copy(REPO / "profiles" / "platforms" / "twin.toml", tmp_path / "platforms" / "twin.toml")
    (tmp_path / "ab-profile.toml").write_text(PROFILE)
    cells = shapes(doc)
    argv = [sys.executable, "-m", "pytest", "acceptance/", "--profile", str(tmp_path / "ab-profile.toml"),
            "--sskj-twin-model", str(model), "--isl", str(doc["workload"]["isl"]),
            "--osl", str(doc["workload"]["osl"]),
            "--requests", str(doc["workload"]["requests"]),
            "--chunk", ",".join(str(k) for k in sorted({k for k, _ in cells})),
            "--concurrency", ",".join(str(c) for c in sorted({c for _, c in cells})),
            "-k", "test_serving or test_backend_comparison", "--reports-dir", str(tmp_path / "reports"),
            "--run-id", "ab", "-p", "no:cacheprovider", "--sskj-db", "none"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SSKJ_"))}
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=540, env=env, check=False)
    out = proc.stdout + proc.stderr
    vpath = tmp_path / "reports" / "ab" / "verdicts.json"
    assert vpath.is_file(), f"the run wrote no verdicts (exit {proc.returncode}):\n{out[-4000:]}"
    verdicts = [v for v in json.loads(vpath.read_text())["verdicts"] if v.get("kind") == "comparison"]
    got = {(v["chunk"], v["concurrency"]): v for v in verdicts}
    want = {shape: EXPECTED[g] for shape, g in zip(cells, GAINS, strict=True)}
    wrong = {
        s: (want[s], got[s]["outcome"] if s in got else None) for s in want if got.get(s, {}).get("outcome") != want[s]
    }
    table = "\n".join(
        f"chunk {k} C{c}: file {g - 1:+.0%} -> {got[(k, c)]['message'][:160]}"
        for (k, c), g in zip(cells, GAINS, strict=True)
        if (k, c) in got
    )
    attach_text("A/B verdicts per cell against the file", table)
    assert not wrong, (
        f"expected each shape's verdict to order the backends as the file does; (want, got): {wrong}\n{table}"
    )
