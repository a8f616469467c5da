"""The run's conclusions are computed from its rows and verdicts: fed seed 000's own table they state seed 000's
结果结论; fed other numbers they state other conclusions (nothing is written in)."""

from __future__ import annotations

from typing import Any

from twin_seeds import SEED000

from pytest_sskj.report.conclusions import conclusion_lines, conclusions

SETTINGS = {
    "backends": ["marlin", "flashinfer_mxfp4"],
    "chunks": [4096, 8192, 16384],
    "concurrencies": [8, 16],
    "ep": 4,
}


def _rows(table: dict[tuple[int, int, str], tuple[float, float, float]]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "serve",
            "status": "passed",
            "backend": b,
            "chunk": ch,
            "concurrency": c,
            "repeat": r,
            "input_throughput": tps * (1 + 0.001 * (r - 2)),
            "median_ttft_ms": p50 * 1000,
        }
        for (ch, c, b), (tps, p50, _) in table.items()
        for r in (1, 2, 3)
    ]


def _verdicts(outcome: str) -> list[dict[str, Any]]:
    return [
        {
            "kind": "comparison",
            "baseline": "marlin",
            "candidate": "flashinfer_mxfp4",
            "chunk": ch,
            "concurrency": c,
            "outcome": outcome,
            "id": f"{ch}-{c}",
        }
        for ch in (4096, 8192, 16384)
        for c in (8, 16)
    ]


def test_seed_000s_table_gives_seed_000s_conclusions() -> None:
    c = conclusions(_rows(SEED000), _verdicts("better"), SETTINGS)
    text = "\n".join(c.statements)
    assert c.ab_all_better is True
    assert "flashinfer_mxfp4 is better than marlin on all 6 compared shapes" in text, text
    assert "chunk 8K: flashinfer_mxfp4 vs marlin C=8: +11.00 % Input TPS / −9.93 % TTFT P50" in text, text
    assert "chunk 4K: flashinfer_mxfp4 vs marlin C=8: +9.75 % Input TPS / −8.96 % TTFT P50" in text, text
    assert "chunk 16K: flashinfer_mxfp4 vs marlin C=8: +7.63 % Input TPS / −7.04 % TTFT P50" in text, text
    for b in ("marlin", "flashinfer_mxfp4"):
        assert (
            f"{b}: chunk 8K is best at every concurrency (C=8: 8K, C=16: 8K), inside the grid (4K < 8K < 16K)" in text
        )
    for b, span in (("marlin", "−0.07 % … −0.00 %"), ("flashinfer_mxfp4", "−0.01 % … +0.11 %")):  # per backend
        assert f"{b} at every chunk: C 8 -> 16: input TPS {span} (95 % CI " in text, text
    assert text.count("so C=8 is already near prefill-throughput saturation") == 2, text
    assert c.recommendation == "EP4 + flashinfer_mxfp4 + chunk 8192"
    lines = conclusion_lines(_rows(SEED000), _verdicts("better"), SETTINGS)
    assert lines[1] == "## Conclusions (computed from this run)" and lines[-1].startswith(
        "9. recommendation: EP4 + flashinfer_mxfp4 + chunk 8192"
    )


def test_a_worse_candidate_is_stated_and_the_baseline_recommended() -> None:
    c = conclusions(_rows(SEED000), _verdicts("worse"), SETTINGS)
    assert c.ab_all_better is False
    assert "NOT better than marlin on all 6 shapes: better on 0/6; 4K/C8 worse" in c.statements[0], c.statements[0]
    assert c.recommendation == "EP4 + marlin + chunk 8192"


def test_a_missing_verdict_is_never_counted_as_better_and_an_edge_optimum_is_said_to_be_one() -> None:
    table = {k: v for k, v in SEED000.items() if k[0] != 16384}  # 4K and 8K only: 8K is the grid's largest
    verdicts = [v for v in _verdicts("better") if v["chunk"] != 16384][:3]
    c = conclusions(_rows(table), verdicts, {**SETTINGS, "chunks": [4096, 8192]})
    assert c.ab_all_better is False and "8K/C16 not measured" in c.statements[0], c.statements[0]
    assert any("at the grid's edge (the largest chunk tried)" in s for s in c.statements), c.statements


def test_no_ab_no_ab_claim() -> None:
    c = conclusions(_rows({k: v for k, v in SEED000.items() if k[2] == "marlin"}), [], SETTINGS)
    assert c.ab_all_better is None and c.recommendation is None
    assert not any("better" in s for s in c.statements), c.statements


def test_saturation_is_judged_per_backend_and_a_backend_that_loses_at_the_higher_c_is_named() -> None:
    """The issue's model (issue 46, item 2): the baseline flat from C=8 to C=16, the candidate +8 % over it at C=8 and
    -5 % at C=16 (it loses 12 % of its own throughput): pooled, the two read "-6.56 % ... +2.69 %, C=8 does not
    saturate"; per backend, one is saturated and the other loses, each with its CI."""
    table = {
        (ch, c, b): (tps, p50, 0.0)
        for ch in (4096, 8192)
        for (c, b, tps, p50) in (
            (8, "marlin", 100.0, 1.0),
            (16, "marlin", 100.2, 2.0),
            (8, "flashinfer_mxfp4", 108.0, 0.9),
            (16, "flashinfer_mxfp4", 95.0, 2.1),
        )
    }
    text = "\n".join(conclusions(_rows(table), [], {**SETTINGS, "chunks": [4096, 8192]}).statements)
    assert "marlin at every chunk: C 8 -> 16: input TPS +0.20 % (95 % CI " in text, text
    assert "so C=8 is already near prefill-throughput saturation" in text, text
    assert "flashinfer_mxfp4 at every chunk: C 8 -> 16: input TPS −12.04 % (95 % CI −12." in text, text
    assert "flashinfer_mxfp4 loses throughput from C=8 to C=16: C=16 is past its best" in text, text
    assert "does not saturate" not in text, text


def test_a_backend_whose_chunks_disagree_is_stated_per_chunk() -> None:
    table = {
        (4096, 8, "marlin"): (100.0, 1.0, 0.0),
        (4096, 16, "marlin"): (120.0, 1.5, 0.0),  # gains 20 %
        (8192, 8, "marlin"): (100.0, 1.0, 0.0),
        (8192, 16, "marlin"): (100.1, 2.0, 0.0),  # saturated
    }
    settings = {**SETTINGS, "backends": ["marlin"], "chunks": [4096, 8192]}
    text = "\n".join(conclusions(_rows(table), [], settings).statements)
    assert "marlin at chunk 4K: C 8 -> 16: input TPS +20.00 % (95 % CI " in text, text
    assert "marlin gains throughput from C=8 to C=16: C=8 does not saturate it" in text, text
    assert "marlin at chunk 8K: C 8 -> 16: input TPS +0.10 % (95 % CI " in text, text


def test_a_winner_that_depends_on_the_concurrency_is_recommended_per_concurrency() -> None:
    """The candidate better at C=8 and worse at C=16 (issue 46, item 3): one winner would be wrong either way."""
    verdicts = [{**v, "outcome": "better" if v["concurrency"] == 8 else "worse"} for v in _verdicts("better")]
    c = conclusions(_rows(SEED000), verdicts, SETTINGS)
    assert c.recommendation == (
        "C=8: EP4 + flashinfer_mxfp4 + chunk 8192 (flashinfer_mxfp4 better at C=8); "
        "C=16: EP4 + marlin + chunk 8192 (flashinfer_mxfp4 worse at C=16)"
    ), c.recommendation
    assert c.statements[-1].endswith("(the winner depends on the concurrency)"), c.statements[-1]
    one = conclusions(_rows(SEED000), [{**v, "outcome": "equivalent"} for v in verdicts], SETTINGS)
    assert one.recommendation == "EP4 + marlin + chunk 8192", "no candidate win anywhere: one recommendation"
