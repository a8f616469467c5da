"""The point's telemetry figure: what each panel shows for server-only, GPU-only and mixed telemetry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.telemetry.plot import plot_point
from unit.report.figure_facts import capture_figures, figure_facts

GEN = "sglang:generation_tokens_total"


def _write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n", encoding="utf-8")
    return path


def _metrics(t: float, tokens: float | None) -> dict[str, Any]:
    return {"t": t, "source": "metrics", "values": {} if tokens is None else {GEN: tokens}}


def _gpu(t: float, node: str, *gpus: dict[str, Any]) -> dict[str, Any]:
    return {"t": t, "source": "gpu", "node": node, "gpus": list(gpus)}


def test_nothing_to_draw_returns_none_and_writes_nothing(tmp_path: Path) -> None:
    empty = _write(tmp_path / "a" / "telemetry.jsonl", [])
    assert plot_point(empty, tmp_path / "a.png") is None
    one = _write(tmp_path / "b" / "telemetry.jsonl", [_metrics(1.0, 10.0), _metrics(2.0, None)])
    assert plot_point(one, tmp_path / "b.png") is None, "one counter sample gives no rate and there is no GPU"
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()


def test_server_rate_and_client_line_without_gpu_telemetry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figs = capture_figures(monkeypatch)
    recs = [_metrics(10.0, 0.0), _metrics(12.0, 200.0), _metrics(12.0, 250.0), _metrics(14.0, 600.0)]
    path = _write(tmp_path / "marlin-c8-r0" / "telemetry.jsonl", recs)
    out = plot_point(path, tmp_path / "png" / "t.png", client_tps=180.0)
    assert out == tmp_path / "png" / "t.png" and out.read_bytes()[:4] == b"\x89PNG"
    facts = figure_facts(figs[0])
    assert facts["suptitle"] == "marlin-c8-r0", "the default title is the point directory's name"
    top, power, clock = facts["axes"]
    assert [(ln["x"], ln["y"]) for ln in top["lines"][:1]] == [([1.0, 3.0], [100.0, 175.0])], top["lines"]
    assert top["legend"] == ["server /metrics generated tok/s", "client output_throughput 180.0"], top
    assert top["lines"][1]["y"] == [180.0, 180.0] and top["ylabel"] == "tok/s"
    assert power["lines"] == [] and power["texts"] == ["no GPU telemetry on this node"], power
    assert (power["ylabel"], clock["ylabel"], clock["xlabel"]) == ("power W", "SM clock MHz", "seconds into the point")


@pytest.mark.filterwarnings("ignore:No artists with labels found to put in legend")
def test_gpu_panels_one_line_per_node_gpu_skipping_missing_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figs = capture_figures(monkeypatch)
    recs = [
        _gpu(5.0, "n2", {"index": 0, "power_w": 300.0, "sm_clock_mhz": 1800}),
        _gpu(6.0, "n1", {"index": 1, "power_w": None, "sm_clock_mhz": 1700}, {"index": 0, "power_w": 250.0}),
        _gpu(7.0, "n2", {"index": 0, "power_w": 310.0, "sm_clock_mhz": 1750}),
        {"t": 8.0, "source": "gpu", "node": "n3", "unavailable": "NVML: no GPU"},
    ]
    path = _write(tmp_path / "p" / "telemetry.jsonl", recs)
    assert plot_point(path, tmp_path / "t.png", title="my point") is not None
    facts = figure_facts(figs[0])
    top, power, clock = facts["axes"]
    assert facts["suptitle"] == "my point"
    assert top["lines"] == [] and top["legend"] == [], "no counter, no client figure: an empty top panel"
    assert [(ln["label"], ln["x"], ln["y"]) for ln in power["lines"]] == [
        ("n1/gpu0", [1.0], [250.0]),
        ("n1/gpu1", [], []),
        ("n2/gpu0", [0.0, 2.0], [300.0, 310.0]),
    ]
    assert [(ln["label"], ln["x"], ln["y"]) for ln in clock["lines"]] == [
        ("n1/gpu0", [], []),
        ("n1/gpu1", [1.0], [1700.0]),
        ("n2/gpu0", [0.0, 2.0], [1800.0, 1750.0]),
    ]
    assert power["texts"] == [], "GPU telemetry was sampled"
