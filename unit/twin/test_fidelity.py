"""The generated model files of the twin's fidelity checks (issue 47): valid files in the documented format,
drawn within the documented bounds, whose rates differ between concurrencies, chunks and backends in either
direction, and the per-cell error table the benchmark prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.twin.engine import ServingEngine
from pytest_sskj.twin.fidelity import BOUNDS, CellError, error_table, generate_model, write_model
from pytest_sskj.twin.model import Cell, TwinModel, calibrate, load_model, percentile


def test_a_generated_file_loads_as_a_model_and_is_the_same_for_the_same_seed(tmp_path: Path) -> None:
    a = load_model(write_model(generate_model(3), tmp_path / "a.toml"))
    b = load_model(write_model(generate_model(3), tmp_path / "b.toml"))
    c = load_model(write_model(generate_model(4), tmp_path / "c.toml"))
    assert a.cells == b.cells and a.time_scale == b.time_scale, "the same seed must give the same file"
    assert a.cells != c.cells, "another seed must give another file"
    keys = {(x.backend, x.chunk, x.concurrency) for x in a.cells}
    assert len(keys) == len(a.cells) == 8, f"expected 2 backends x 2 chunks x 2 concurrencies, saw {sorted(keys)}"
    for cell in a.cells:
        assert cell.input_tps and cell.ttft_p50_s and cell.ttft_p95_s, cell
        assert cell.ttft_p95_s >= cell.ttft_p50_s, f"P95 below P50 in {cell.key}"
        # a closed loop cannot serve faster than the drawn engine's fastest rate
        assert cell.input_tps <= BOUNDS["rate_tps"][1] * BOUNDS["factor"][1] ** 3 * 1.03, cell
    fastest = max(x.isl / (x.input_tps or 1.0) for x in a.cells)
    assert 0.01 < a.time_scale * fastest < 1.0, (
        f"a request's work should take tenths of a wall second, scale {a.time_scale}"
    )


def _rate_ratio(cells: tuple[Cell, ...], *, by: str) -> list[float]:
    """Input TPS of the larger value of ``by`` over the smaller, everything else equal."""
    out = []
    for x in cells:
        for y in cells:
            same = all(getattr(x, k) == getattr(y, k) for k in ("backend", "chunk", "concurrency") if k != by)
            if same and getattr(y, by) > getattr(x, by):
                assert x.input_tps and y.input_tps
                out.append(y.input_tps / x.input_tps)
    return out


def test_generated_rates_differ_between_concurrencies_chunks_and_backends_in_either_direction(tmp_path: Path) -> None:
    models = [load_model(write_model(generate_model(s), tmp_path / f"g{s}.toml")) for s in range(1, 21)]
    for by in ("concurrency", "chunk"):
        ratios = [r for m in models for r in _rate_ratio(m.cells, by=by)]
        assert min(ratios) < 0.97 and max(ratios) > 1.03, (
            f"{by}: expected gains and losses, saw {min(ratios):.3f}..{max(ratios):.3f}"
        )
    backend_ratios = []
    for m in models:
        for x in m.cells:
            if x.backend == "marlin":
                y = next(
                    c for c in m.cells if c.backend != "marlin" and (c.chunk, c.concurrency) == (x.chunk, x.concurrency)
                )
                assert x.input_tps and y.input_tps
                backend_ratios.append(y.input_tps / x.input_tps)
    assert min(backend_ratios) < 0.95 and max(backend_ratios) > 1.05, (
        "the candidate must be better in some cells, worse in others"
    )


def test_the_error_table_states_each_figure_and_the_worst_cell() -> None:
    cell = Cell(backend="marlin", chunk=4096, concurrency=8, input_tps=100.0, ttft_p50_s=2.0, ttft_p95_s=2.2)
    row = CellError(cell, {"input_tps": 102.0}, {"input_tps": 2.0, "ttft_p50_s": -0.5, "ttft_p95_s": None,
                                                 "tpot_p50_ms": None, "tpot_p95_ms": None})  # fmt: skip
    table = error_table("m", [row]).splitlines()
    assert table[0].startswith("| model | backend | chunk | C | input_tps | ttft_p50_s")
    assert table[2] == "| m | marlin | 4096 | 8 | +2.00 % | -0.50 % | - | - | - | 2.00 % |", table[2]


@pytest.mark.parametrize(
    "seed", [3, 14, 18, 28]
)  # ramp-heavy: 24 requests at C=16, where the fixed point alone missed 8-26 %
def test_the_calibration_reproduces_every_generated_cell_in_its_own_closed_loop(tmp_path: Path, seed: int) -> None:
    model = load_model(write_model(generate_model(seed), tmp_path / "g.toml"))
    for cell in model.cells:
        fit = calibrate(cell, model.default_tpot_ms).fit
        assert cell.input_tps and cell.ttft_p50_s and cell.ttft_p95_s
        want = {"input_tps": cell.input_tps, "ttft_p50_s": cell.ttft_p50_s, "ttft_p95_s": cell.ttft_p95_s}
        if cell.osl > 1:  # the decode steps too, and the closed loop's slots held through the decode
            assert cell.tpot_p50_ms and cell.tpot_p95_ms, cell
            want.update(tpot_p50_ms=cell.tpot_p50_ms, tpot_p95_ms=cell.tpot_p95_ms)
        off = {k: round(100 * (fit[k] / v - 1), 3) for k, v in want.items() if abs(fit[k] / v - 1) > 0.002}
        assert not off, f"{cell.key}: expected the fit within 0.2 % of every figure, off by (%) {off}"


def test_a_repeats_decode_steps_are_the_quantiles_whose_p50_and_p95_are_the_cells() -> None:
    """Seed 004's decode cell (TPOT P50/P95 63.20/66.55 ms at C=8): the engine gives a repeat's requests decode steps
    whose percentiles, as the bench computes them over the repeat, are the cell's -- no random draw."""
    cell = Cell(role="decode", tp=32, ep=32, pp=1, backend="marlin", concurrency=8, osl=512, requests=8,
                tpot_p50_ms=63.20, tpot_p95_ms=66.55)  # fmt: skip
    model = TwinModel("m", None, 1.0, 1, (cell,), 60.0)
    engine = ServingEngine(model, [cell], chunk=None, role="decode", label="test")
    try:
        engine.new_repeat()
        steps = []
        for i in range(8):
            req = engine.submit_decode([i + 1] * 16, 512)
            steps.append(req.tpot_s * 1000.0)
    finally:
        engine.stop()
    got = (percentile(steps, 50.0), percentile(steps, 95.0))
    assert abs(got[0] / 63.20 - 1) < 1e-6 and abs(got[1] / 66.55 - 1) < 1e-4, f"expected 63.20/66.55 ms, got {got}"
    assert len(set(steps)) == 8, f"expected eight different steps (the spread's quantiles), got {sorted(steps)}"
