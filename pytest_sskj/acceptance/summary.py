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

__all__ = [
    "HEADER",
    "deselection_lines",
    "headline",
    "headline_lines",
    "overhead_line",
    "summary_lines",
    "table_lines",
    "verdict_lines",
]

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
        if kind in ("comparison", "baseline") and v.get("outcome"):  # the verdict's word, never shared
            kind += f" [{'A/A control, ' if v.get('control') else ''}{v['outcome']}]"
        out.append(f"{word} {kind}: {v.get('message', '')}")
    return out


_RELATION = {"better": ">", "worse": "<", "equivalent": "\u2248", "inconclusive": "vs"}


def _word(v: Mapping[str, Any]) -> str:
    return "PASS" if v.get("passed") is True else "FAIL" if v.get("passed") is False else "INFO"


def _where(v: Mapping[str, Any]) -> str:
    bits = [
        f"chunk {v['chunk']}" if v.get("chunk") not in (None, "") else "",
        f"C={v['concurrency']}" if v.get("concurrency") not in (None, "") else "",
    ]
    return " ".join(b for b in bits if b)


def _comparison_headline(v: Mapping[str, Any]) -> str:
    metrics = [m for m in v.get("metrics") or [] if isinstance(m, Mapping)]
    m = metrics[0] if metrics else {}
    outcome = str(v.get("outcome") or m.get("outcome") or "?")
    rel = _RELATION.get(outcome, "vs")
    what = f"{v.get('candidate')} {rel} {v.get('baseline')}"
    if isinstance(m.get("delta_pct"), (int, float)):
        what += f" by {m['delta_pct']:+.1f} % {m.get('label') or m.get('name') or ''}"
        if isinstance(m.get("ci_low_pct"), (int, float)) and isinstance(m.get("ci_high_pct"), (int, float)):
            what += f" (CI {m['ci_low_pct']:+.1f}..{m['ci_high_pct']:+.1f} %)"
    control = "A/A control, " if v.get("control") else ""
    return f"{_word(v)} {what} at {_where(v)} [{control}{outcome}]"


def _slo_headline(v: Mapping[str, Any]) -> str:
    worst: dict[str, tuple[float, str, float]] = {}
    gates = [g for g in v.get("gates") or [] if isinstance(g, Mapping) and isinstance(g.get("value"), (int, float))]
    for g in gates:
        name, value = str(g.get("metric")), float(g["value"])
        if name not in worst or (value > worst[name][0]) == (str(g.get("op")) in ("<", "<=")):
            worst[name] = (value, str(g.get("op")), float(g.get("threshold") or 0.0))
    repeats = len({g.get("repeat") for g in gates})
    parts = ", ".join(f"{n} {val:.1f} {op} {thr:g}" for n, (val, op, thr) in worst.items())
    return f"{_word(v)} SLO {v.get('backend')} at {_where(v)}: worst of {repeats} repeat(s) {parts}"


def _search_headline(v: Mapping[str, Any]) -> str:
    best = v.get("best_concurrency", v.get("best"))
    stop = f" ({v['stop_reason']})" if v.get("stop_reason") else ""
    return f"{_word(v)} search {v.get('backend')} at {_where(v)}: highest C meeting the SLO = {best}{stop}"


def headline(v: Mapping[str, Any], limit: int = 160) -> str:
    """One short line per verdict: ``PASS parallel > microbatch by +279.4 % input tps (CI +174.6..+424.1 %) at
    chunk 256 C=16 [better]``; the long evidence is :func:`verdict_lines` (written to the run directory)."""
    kind = str(v.get("kind"))
    try:
        if kind == "comparison":
            text = _comparison_headline(v)
        elif kind == "slo" and v.get("gates"):
            text = _slo_headline(v)
        elif kind == "search":
            text = _search_headline(v)
        else:
            text = f"{_word(v)} {kind}: {str(v.get('message', '')).splitlines()[0] if v.get('message') else ''}"
    except (TypeError, ValueError, KeyError):
        text = f"{_word(v)} {kind}: {v.get('message', '')}"
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def headline_lines(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The verdict headlines, failures first (then the order the verdicts were given)."""
    order = {"FAIL": 0, "PASS": 1, "INFO": 2}
    lines = [headline(v) for v in verdicts]
    return sorted(lines, key=lambda line: order.get(line.split(" ", 1)[0], 3))


def deselection_lines(not_applicable: Mapping[str, str], deselected: int) -> list[str]:
    """Why tests were deselected: the plugin's own (not applicable, grouped by reason) and the user's rest."""
    groups: dict[str, list[str]] = {}
    for nodeid, why in not_applicable.items():
        groups.setdefault(str(why), []).append(nodeid.rsplit("::", 1)[-1])
    out = [
        f"deselected {len(ids)}: {', '.join(ids[:3])}{' ...' if len(ids) > 3 else ''}: {why}"
        for why, ids in groups.items()
    ]
    rest = deselected - len(not_applicable)
    if rest > 0:
        out.append(f"deselected {rest} by the command line (-k, -m, --deselect) or the unit suite's slow marker")
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
    vl = headline_lines(verdicts)
    if vl:
        lines += ["", *vl]
    if lines and run_dir:
        lines += ["", f"results: {run_dir}"]
    return lines
