"""``summary.md``: the users' result tables, the A/B verdicts, SLO gates and concurrency searches.

The serving table is the one the users paste into their reports — ``Chunk | C | Backend | Input TPS |
TTFT P50 | TTFT P95 | TPOT P50 | TPOT P95 | E2E P95 | vs baseline`` (seed 004's PD decode figures are TPOT
P50/P95; TPOT is ``n/a`` at OSL 1, where it is undefined) — with the median over the passed repeats of each point, and a
"vs baseline" cell such as ``+9.75% TPS / −8.96% TTFT`` (candidate median over baseline median; TTFT is
P50).  Verdicts arrive as dicts through ``pytest_sskj_verdict``; every verdict has ``kind``,
``passed`` and ``message``; these keys are used when present:

- ``comparison``: ``baseline``, ``candidate`` (or ``backend``), ``chunk``, ``concurrency``;
- ``chunk_curve``: ``backend``, ``best_chunk``, ``expected_best_chunk``;
- ``search``: ``backend``, ``chunk``, ``mode``, ``metric``, ``threshold``, ``best_concurrency`` (or
  ``best``), ``floor``, ``steps`` (list of ``{concurrency, value or metrics, passed or slo_ok}``);
- ``slo``: ``backend``, ``chunk``, ``concurrency``, ``gates`` (list of ``{metric, op, threshold, value,
  passed}``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.records import METRIC_FIELDS
from pytest_sskj.vocabulary import COMPUTED

__all__ = [
    "MEDIANS_FIELDS",
    "MEDIANS_HEADER",
    "MEDIAN_METRICS",
    "PointSummary",
    "format_chunk",
    "format_delta",
    "format_ms",
    "medians_cells",
    "medians_records",
    "render_summary",
    "summarize_points",
    "write_medians",
]

MINUS = "\u2212"


@dataclass(frozen=True)
class PointSummary:
    """Medians over the passed repeats of one (chunk, concurrency, backend) point."""

    chunk: Any
    concurrency: Any
    backend: str
    repeats: int
    passed: int
    input_throughput: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tpot_p95_ms: float | None
    tpot_p50_ms: float | None = None
    e2e_p95_ms: float | None = None
    tps_vs_baseline_pct: float | None = None
    ttft_vs_baseline_pct: float | None = None
    is_baseline: bool = False
    slo_met: bool | None = None
    """Every passed repeat met every judged SLO gate (``False``: one missed; ``None``: nothing judged)."""
    medians: Mapping[str, float | None] = field(default_factory=dict)
    """The median over the passed repeats of every :data:`MEDIAN_METRICS` metric (registry names)."""

    @property
    def vs_baseline(self) -> str:
        if self.is_baseline:
            return "baseline"
        if self.tps_vs_baseline_pct is None and self.ttft_vs_baseline_pct is None:
            return "n/a"
        return f"{format_delta(self.tps_vs_baseline_pct)} TPS / {format_delta(self.ttft_vs_baseline_pct)} TTFT"


def format_delta(pct: float | None) -> str:
    """``+9.75%`` / ``−8.96%`` (a true minus sign), ``n/a`` when undefined."""
    if pct is None:
        return "n/a"
    sign = "+" if pct >= 0 else MINUS
    return f"{sign}{abs(pct):.2f}%"


def format_ms(ms: float | None) -> str:
    """Latency for people: ``48.86 s`` from 1 s up, ``812.3 ms`` below, ``n/a`` when undefined."""
    if ms is None:
        return "n/a"
    return f"{ms / 1000.0:.2f} s" if ms >= 1000.0 else f"{ms:.1f} ms"


def _format_tpot(ms: float | None) -> str:
    """TPOT as the users write it: ``63.20 ms`` (two decimals), ``n/a`` when undefined (OSL 1)."""
    return "n/a" if ms is None else f"{ms:.2f} ms"


def format_chunk(chunk: Any) -> str:
    """``4K`` for 4096, ``1536`` for sizes that are not whole K, ``-`` for no chunk (engine default)."""
    if chunk is None:
        return "-"
    try:
        n = int(chunk)
    except (TypeError, ValueError):
        return str(chunk)
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _median(values: Iterable[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(nums) if nums else None


def _pct(candidate: float | None, baseline: float | None) -> float | None:
    if candidate is None or baseline is None or baseline == 0:
        return None
    return (candidate / baseline - 1.0) * 100.0


def _sort_key(v: Any) -> tuple[int, float, str]:
    return (0, float(v), "") if isinstance(v, (int, float)) else (1, 0.0, str(v))


def _variant_suffix(rows: Sequence[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], str]:
    """``" [tp4dp2 1024->128]"`` for rows of a run with layouts or several shapes ("" otherwise): points of
    different layouts or shapes are never pooled, and a backend is compared only with the baseline of its own
    layout and shape."""
    shapes = {(r.get("isl"), r.get("osl")) for r in rows}

    def suffix(r: Mapping[str, Any]) -> str:
        parts = [str(r["layout"])] if r.get("layout") else []
        if len(shapes) > 1:
            parts.append(f"{r.get('isl')}->{r.get('osl')}")
        return f" [{' '.join(parts)}]" if parts else ""

    return suffix


def summarize_points(rows: Sequence[Mapping[str, Any]], baseline: str | None = None) -> list[PointSummary]:
    """One :class:`PointSummary` per (chunk, C, backend) of the serving rows (rows of ``kind`` ``search``
    are left out); ``baseline`` defaults to the first backend seen.  With layouts or several shapes the backend
    label carries them (``parallel [slots8 256->32]``)."""
    serve = [r for r in rows if r.get("kind", "serve") == "serve"]  # search steps have their own table
    groups, backends, suffixes = _group_points(serve)
    base = baseline if baseline in backends else (backends[0] if backends else None)
    by_label = {b + x: (b, x) for b in backends for x in suffixes}
    border = {b: i for i, b in enumerate(sorted(backends, key=lambda b: (b != base, backends.index(b))))}

    def order(label: str) -> tuple[int, int]:
        b, x = by_label[label]
        return (suffixes.index(x), border[b])

    raw = {key: _pooled(key, rs) for key, rs in groups.items()}
    out: list[PointSummary] = []
    for key in sorted(raw, key=lambda k: (order(k[2])[0], _sort_key(k[0]), _sort_key(k[1]), order(k[2])[1])):
        b, sfx = by_label[key[2]]
        if b == base:
            out.append(_replace(raw[key], is_baseline=True))
        else:
            ref = raw.get((key[0], key[1], f"{base}{sfx}")) if base is not None else None
            out.append(_against(raw[key], ref))
    return out


_PointKey = tuple[Any, Any, str]


def _group_points(
    serve: Sequence[Mapping[str, Any]],
) -> tuple[dict[_PointKey, list[Mapping[str, Any]]], list[str], list[str]]:
    """The rows per (chunk, C, backend label), and the backends and variant suffixes in the order first seen."""
    suffix_of = _variant_suffix(serve)
    groups: dict[_PointKey, list[Mapping[str, Any]]] = {}
    backends: list[str] = []
    suffixes: list[str] = []
    for r in serve:
        b, sfx = str(r.get("backend")), suffix_of(r)
        if b not in backends:
            backends.append(b)
        if sfx not in suffixes:
            suffixes.append(sfx)
        groups.setdefault((r.get("chunk"), r.get("concurrency"), b + sfx), []).append(r)
    return groups, backends, suffixes


def _pooled(key: _PointKey, rs: Sequence[Mapping[str, Any]]) -> PointSummary:
    """The medians over the passed repeats of one point."""
    ok = [r for r in rs if r.get("status") == "passed"]
    return PointSummary(
        chunk=key[0],
        concurrency=key[1],
        backend=key[2],
        repeats=len(rs),
        passed=len(ok),
        input_throughput=_median(r.get("input_throughput") for r in ok),
        ttft_p50_ms=_median(r.get("median_ttft_ms") for r in ok),
        ttft_p95_ms=_median(r.get("p95_ttft_ms") for r in ok),
        tpot_p95_ms=_median(r.get("p95_tpot_ms") for r in ok),
        tpot_p50_ms=_median(r.get("median_tpot_ms") for r in ok),
        e2e_p95_ms=_median(r.get("p95_e2e_latency_ms") for r in ok),
        slo_met=_all_met(ok),
        medians={m: _median(r.get(m) for r in ok) for m in MEDIAN_METRICS},
    )


def _against(p: PointSummary, ref: PointSummary | None) -> PointSummary:
    """``p`` with its throughput and TTFT relative to the baseline backend's point ``ref``."""
    return _replace(
        p,
        tps_vs_baseline_pct=_pct(p.input_throughput, ref.input_throughput if ref else None),
        ttft_vs_baseline_pct=_pct(p.ttft_p50_ms, ref.ttft_p50_ms if ref else None),
    )


def _all_met(rows: Sequence[Mapping[str, Any]]) -> bool | None:
    judged = [v for r in rows if isinstance(r.get("slo_met"), Mapping) for v in r["slo_met"].values() if v is not None]
    return all(judged) if judged else None


MEDIANS_HEADER = (
    "Chunk",
    "C",
    "Backend",
    "Input TPS",
    "TTFT P50",
    "TTFT P95",
    "TPOT P50",
    "TPOT P95",
    "E2E P95",
    "vs baseline",
)
"""The users' table: ``Chunk | C | Backend | Input TPS | TTFT P50 | TTFT P95 | TPOT P50 | TPOT P95 | E2E P95 |
vs baseline``."""
MEDIAN_METRICS = tuple(n for n in METRIC_FIELDS if n in COMPUTED)
"""The metrics ``medians.csv`` carries: every metric the bench computes (:mod:`pytest_sskj.vocabulary`)."""
MEDIANS_FIELDS = (
    "chunk",
    "concurrency",
    "backend",
    *MEDIAN_METRICS,
    "tps_vs_baseline_pct",
    "ttft_vs_baseline_pct",
    "is_baseline",
    "repeats",
    "passed",
    "slo_met",
)
"""Columns of ``medians.csv`` / ``medians.json`` (the same points as the table, unformatted; metric columns
under their registry names, the median over the passed repeats)."""


def medians_cells(p: PointSummary) -> tuple[str, ...]:
    """One point's cells of :data:`MEDIANS_HEADER` (the terminal and ``summary.md`` show these)."""
    tps = "n/a" if p.input_throughput is None else f"{p.input_throughput:.2f}"
    return (
        format_chunk(p.chunk),
        str(p.concurrency),
        p.backend,
        tps,
        format_ms(p.ttft_p50_ms),
        format_ms(p.ttft_p95_ms),
        _format_tpot(p.tpot_p50_ms),
        _format_tpot(p.tpot_p95_ms),
        format_ms(p.e2e_p95_ms),
        p.vs_baseline,
    )


def medians_records(points: Sequence[PointSummary]) -> list[dict[str, Any]]:
    """:data:`MEDIANS_FIELDS` of every point (numbers, ``None`` when undefined)."""
    return [{k: p.medians.get(k) if k in MEDIAN_METRICS else getattr(p, k) for k in MEDIANS_FIELDS} for p in points]


def write_medians(run_dir: Path, rows: Sequence[Mapping[str, Any]], baseline: str | None) -> list[Path]:
    """``medians.csv`` and ``medians.json`` of ``run_dir`` from ``rows``; returns their paths."""
    import csv
    import io

    from pytest_sskj.rundir import RunLayout, atomic_write_json, atomic_write_text

    layout = RunLayout(run_dir)
    recs = medians_records(summarize_points(rows, baseline))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=MEDIANS_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in recs)
    return [
        atomic_write_text(layout.medians_csv, buf.getvalue()),
        atomic_write_json(layout.medians_json, {"baseline": baseline, "points": recs}, indent=2),
    ]


def _replace(p: PointSummary, **kw: Any) -> PointSummary:
    from dataclasses import replace

    return replace(p, **kw)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(_cell(c) for c in r) + " |" for r in rows)
    return lines


def _verdict_word(v: Mapping[str, Any]) -> str:
    p = v.get("passed")
    word = "PASS" if p is True else "FAIL" if p is False else "n/a"
    if v.get("kind") in ("comparison", "baseline") and v.get("outcome"):  # better/worse/...; regression: baseline
        word += f" ({'A/A, ' if v.get('control') else ''}{v['outcome']})"
    return word


def _subject(v: Mapping[str, Any]) -> str:
    parts: list[str] = []
    if v.get("candidate") and v.get("baseline"):
        parts.append(f"{v['candidate']} vs {v['baseline']}")
    elif v.get("backend"):
        parts.append(str(v["backend"]))
    if v.get("chunk") is not None:
        parts.append(f"chunk {format_chunk(v['chunk'])}")
    if v.get("concurrency") is not None:
        parts.append(f"C={v['concurrency']}")
    if v.get("mode"):
        parts.append(str(v["mode"]))
    return ", ".join(parts) or str(v.get("test_id", ""))


def _num(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def _search_and_gate_lines(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    lines: list[str] = []
    searches = [v for v in verdicts if v.get("kind") == "search"]
    if searches:
        lines += ["", "## Concurrency search", ""]
        lines += _table(
            ["Backend", "Chunk", "Mode", "Best C", "Floor", "Steps"],
            (
                [
                    v.get("backend"),
                    format_chunk(v.get("chunk")),
                    v.get("mode", ""),
                    _num(v.get("best_concurrency", v.get("best"))),
                    _num(v.get("floor")),
                    ", ".join(
                        f"C={s.get('concurrency')} "
                        + (
                            "client-bound"
                            if s.get("client_bound")
                            else "ok"
                            if s.get("passed", s.get("slo_ok"))
                            else "MISS"
                        )
                        for s in v.get("steps") or []
                        if isinstance(s, Mapping)
                    ),
                ]
                for v in searches
            ),
        )
    gates = [(v, g) for v in verdicts if v.get("kind") == "slo" for g in v.get("gates") or [] if isinstance(g, Mapping)]
    if gates:
        lines += ["", "## SLO gates", ""]
        lines += _table(
            ["Subject", "Repeat", "Gate", "Measured", "Result"],
            (
                [
                    _subject(v),
                    _num(g.get("repeat")) if g.get("repeat") is not None else "-",
                    f"{g.get('metric')} {g.get('op', '<')} {_num(g.get('threshold'))}",
                    _num(g.get("value")),
                    _verdict_word(g),
                ]
                for v, g in gates
            ),
        )
    return lines


def _section_lines(verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Verdicts that bring their own table (the layout recommendation's ranking) and the output agreement."""
    lines: list[str] = []
    for v in verdicts:
        sec = v.get("section")
        if isinstance(sec, Mapping) and sec.get("header") and isinstance(sec.get("rows"), list):
            lines += ["", f"## {sec.get('title') or v.get('kind')}", "", v.get("message", ""), ""]
            lines += _table(list(sec["header"]), sec["rows"])
            if sec.get("plot"):
                lines += ["", f"![{sec.get('title') or v.get('kind')}]({sec['plot']})"]
    from pytest_sskj.acceptance.agreement import agreement_table

    agreement = agreement_table(verdicts)
    if agreement:
        lines += ["", "## Output agreement (exact token ids, fixed greedy probes)", "", *agreement]
    return lines


def _deployment_fact(dep: Mapping[str, Any]) -> str:
    """``pd: prefill 601..604 PP8xTP4xEP4 flashinfer_mxfp4 chunk 8192 | decode 605..608 PP1xTP32xEP32 marlin``."""
    parts = []
    for g in dep.get("groups") or []:
        if not isinstance(g, Mapping):
            continue
        nodes = list(g.get("nodes") or [])
        where = f"{nodes[0]}..{nodes[-1]} " if nodes else ""
        sizes = f"PP{g.get('pp')}xTP{g.get('tp')}xEP{g.get('ep')}" + (f"xDP{g['dp']}" if (g.get("dp") or 1) > 1 else "")
        chunk = f" chunk {g['chunk']}" if g.get("chunk") else ""
        parts.append(f"{g.get('name')} {where}{sizes} {g.get('backend') or 'engine default'}{chunk}")
    return f"{dep.get('kind')}: " + " | ".join(parts)


def _facts(m: Mapping[str, Any], settings: Mapping[str, Any]) -> list[tuple[str, Any]]:
    facts = [
        ("status", m.get("status")),
        ("engine", settings.get("engine")),
        ("model", settings.get("model_name") or settings.get("model_path")),
        ("platform", settings.get("platform")),
        ("started", m.get("start_iso")),
        ("ended", m.get("end_iso")),
    ]
    from pytest_sskj.twin.plugin import clock_note

    facts.append(("clock", clock_note(settings)))  # a twin run's absolute figures are in twin time
    dep = settings.get("deployment")
    if isinstance(dep, Mapping) and dep.get("groups"):
        facts.append(("deployment", _deployment_fact(dep)))
    elif settings.get("tp"):
        facts.append(
            ("parallel", f"TP{settings.get('tp')}/EP{settings.get('ep')}/DP{settings.get('dp')}/PP{settings.get('pp')}")
        )
    if settings.get("isl"):
        facts.append(
            (
                "shape",
                f"ISL {settings.get('isl')} / OSL {settings.get('osl')}, "
                f"{settings.get('requests')} requests x {settings.get('repeats')} repeats",
            )
        )
    return facts


_COUNTED = ("passed", "failed", "skipped", "error", "xfailed", "xpassed")


def _session_lines(m: Mapping[str, Any]) -> list[str]:
    """The session's test counts, why tests were deselected and the overhead line, as the terminal printed them
    (the manifest's ``counts`` and ``session``; nothing for a manifest that predates them)."""
    counts = m.get("counts") if isinstance(m.get("counts"), Mapping) else None
    session = m.get("session") if isinstance(m.get("session"), Mapping) else {}
    assert isinstance(session, Mapping)
    if counts is None and not session:
        return []
    out = ["", "## Session", ""]
    if counts is not None:
        shown = [
            f"{int(counts.get(k) or 0)} {k}" for k in _COUNTED if k in ("passed", "failed", "skipped") or counts.get(k)
        ]
        out.append(f"- tests: {', '.join(shown)}, {int(session.get('deselected') or 0)} deselected")
    out += [f"- {line}" for line in session.get("deselections") or ()]
    if session.get("overhead"):
        out.append(f"- {session['overhead']}")
    return out


def render_summary(
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]],
    *,
    manifest: Mapping[str, Any] | None = None,
    baseline: str | None = None,
    plots: Sequence[Path] = (),
    problems: Sequence[str] = (),
) -> str:
    """The Markdown text of ``summary.md``."""
    m = manifest or {}
    settings = m.get("settings") if isinstance(m.get("settings"), Mapping) else {}
    assert isinstance(settings, Mapping)
    if baseline is None and settings.get("backends"):
        baseline = str(next(iter(settings["backends"])))
    lines = _header_lines(m, settings, problems)
    lines += _points_lines(summarize_points(rows, baseline))
    lines += _failed_lines(rows)
    if verdicts:
        lines += ["", "## Verdicts", ""]
        lines += _table(
            ["Kind", "Subject", "Result", "Details"],
            ([v.get("kind", "?"), _subject(v), _verdict_word(v), v.get("message", "")] for v in verdicts),
        )
    from pytest_sskj.report.conclusions import conclusion_lines  # the run's computed conclusions (h1-twin)

    lines += conclusion_lines(rows, verdicts, settings)
    lines += _section_lines(verdicts)
    lines += _search_and_gate_lines(verdicts)
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}](plots/{p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def _header_lines(m: Mapping[str, Any], settings: Mapping[str, Any], problems: Sequence[str]) -> list[str]:
    """The title, the run's facts and session, and what was recovered from a damaged run."""
    lines = [f"# pytest-sskj run {m.get('run_id', '?')}", ""]
    lines += [f"- {k}: {v}" for k, v in _facts(m, settings) if v not in (None, "")]
    lines += _target_lines(m)
    lines += _session_lines(m)
    if problems:
        lines += ["", "> Recovered from a damaged or partial run:"] + [f"> - {p}" for p in problems]
    return lines


def _target_lines(m: Mapping[str, Any]) -> list[str]:
    """A ``--target-url`` run: what its labels were verified against (the manifest's ``target``,
    :mod:`pytest_sskj.identity.target`)."""
    t = m.get("target")
    if not isinstance(t, Mapping):
        return []
    verified = ", ".join(t.get("verified") or ()) or "none"
    out = [f"- target: {t.get('url')} (labels verified against the server: {verified})"]
    unverified = t.get("not_verified") or {}
    if unverified:
        out.append("- labels not verified: " + ", ".join(f"{k} ({why})" for k, why in unverified.items()))
    return out


def _points_lines(points: Sequence[PointSummary]) -> list[str]:
    lines = ["", "## Serving points (median of passed repeats)", ""]
    if not points:
        return [*lines, "No serving point finished."]
    return lines + _table(
        [*MEDIANS_HEADER, "Repeats passed"], ([*medians_cells(p), f"{p.passed}/{p.repeats}"] for p in points)
    )


def _failed_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The table of points whose status is neither passed nor unset, with their category and reasons."""
    failed = [r for r in rows if r.get("status") not in ("passed", None)]
    if not failed:
        return []
    table = _table(
        ["Backend", "Chunk", "C", "Repeat", "Status", "Reasons"],
        (
            [
                r.get("backend"),
                format_chunk(r.get("chunk")),
                r.get("concurrency"),
                r.get("repeat"),
                f"{r.get('status')} ({r['category']})" if r.get("category") else r.get("status"),
                "; ".join(map(str, r.get("reasons") or [])) or "-",
            ]
            for r in failed
        ),
    )
    return ["", "## Points that did not pass", "", *table]
