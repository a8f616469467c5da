"""The terminal summary of an acceptance run, in the users' table format.

``Chunk | C | Backend | Input TPS | TTFT P50/P95 | TPOT P50/P95 | E2E P95 | vs baseline`` with medians over the passed
repeats (the numbers come from :func:`pytest_sskj.report.summary.summarize_points`, the same ones
``summary.md`` shows), followed by one line per verdict (comparisons, chunk curves, SLO gates,
searches).  Pure text: the plugin writes the lines through the terminal reporter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_sskj.report.summary import MEDIANS_HEADER, medians_cells, summarize_points

__all__ = ["HEADER", "overhead_line", "summary_lines", "table_lines", "verdict_lines"]

HEADER = MEDIANS_HEADER


def table_lines(rows: Sequence[Mapping[str, Any]], baseline: str | None) -> list[str]:
    """The serving table as aligned text lines (header, rule, one line per chunk/C/backend)."""
    serve = [r for r in rows if r.get("kind", "serve") == "serve"]
    body: list[tuple[str, ...]] = []
    for p in summarize_points(serve, baseline):
        cells = medians_cells(p)
        if p.passed < p.repeats:
            cells = (*cells[:-1], cells[-1] + f" ({p.passed}/{p.repeats} repeats passed)")
        body.append(cells)
    if not body:
        return []
    widths = [max(len(HEADER[i]), *(len(b[i]) for b in body)) for i in range(len(HEADER))]
    right = {1, *range(3, len(HEADER) - 1)}  # C and the figures

    def fmt(cells: Sequence[str]) -> str:
        return " | ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [fmt(HEADER), "-+-".join("-" * w for w in widths), *(fmt(b).rstrip() for b in body)]


def verdict_lines(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """``PASS comparison: parallel vs serial: +812.04 % input TPS (95 % CI …), …`` per verdict."""
    out = []
    for v in verdicts:
        word = "PASS" if v.get("passed") is True else "FAIL" if v.get("passed") is False else "INFO"
        kind = str(v.get("kind", "?"))
        if kind == "comparison" and v.get("outcome"):
            kind += f" [{'A/A control, ' if v.get('control') else ''}{v['outcome']}]"
        out.append(f"{word} {kind}: {v.get('message', '')}")
    return out


def overhead_line(rows: Sequence[Mapping[str, Any]], starts: Mapping[str, int] | None, wall_s: float) -> str:
    """Where the session's time went: server starts vs the server runs the session needed, and the session's
    wall time vs the benchmark time its points measured (the bench ``duration`` of every row, search steps
    included).

    A server run is one (configuration, repeat): every repeat is its own server run (the unit of replication),
    and the points of one repeat share it.  So the starts must equal the distinct (``spec_key``, ``repeat``)
    pairs the measured rows name; a start beyond them (a restart between points of one repeat) is redundant and
    counted as such.
    """
    bench_s = sum(float(d) for r in rows if isinstance(d := r.get("duration"), (int, float)) and d > 0)
    parts = []
    if starts is not None:
        total = sum(starts.values())
        runs = {(str(r["spec_key"]), r.get("repeat")) for r in rows if r.get("spec_key") and r.get("duration")}
        if runs:
            configs = len({k for k, _ in runs})
            redundant = max(0, total - len(runs))
            parts.append(
                f"{total} server start(s) for {len(runs)} server run(s) ({configs} distinct server configuration(s)"
                f" x their repeats; every repeat is its own server run), {redundant} redundant"
            )
        else:
            parts.append(f"{total} server start(s) for {len(starts)} distinct server configuration(s)")
    ratio = f"{wall_s / bench_s:.2f}x" if bench_s > 0 else "n/a"
    parts.append(f"session wall {wall_s:.1f} s vs {bench_s:.1f} s measured benchmark time ({ratio})")
    return "overhead: " + "; ".join(parts)


def summary_lines(
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]],
    *,
    baseline: str | None,
    run_dir: str | None = None,
) -> list[str]:
    """Everything the terminal summary prints; ``[]`` when nothing ran."""
    lines = table_lines(rows, baseline)
    not_passed = [r for r in rows if r.get("status") != "passed"]
    if not_passed:
        lines += ["", "points that did not pass:"]
        for r in not_passed:
            reasons = "; ".join(str(x).splitlines()[0] for x in r.get("reasons") or []) or str(r.get("status"))
            lines.append(f"  {r.get('point_id', r.get('test_id'))}: {r.get('status')}: {reasons}")
    allowed = [str(r.get("point_id")) for r in rows if r.get("status") == "passed" and r.get("client_bound")]
    if allowed:
        lines += ["", f"client-bound points passed only by --sskj-allow-client-bound: {', '.join(allowed)}"]
    from pytest_sskj.acceptance.agreement import agreement_table

    agreement = agreement_table(verdicts)
    if agreement:
        lines += ["", "output agreement (exact token ids, fixed greedy probes):", *agreement]
    vl = verdict_lines(verdicts)
    if vl:
        lines += ["", *vl]
    if lines and run_dir:
        lines += ["", f"results: {run_dir}"]
    return lines
