"""``pytest_sskj/vocabulary.py`` is the one metric registry: the bench computes exactly its computed metrics, an
SLO may name only those, and a metric added in one place (its registry entry + its computation) reaches the
result rows, ``medians.csv``/``.json``, ``summary.md`` (through its SLO gate), the export and the database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_sskj
from pytest_sskj.bench.metrics import _SCALARS, _Run, computation, compute_metrics
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.records import METRIC_FIELDS
from pytest_sskj.slo import parse_slo
from pytest_sskj.vocabulary import COMPUTED, GATEABLE, METRICS, canonical

_EXTRAS = {"metrics_version", "requests", "total_output_tokens_counted", "max_concurrency"}


def _records(n: int = 4) -> list[RequestRecord]:
    return [
        RequestRecord(
            index=i,
            warmup=False,
            repeat=1,
            url="http://127.0.0.1:1",
            endpoint="completions",
            isl=8,
            osl=4,
            t_send=float(i),
            t_first=i + 0.1 * (i + 1),
            t_end=i + 1.0,
            chunk_times=[i + 0.1 * (i + 1) + 0.2 * k for k in range(4)],
            chunk_tokens=[1, 1, 1, 1],
            prompt_tokens=8,
            completion_tokens=4,
        )
        for i in range(n)
    ]


def test_the_bench_computes_exactly_the_registry_metrics_marked_computed() -> None:
    got = compute_metrics(_records(), max_concurrency=4)
    assert set(got) - _EXTRAS == set(COMPUTED), (
        f"compute_metrics keys beyond {sorted(_EXTRAS)} must be vocabulary.COMPUTED; "
        f"missing {sorted(set(COMPUTED) - set(got))}, unregistered {sorted(set(got) - _EXTRAS - set(COMPUTED))}"
    )
    assert all(m.computed for m in METRICS.values()), "a registry entry marked computed=False must not be computed"
    assert set(GATEABLE) <= set(COMPUTED) and {"p95_ttft_ms", "input_throughput"} <= set(GATEABLE)


def test_a_metric_marked_computed_without_a_computation_is_named() -> None:
    run = _Run([], [], None, {"ttft": [], "tpot": [], "itl": [], "e2e_latency": []})
    assert "max_itl_ms" in _SCALARS
    with pytest.raises(KeyError, match=r"p999_ttft_ms.*no computation"):
        computation("p999_ttft_ms", run, {})


def test_an_slo_on_a_metric_the_registry_lacks_is_refused_with_the_accepted_names() -> None:
    with pytest.raises(ValueError, match=r"unknown metric 'p999_ttft_ms'.*did you mean 'p99_ttft_ms'.*known metrics"):
        parse_slo("p999_ttft_ms<5000")
    assert canonical("ttft_p95_ms", allowed=GATEABLE) == "p95_ttft_ms"


_SCRIPT = r"""
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])  # the edited copy, ahead of any .pth or editable install of the package
import pytest_sskj
assert pytest_sskj.__file__.startswith(sys.argv[3]), pytest_sskj.__file__
from pytest_sskj.acceptance.store import PointStore
from pytest_sskj.bench.metrics import compute_metrics
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.history.db import ResultsDB
from pytest_sskj.history.export import export_run
from pytest_sskj.history.importer import import_run
from pytest_sskj.records import METRIC_FIELDS, new_row
from pytest_sskj.subsystems import build_registry
from pytest_sskj.report.plugin import regenerate
from pytest_sskj.report.results import ResultsWriter
from pytest_sskj.rundir import atomic_write_json
from pytest_sskj.slo import parse_slo

run, recs_json = Path(sys.argv[1]), json.loads(sys.argv[2])
out = {}
try:
    parse_slo("p999_ttft_ms<5000")
except ValueError as exc:
    out["uncomputed_refused"] = str(exc)
gates = build_registry().parsers["slo"]("max_ttft_ms<5000")
settings = {"engine": "embedded", "backends": ["marlin"], "isl": 8, "osl": 4, "slo": ["max_ttft_ms<5000"]}
atomic_write_json(run / "manifest.json", {"run_id": "r", "status": "finished", "settings": settings})
m = compute_metrics([RequestRecord(**d) for d in recs_json])
row = new_row(run_id="r", test_id="t[marlin-c4-r1]", engine="embedded", backend="marlin", chunk=256,
              concurrency=4, repeat=1, isl=8, osl=4, requests=4, point_id="p1", kind="serve", spec_key="k")
row.update({k: v for k, v in m.items() if k in METRIC_FIELDS}, status="passed")
store = PointStore(run)
store.complete(row, gates)
store.write("p1", row, {})
writer = ResultsWriter(run)
writer.add_row(row)
from pytest_sskj.acceptance.search import judge  # the SLO verdict in the shape acceptance/plugin.py records
ok, results = judge(gates, row, osl=4)
gate_dicts = [{"metric": r.gate.metric, "op": r.gate.op, "threshold": r.gate.threshold, "value": r.value,
               "passed": r.passed, "repeat": 1} for r in results]
writer.add_verdict({"kind": "slo", "id": "marlin-c4", "passed": ok, "backend": "marlin", "chunk": 256,
                    "concurrency": 4, "gates": gate_dicts, "message": "; ".join(r.sentence() for r in results)})
regenerate(run, plots=False, baseline="marlin", slo=("max_ttft_ms<5000",))
export_run(run)
db = ResultsDB(f"sqlite:///{run.parent / 'db.sqlite'}")
import_run(db, run)
out.update(
    computed=m.get("max_ttft_ms"),
    row_slo=row["slo_met"],
    results_csv=(run / "results.csv").read_text().splitlines()[0].split(","),
    medians_csv=(run / "medians.csv").read_text().splitlines()[0].split(","),
    medians_json=json.loads((run / "medians.json").read_text())["points"][0].get("max_ttft_ms"),
    summary="max_ttft_ms" in (run / "summary.md").read_text(),
    export=json.loads((run / "export" / "adaptive_points.jsonl").read_text().splitlines()[0])["metrics"].get(
        "max_ttft_ms"
    ),
    db=db.points_of(["r"])[0]["metrics"].get("max_ttft_ms"),
)
print(json.dumps(out))
"""


def _add_metric_in_one_place(pkg: Path) -> None:
    """What a newcomer writes: the registry entry (plus an uncomputed one) and the computation."""
    voc = pkg / "vocabulary.py"
    anchor = '    add("max_itl_ms", "ms", "largest inter-token latency", "lower", "ITL max")\n'
    entry = (
        '    add("max_ttft_ms", "ms", "largest time to first token", "lower", "TTFT max")\n'
        '    add("p999_ttft_ms", "ms", "99.9th percentile of TTFT", "lower", "TTFT P99.9", computed=False)\n'
    )
    text = voc.read_text()
    assert anchor in text, "the registry's max_itl_ms entry moved: update the anchor of this test"
    voc.write_text(text.replace(anchor, anchor + entry))
    met = pkg / "bench" / "metrics.py"
    anchor = '    "max_itl_ms": lambda r: max(r.samples["itl"]) if r.samples["itl"] else None,\n'
    text = met.read_text()
    assert anchor in text, "bench/metrics.py's max_itl_ms computation moved: update the anchor of this test"
    met.write_text(text.replace(anchor, anchor + '    "max_ttft_ms": lambda r: max(r.samples["ttft"]),\n'))


def test_a_metric_added_in_one_place_reaches_rows_medians_summary_export_and_the_database(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(Path(pytest_sskj.__file__).parent, copy / "pytest_sskj", ignore=shutil.ignore_patterns("*.pyc"))
    _add_metric_in_one_place(copy / "pytest_sskj")
    run = tmp_path / "reports" / "r"
    run.mkdir(parents=True)
    recs = json.dumps([r.to_dict() for r in _records()])
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(run), recs, str(copy)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"the pipeline with an added metric failed:\n{proc.stderr[-4000:]}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["computed"] == pytest.approx(400.0), f"max TTFT of 100..400 ms expected, got {got['computed']}"
    assert got["row_slo"] == {"max_ttft_ms<5000": True}, f"the SLO on the added metric was not judged: {got}"
    assert "max_ttft_ms" in got["results_csv"] and "max_ttft_ms" in got["medians_csv"], got
    assert got["medians_json"] == pytest.approx(400.0) and got["summary"], got
    assert got["export"] == pytest.approx(400.0) and got["db"] == pytest.approx(400.0), got
    refused = got.get("uncomputed_refused", "")
    assert "the bench does not compute it" in refused and "max_ttft_ms" in refused and "hint" in refused, (
        f"an SLO on a registered but uncomputed metric must be refused, naming what is accepted; got {refused!r}"
    )
    assert "max_ttft_ms" not in METRIC_FIELDS, "the copy's registry must not leak into this process"


def test_sskj_slo_on_an_uncomputed_metric_is_a_usage_error_before_anything_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_x="def test_x():\n    raise AssertionError('collected and run despite a bad --sskj-slo')\n"
    )
    res = pytester.runpytest_subprocess("--sskj-slo", "p999_ttft_ms<5000", "-p", "no:cacheprovider")
    err = res.stderr.str()
    assert res.ret == 4, f"expected exit 4 (usage error), got {res.ret}:\n{err}"
    assert "p999_ttft_ms" in err and "known metrics" in err and "p99_ttft_ms" in err, err
    assert "collected and run" not in res.stdout.str()
