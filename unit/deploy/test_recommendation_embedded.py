"""End to end on the real embedded engine: a three-layout x two-shape run ends with a recommendation verdict,
the ranked table in summary.md and as CSV/JSON, and the plot; a layout whose server cannot start never wins."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("xllamacpp")

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"

PROFILE = """
description = "two slot layouts and one that cannot start, two shapes"
engine = "embedded"
backends = ["parallel"]
chunks = [256]
concurrencies = [4]
isl = [256, 512]
osl = [32]
requests = 16
repeats = 2
search = "none"
slo = "ttft_p95_ms<120000"

[[layouts]]
name = "slots8"
server_args = ["--parallel", "8"]

[[layouts]]
name = "slots1"
server_args = ["--parallel", "1"]

[[layouts]]
name = "broken"
server_args = ["--batch", "0"]
"""


pytestmark = pytest.mark.slow  # a two-layout, two-shape embedded acceptance run


def test_two_layouts_two_shapes_end_with_a_recommendation_table_and_plot(pytester: pytest.Pytester) -> None:
    prof = pytester.path / "layouts.toml"
    prof.write_text(PROFILE)
    reports = pytester.path / "reports"
    res = pytester.runpytest_subprocess(
        str(ACCEPTANCE),
        "--profile",
        str(prof),
        "--run-id",
        "rec",
        "--reports-dir",
        str(reports),
        "-p",
        "no:cacheprovider",
        "-rA",
        timeout=540,
    )
    out = res.stdout.str()
    run = reports / "rec"
    verdicts = [json.loads(p.read_text()) for p in sorted((run / "verdicts").glob("recommendation-*.json"))]
    assert len(verdicts) == 2, f"expected one recommendation per shape, saw {len(verdicts)}\n{out[-3000:]}"
    for v in verdicts:
        ranked = {r["layout"]: r for r in v["ranked"]}
        assert set(ranked) == {"slots8", "slots1", "broken"}
        assert ranked["broken"]["best"] is None and "failed" in ranked["broken"]["why_none"], ranked["broken"]
        test = f"test_recommendation[{v['id']}]"
        if v["winner"] is not None:
            # on a loaded 2-core box the client can be starved (client-bound): such points are invalid, never winners
            assert v["winner"]["layout"] in ("slots8", "slots1"), f"a layout that cannot start won: {v['message']}"
            best = ranked[v["winner"]["layout"]]["best"]
            assert best["eligible"] and not best["client_bound"] and best["passed"] == best["repeats"] == 2, best
            assert v["outcome"] in ("recommended", "inconclusive") and v["passed"] is True, v["message"]
            assert any(ln.startswith("PASSED") and ln.endswith(f"::{test}") for ln in res.stdout.lines), out[-2000:]
        else:
            why = " ".join(r["why_none"] for r in v["ranked"])
            assert v["outcome"] == "none_meets_slo" and ("client-bound" in why or "SLO miss" in why), v["message"]
        for name in ("csv", "json", "plot"):
            f = Path(v["files"][name])
            assert f.is_file() and f.stat().st_size > 100, f"expected the {name} output at {f}"
        with open(v["files"]["csv"], newline="") as fh:
            rows = list(csv.reader(fh))
        assert rows[0][:3] == ["Rank", "Layout", "Best C"] and len(rows) == 4, rows
    summary = (run / "summary.md").read_text()
    assert "## Recommendation isl256-osl32-parallel-chunk256" in summary, summary[-2000:]
    assert "## Recommendation isl512-osl32-parallel-chunk256" in summary
    assert "recommendation-isl256-osl32-parallel-chunk256.png" in summary, "the plot is listed in summary.md"
    rows = json.loads((run / "results.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    layouts = {r.get("layout") for r in rows}
    assert {"slots8", "slots1", "broken"} <= layouts, f"every result row records its layout, saw {layouts}"
