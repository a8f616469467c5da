"""The twin's performance model: the shipped file is seed 000's table and seed 004's PD figures, and the engine
parameters fitted from each cell reproduce that cell's observables when its own workload is simulated."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twin_seeds import SEED000

from pytest_sskj.twin.model import ModelError, calibrate, load_model, lognormal_quantiles, simulate
from pytest_sskj.twin.plugin import DATA, model_path, shipped_models


def test_the_shipped_model_holds_all_twelve_rows_of_seed_000_and_the_pd_figures_of_seed_004() -> None:
    m = load_model(DATA / "kimi3-pro6000.toml")
    serve = {
        (c.chunk, c.concurrency, c.backend): (c.input_tps, c.ttft_p50_s, c.ttft_p95_s)
        for c in m.cells
        if c.role == "serve"
    }
    assert serve == SEED000, "the model's serve cells are exactly seed 000's table"
    pd = load_model(DATA / "kimi3-pro6000-pd.toml")
    pre = [c for c in pd.cells if c.role == "prefill"]
    dec = [c for c in pd.cells if c.role == "decode"]
    assert [(c.pp, c.tp, c.ep, c.backend, c.chunk, c.input_tps, c.ttft_p50_s, c.ttft_p95_s) for c in pre] == [
        (8, 4, 4, "flashinfer_mxfp4", 8192, 6364.31, 20.555, 21.345)
    ]
    assert [(c.pp, c.tp, c.ep, c.backend, c.tpot_p50_ms, c.tpot_p95_ms) for c in dec] == [
        (1, 32, 32, "marlin", 63.20, 66.55)
    ]


@pytest.mark.parametrize("name", ["kimi3-pro6000", "kimi3-pro6000-worse", "kimi3-pro6000-equal", "kimi3-pro6000-pd"])
def test_calibrated_engines_reproduce_every_cell_under_its_own_workload(name: str) -> None:
    m = load_model(DATA / f"{name}.toml")
    for c in m.cells:
        if c.ttft_p50_s is None:
            continue
        p = calibrate(c, m.default_tpot_ms)
        sim = simulate(
            c.requests, c.concurrency, c.isl, p.prefill_tps, p.wake_s, lognormal_quantiles(c.requests, p.service_cv)
        )
        assert c.input_tps is not None and c.ttft_p95_s is not None
        for got, want, what in (
            (sim["input_tps"], c.input_tps, "input TPS"),
            (sim["ttft_p50_s"], c.ttft_p50_s, "P50"),
            (sim["ttft_p95_s"], c.ttft_p95_s, "P95"),
        ):
            assert abs(got / want - 1) < 0.006, f"{c.source}: {what} simulated {got:.2f}, the cell says {want}"


def test_the_worse_model_swaps_the_backends_and_the_equal_model_gives_both_marlins_figures() -> None:
    base = {
        (c.chunk, c.concurrency, c.backend): c.input_tps
        for c in load_model(DATA / "kimi3-pro6000.toml").cells
        if c.role == "serve"
    }
    for name, other in (
        ("worse", lambda b: "marlin" if b != "marlin" else "flashinfer_mxfp4"),
        ("equal", lambda b: "marlin"),
    ):
        for c in load_model(DATA / f"kimi3-pro6000-{name}.toml").cells:
            if c.role == "serve":
                assert c.input_tps == base[(c.chunk, c.concurrency, other(c.backend))], (name, c)


def test_a_model_file_with_an_unknown_key_or_no_figures_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "m.toml"
    bad.write_text('time_scale = 0.1\n[[cells]]\ntp = 8\nbackend = "marlin"\ninput_tsp = 3.0\n')
    with pytest.raises(ModelError, match=r"unknown key\(s\) input_tsp; known: role, tp"):
        load_model(bad)
    bad.write_text("time_scale = 0.1\n[[cells]]\ntp = 8\n")
    with pytest.raises(ModelError, match="a cell needs input_tps"):
        load_model(bad)


def test_the_model_option_takes_a_file_or_a_shipped_name_and_refuses_anything_else(tmp_path: Path) -> None:
    assert {"kimi3-pro6000", "kimi3-pro6000-worse", "kimi3-pro6000-equal", "dsv4-layouts"} <= set(shipped_models())
    f = tmp_path / "mine.toml"
    f.write_text((DATA / "kimi3-pro6000.toml").read_text())
    assert model_path(str(f)) == f.resolve()
    assert model_path(None) == DATA / "kimi3-pro6000.toml"
    with pytest.raises(ValueError, match="neither a file nor a shipped model; shipped: dsv4-layouts"):
        model_path("kimi3-pro9000")


def _with_fault(tmp_path: Path, fault: str) -> Path:
    p = tmp_path / "m.toml"
    p.write_text((DATA / "kimi3-pro6000-pd.toml").read_text() + "\n[[faults]]\n" + fault)
    return p


def test_a_models_faults_are_read_and_a_bad_fault_is_refused_naming_the_key(tmp_path: Path) -> None:
    m = load_model(
        _with_fault(tmp_path, 'role = "decode"\nafter_requests = 2\nlines = ["Traceback (most recent call last):"]\n')
    )
    (f,) = m.faults
    assert (f.role, f.node_rank, f.after_requests, f.lines) == ("decode", 0, 2, ("Traceback (most recent call last):",))
    assert f.applies("decode", 0) and not f.applies("prefill", 0) and not f.applies("decode", 1)
    with pytest.raises(ModelError, match=r"fault 1: unknown key\(s\) line; known: role, node_rank"):
        load_model(_with_fault(tmp_path, 'line = "x"\n'))
    with pytest.raises(ModelError, match="lines must be a non-empty list"):
        load_model(_with_fault(tmp_path, "lines = []\n"))
    with pytest.raises(ModelError, match="role must be serve, prefill or decode"):
        load_model(_with_fault(tmp_path, 'role = "router"\nlines = ["x"]\n'))


def test_a_rank_logs_its_own_lines_on_stdout_and_its_faults_once_due(capsys: pytest.CaptureFixture[str]) -> None:
    """What a rank writes goes to its stdout (which the launcher copies into the run's log): a rank whose
    ``log`` wrote nothing would leave its log copy with the launcher's lines only (issue 22's defect)."""
    from pytest_sskj.twin import rank
    from pytest_sskj.twin.model import Fault

    rank.log("The server is fired up and ready to roll!")
    faults = rank._Faults(
        (Fault("decode", 0, 2, ("Traceback (most recent call last):", "CUDA out of memory.")),), "decode", 0
    )
    faults.on_request()
    assert "Traceback" not in capsys.readouterr().out.split("ready to roll!")[1]
    faults.on_request()
    faults.on_request()
    out = capsys.readouterr().out
    assert out.count("Traceback (most recent call last):") == 1 and "CUDA out of memory." in out, out


_GOOD_CELL = '[[cells]]\nbackend = "marlin"\nchunk = 4096\nconcurrency = 8\ninput_tps = 1000.0\nttft_p50_s = 1.0\n'


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("name = 'x'\n", "needs [[cells]] tables"),
        ("cells = [1, 2]\n", "cell 1: expected a [[cells]] table, got int"),
        (_GOOD_CELL.replace("1000.0", "-5.0"), "input_tps must be a positive float, got -5.0"),
        (_GOOD_CELL.replace("1000.0", "nan"), "input_tps must be a positive float, got nan"),
        (_GOOD_CELL.replace('"marlin"', "7"), "backend must be a string, got 7"),
        (_GOOD_CELL.replace("4096", '"4K"'), "chunk must be a positive int, got '4K'"),
        ("workload = 3\n" + _GOOD_CELL, "[workload] must be a table, got int"),
        ("[workload]\nisl = 16384\nbogus = 1\n" + _GOOD_CELL, r"[workload] has unknown key(s) bogus"),
        ("[defaults]\ntpot_ms = 'fast'\n" + _GOOD_CELL, "tpot_ms must be a positive float, got 'fast'"),
        ("[defaults]\ncolour = 1\n" + _GOOD_CELL, "[defaults] has unknown key(s) colour"),
        ("seed = 'x'\n" + _GOOD_CELL, "seed must be an integer >= 0, got 'x'"),
        ("time_scale = 0\n" + _GOOD_CELL, "time_scale must be a positive float, got 0"),
        ("cells = [\n", "cannot be read"),
    ],
    ids=["no-cells", "cells-not-tables", "negative-rate", "nan-rate", "backend-number", "chunk-string",
         "workload-scalar", "workload-unknown", "tpot-string", "defaults-unknown", "seed-string", "zero-scale",
         "not-toml"],
)  # fmt: skip
def test_a_malformed_model_file_is_refused_naming_what_is_wrong(tmp_path: Path, text: str, shown: str) -> None:
    """Issue 40: these were accepted or raised a traceback (a scalar [workload], a string tpot_ms, a cell that is
    no table)."""
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(ModelError) as info:
        load_model(path)
    assert shown in str(info.value) and str(path) in str(info.value), str(info.value)


@settings(max_examples=200, deadline=None)
@given(
    doc=st.dictionaries(
        st.sampled_from(["name", "time_scale", "seed", "workload", "defaults", "cells", "faults", "other"]),
        st.recursive(
            st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=6),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["backend", "chunk", "input_tps", "isl", "tpot_ms", "x"]), inner, max_size=4
                )
            ),
            max_leaves=10,
        ),
        max_size=6,
    )
)
def test_any_json_document_as_a_model_loads_or_is_refused_with_model_error(doc: dict[str, object]) -> None:
    """No document makes the loader raise anything but :class:`ModelError` (no traceback for a user's file)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.json"
        path.write_text(json.dumps(doc))
        try:
            load_model(path)
        except ModelError:
            pass
