"""The run's conclusions, computed from its results: what the users' "结果结论" states, never written in.

:func:`conclusions` reads the run's result rows (one per repeat) and its verdicts and states, as seed 000's
README does for the MoE-backend A/B:

1. the A/B outcome over every compared shape (chunk x concurrency): the candidate better on all N shapes
   (from the verdicts' outcomes, the repeat-level statistics of ``docs/verdicts.md``), or on how many it is
   not, naming them;
2. the size of each gain, per chunk: the median-of-repeats change of the run's first two compared metrics
   (``--sskj-compare-metrics``; by default input TPS and TTFT P50, the users' table wording
   ``+11.00 % Input TPS / −9.92 % TTFT``) at each concurrency; statements 1 and 2 for every candidate;
3. per backend the best chunk (highest median input TPS) at each concurrency, and the grid-edge check: a best
   chunk strictly inside the chunk grid beats both neighbours, a best chunk at the grid's edge is said to
   be one (the optimum may lie beyond it);
4. the saturation statement per backend (per chunk where the chunks differ): from the lowest to the next
   concurrency, the input TPS change with its repeat-level 95 % CI and the TTFT P50 ratio; throughput within
   +-3 % while TTFT grows by at least 80 % of the concurrency ratio means the lower concurrency already
   saturates prefill; a CI wholly above (below) zero with a change beyond 3 % says the backend gains (loses)
   throughput at the higher concurrency;
5. the recommendation: ``EP<ep> + <backend> + chunk <chunk>`` -- the candidate when it is better on every
   shape (else the baseline), at its best chunk; when the winner differs between concurrencies, one
   recommendation per concurrency and the statement that the winner depends on it.

Nothing is claimed that the run did not measure: with fewer than two backends, chunks or concurrencies the
statement that needs them is left out; a shape without a decided verdict is never counted as better.
:func:`conclusion_lines` renders them (Markdown list items, also fine on a terminal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conclusions", "conclusion_lines", "conclusions"]

_SERVE_KINDS = (None, "", "serve", "point")
_SAT_TPS_PCT = 3.0
_SAT_TTFT_SHARE = 0.8


@dataclass(frozen=True)
class Conclusions:
    """What the run shows; every field computed from its rows and verdicts."""

    statements: tuple[str, ...] = ()
    recommendation: str | None = None
    ab_all_better: bool | None = None
    """``True``: the candidate is better on every compared shape; ``False``: not; ``None``: no A/B."""
    outcomes: dict[str, str] = field(default_factory=dict)
    best_chunks: dict[str, dict[int, int]] = field(default_factory=dict)
    """backend -> concurrency -> best chunk."""


def _median(vals: Sequence[float]) -> float | None:
    xs = sorted(vals)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2.0


def _pct(new: float | None, old: float | None) -> float | None:
    return None if new is None or not old else (new / old - 1.0) * 100.0


def _fmt(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{'+' if p >= 0 else '−'}{abs(p):.2f} %"


def _chunk(c: Any) -> str:
    c = int(c)
    return f"{c // 1024}K" if c % 1024 == 0 else str(c)


_DEFAULT_METRICS = ("input_throughput", "median_ttft_ms")


def _medians(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, int], tuple[float | None, ...]]:
    """(backend, chunk, C) -> median input TPS and TTFT P50 (ms) over the passed repeats."""
    return _metric_medians(rows, _DEFAULT_METRICS)


def _compared(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The run's compared metrics, primary and the next one (``--sskj-compare-metrics``; the users' prefill pair)."""
    names = tuple(str(m) for m in settings.get("compare_metrics") or ())
    return names[:2] or _DEFAULT_METRICS


def _metric_medians(
    rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]
) -> dict[tuple[str, int, int], tuple[float | None, ...]]:
    """(backend, chunk, C) -> the median over the passed repeats of each of ``metrics``."""
    acc: dict[tuple[str, int, int], list[list[float]]] = {}
    for r in rows:
        if r.get("status") != "passed" or r.get("chunk") in (None, "") or r.get("kind") not in _SERVE_KINDS:
            continue
        key = (str(r.get("backend")), int(r["chunk"]), int(r.get("concurrency") or 0))
        vals = acc.setdefault(key, [[] for _ in metrics])
        for i, m in enumerate(metrics):
            if isinstance(r.get(m), (int, float)):
                vals[i].append(float(r[m]))
    return {k: tuple(_median(v) for v in vs) for k, vs in acc.items()}


def _label(name: str) -> str:
    from pytest_sskj.vocabulary import METRICS

    m = METRICS.get(name)
    return m.label if m is not None else name


def _ab_one(
    comparisons: Sequence[Mapping[str, Any]],
    med: Mapping[tuple[str, int, int], tuple[float | None, ...]],
    planned: Sequence[str],
    metrics: Sequence[str],
) -> tuple[list[str], bool]:
    base, cand = str(comparisons[0].get("baseline")), str(comparisons[0].get("candidate"))
    outcomes = {k: "not measured" for k in planned}
    outcomes.update({f"{_chunk(v['chunk'])}/C{v['concurrency']}": str(v.get("outcome")) for v in comparisons})
    better = [k for k, o in outcomes.items() if o == "better"]
    n = len(outcomes)
    if len(better) == n:
        head = f"{cand} is better than {base} on all {n} compared shapes (chunk x C)"
    else:
        others = ", ".join(f"{k} {o}" for k, o in outcomes.items() if o != "better")
        head = f"{cand} is NOT better than {base} on all {n} shapes: better on {len(better)}/{n}; {others}"
    lines = [head]
    none = (None,) * len(metrics)
    for chunk in sorted({int(v["chunk"]) for v in comparisons}):
        parts = []
        for v in sorted((v for v in comparisons if int(v["chunk"]) == chunk), key=lambda v: int(v["concurrency"])):
            c = int(v["concurrency"])
            bm, cm = med.get((base, chunk, c), none), med.get((cand, chunk, c), none)
            deltas = " / ".join(f"{_fmt(_pct(x, y))} {_label(m)}" for m, x, y in zip(metrics, cm, bm, strict=True))
            parts.append(f"C={c}: {deltas} ({v.get('outcome')})")
        lines.append(f"chunk {_chunk(chunk)}: {cand} vs {base} " + "; ".join(parts))
    return lines, len(better) == n


def _ab(
    comparisons: Sequence[Mapping[str, Any]],
    rows: Sequence[Mapping[str, Any]],
    planned: Sequence[str],
    settings: Mapping[str, Any],
) -> tuple[list[str], bool]:
    """Statements 1 and 2 for every candidate (in the order of the comparisons), in the run's compared metrics;
    ``True`` when every candidate is better on every shape."""
    metrics = _compared(settings)
    med = _metric_medians(rows, metrics)
    lines: list[str] = []
    all_better = True
    for cand in dict.fromkeys(str(v.get("candidate")) for v in comparisons):
        one, better = _ab_one([v for v in comparisons if str(v.get("candidate")) == cand], med, planned, metrics)
        lines += one
        all_better = all_better and better
    return lines, all_better


def _best_chunks(med: Mapping[tuple[str, int, int], Any], backends: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    lines: list[str] = []
    best: dict[str, dict[int, int]] = {}
    grid = sorted({k[1] for k in med})
    if len(grid) < 2:
        return lines, best
    for b in backends:
        per_c: dict[int, int] = {}
        for c in sorted({k[2] for k in med if k[0] == b}):
            pts = {ch: med[(b, ch, c)][0] for ch in grid if (b, ch, c) in med and med[(b, ch, c)][0]}
            if len(pts) >= 2:
                per_c[c] = max(pts, key=lambda ch: pts[ch])
        if not per_c:
            continue
        best[b] = per_c
        chunks = sorted(set(per_c.values()))
        where = ", ".join(f"C={c}: {_chunk(ch)}" for c, ch in per_c.items())
        if len(chunks) == 1:
            ch = chunks[0]
            if grid[0] < ch < grid[-1]:
                edge = (
                    f"inside the grid ({' < '.join(_chunk(g) for g in grid)}): it beats both smaller and larger chunks"
                )
            else:
                side = "smallest" if ch == grid[0] else "largest"
                edge = f"at the grid's edge (the {side} chunk tried): the optimum may lie beyond it, extend --chunk"
            lines.append(f"{b}: chunk {_chunk(ch)} is best at every concurrency ({where}), {edge}")
        else:
            lines.append(f"{b}: the best chunk depends on the concurrency ({where})")
    return lines, best


def _repeat_tps(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, int], list[float]]:
    """(backend, chunk, C) -> input TPS of each passed repeat (the unit of replication of every CI here)."""
    acc: dict[tuple[str, int, int], list[float]] = {}
    for r in rows:
        if r.get("status") != "passed" or r.get("chunk") in (None, "") or r.get("kind") not in _SERVE_KINDS:
            continue
        if isinstance(r.get("input_throughput"), (int, float)):
            key = (str(r.get("backend")), int(r["chunk"]), int(r.get("concurrency") or 0))
            acc.setdefault(key, []).append(float(r["input_throughput"]))
    return acc


@dataclass(frozen=True)
class _Step:
    """One backend and chunk from the lowest concurrency to the next: input TPS change (median of repeats), its
    repeat-level 95 % CI (``None`` below two repeats a side) and the TTFT P50 ratio."""

    chunk: int
    tps_pct: float
    ci: tuple[float, float] | None
    ttft_ratio: float

    def judged(self, lo: int, hi: int) -> str:
        """``saturated``, ``gains``, ``loses`` or ``undecided`` (the CI does not settle it)."""
        flat = abs(self.tps_pct) <= _SAT_TPS_PCT and (self.ci is None or max(map(abs, self.ci)) <= 2 * _SAT_TPS_PCT)
        if flat and self.ttft_ratio >= _SAT_TTFT_SHARE * hi / lo:
            return "saturated"
        if self.ci is not None and self.ci[0] > 0 and self.tps_pct > _SAT_TPS_PCT:
            return "gains"
        if self.ci is not None and self.ci[1] < 0 and self.tps_pct < -_SAT_TPS_PCT:
            return "loses"
        return "undecided"


def _steps(
    med: Mapping[tuple[str, int, int], Any], reps: Mapping[tuple[str, int, int], list[float]], b: str, lo: int, hi: int
) -> list[_Step]:
    from pytest_sskj.acceptance.compare import repeat_interval

    out = []
    for ch in sorted({k[1] for k in med if k[0] == b}):
        a, z = med.get((b, ch, lo)), med.get((b, ch, hi))
        if a and z and a[0] and z[0] and a[1] and z[1]:
            iv = repeat_interval(reps.get((b, ch, lo), []), reps.get((b, ch, hi), []), confidence=0.95)
            out.append(_Step(ch, _pct(z[0], a[0]) or 0.0, None if iv is None else (iv[1], iv[2]), z[1] / a[1]))
    return out


_JUDGED = {
    "saturated": "throughput is basically unchanged while TTFT grows with C, so C={lo} is already near "
    "prefill-throughput saturation",
    "gains": "{b} gains throughput from C={lo} to C={hi}: C={lo} does not saturate it",
    "loses": "{b} loses throughput from C={lo} to C={hi}: C={hi} is past its best",
    "undecided": "the throughput change is not settled by these repeats (its CI reaches past ±3 %)",
}


def _span(low: str, high: str) -> str:
    return low if low == high else f"{low} … {high}"


def _step_text(b: str, steps: Sequence[_Step], lo: int, hi: int, where: str) -> str:
    tps = [x.tps_pct for x in steps]
    span = _span(_fmt(min(tps)), _fmt(max(tps)))
    cis = [x.ci for x in steps if x.ci is not None]
    ci = (
        f" (95 % CI {_fmt(min(c[0] for c in cis))} … {_fmt(max(c[1] for c in cis))})" if cis else " (no CI: one repeat)"
    )
    ratios = [x.ttft_ratio for x in steps]
    ttft = _span(f"x{min(ratios):.2f}", f"x{max(ratios):.2f}")
    judged = _JUDGED[steps[0].judged(lo, hi)].format(b=b, lo=lo, hi=hi)
    return f"{b}{where}: C {lo} -> {hi}: input TPS {span}{ci}, TTFT P50 {ttft}: {judged}"


def _saturation(
    med: Mapping[tuple[str, int, int], Any], reps: Mapping[tuple[str, int, int], list[float]], backends: Sequence[str]
) -> list[str]:
    """Per backend, from the lowest concurrency to the next: saturated, gains or loses throughput (repeat-level CI);
    per chunk where the chunks differ."""
    cs = sorted({k[2] for k in med})
    if len(cs) < 2:
        return []
    lo, hi = cs[0], cs[1]
    lines = []
    for b in backends:
        steps = _steps(med, reps, b, lo, hi)
        if not steps:
            continue
        kinds = {x.judged(lo, hi) for x in steps}
        if len(kinds) == 1:
            where = " at every chunk" if len(steps) > 1 else f" at chunk {_chunk(steps[0].chunk)}"
            lines.append(_step_text(b, steps, lo, hi, where))
        else:
            lines += [_step_text(b, [x], lo, hi, f" at chunk {_chunk(x.chunk)}") for x in steps]
    return lines


def _shape(r: Mapping[str, Any]) -> tuple[Any, Any]:
    return r.get("isl"), r.get("osl")


def conclusions(
    rows: Sequence[Mapping[str, Any]], verdicts: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
) -> Conclusions:
    """The conclusions of a run (see the module docstring), per shape (ISL -> OSL) when it has several; empty
    when it has no serving points."""
    shapes = sorted({_shape(r) for r in rows}, key=lambda t: (int(t[0] or 0), int(t[1] or 0)))
    if len(shapes) <= 1:
        return _one_shape(rows, verdicts, settings)
    parts = []
    for shp in shapes:
        sub = _one_shape(
            [r for r in rows if _shape(r) == shp], [v for v in verdicts if _shape(v) in (shp, (None, None))], settings
        )
        parts.append((f"[{shp[0]}->{shp[1]}] ", sub))
    first = parts[0][1]
    return Conclusions(
        tuple(tag + s for tag, c in parts for s in c.statements),
        first.recommendation,
        first.ab_all_better,
        {k: v for _, c in parts for k, v in c.outcomes.items()},
        first.best_chunks,
    )


def _one_shape(
    rows: Sequence[Mapping[str, Any]], verdicts: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
) -> Conclusions:
    med = _medians(rows)
    if not med:
        return Conclusions()
    backends = [str(b) for b in settings.get("backends") or sorted({k[0] for k in med})]
    comps = [v for v in verdicts if v.get("kind") == "comparison" and not v.get("control")]
    statements: list[str] = []
    all_better: bool | None = None
    if comps:
        planned = [
            f"{_chunk(ch)}/C{c}" for ch in settings.get("chunks") or () for c in settings.get("concurrencies") or ()
        ]
        ab, all_better = _ab(comps, rows, planned, settings)
        statements += ab
    chunk_lines, best = _best_chunks(med, backends)
    statements += chunk_lines
    statements += _saturation(med, _repeat_tps(rows), backends)
    rec = None
    if comps:
        rec, why = _recommendation(comps, med, best, all_better, settings.get("ep"))
        statements.append(f"recommendation: {rec} ({why})")
    outcomes = {str(v.get("id")): str(v.get("outcome")) for v in comps}
    return Conclusions(tuple(statements), rec, all_better, outcomes, best)


def _pick(comps: Sequence[Mapping[str, Any]], base: str, cand: str) -> tuple[str, str]:
    """The backend to deploy over ``comps`` (one concurrency's, or all) and why: the candidate only when it is better
    on every one of them, else the baseline."""
    outcomes = [v.get("outcome") for v in comps]
    if all(o == "better" for o in outcomes):
        return cand, "better"
    return base, "worse" if all(o == "worse" for o in outcomes) else "not better"


def _deploy(pick: str, ep: Any, best: Mapping[str, Any], med: Mapping[tuple[str, int, int], Any], c: int | None) -> str:
    per_c = best.get(pick, {})
    chunks = sorted({ch for cc, ch in per_c.items() if c is None or cc == c}) or sorted(
        {k[1] for k in med if k[0] == pick and (c is None or k[2] == c)}
    )
    chunk_txt = f" + chunk {chunks[0]}" if len(chunks) == 1 else ""
    return f"{'EP' + str(ep) + ' + ' if ep else ''}{pick}{chunk_txt}"


def _recommendation(
    comps: Sequence[Mapping[str, Any]],
    med: Mapping[tuple[str, int, int], Any],
    best: Mapping[str, Any],
    all_better: bool | None,
    ep: Any,
) -> tuple[str, str]:
    """What to deploy (``EP4 + flashinfer_mxfp4 + chunk 8192``) and why: the candidate only when it is better on every
    shape, with its best chunk when one chunk is best everywhere.  When the winner depends on the concurrency (the
    candidate better at C=8 and worse at C=16, say), one recommendation per concurrency, saying that it differs."""
    base, cand = str(comps[0].get("baseline")), str(comps[0].get("candidate"))
    by_c: dict[int, list[Mapping[str, Any]]] = {}
    for v in comps:
        by_c.setdefault(int(v.get("concurrency") or 0), []).append(v)
    picks = {c: _pick(vs, base, cand) for c, vs in sorted(by_c.items())}
    if len({p for p, _ in picks.values()}) > 1:
        parts = [f"C={c}: {_deploy(p, ep, best, med, c)} ({cand} {why} at C={c})" for c, (p, why) in picks.items()]
        return "; ".join(parts), "the winner depends on the concurrency"
    pick, why = _pick(comps, base, cand)
    return _deploy(pick, ep, best, med, None), f"{cand} {why} on every shape"


def conclusion_lines(
    rows: Sequence[Mapping[str, Any]], verdicts: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
) -> list[str]:
    """``["", "## Conclusions (computed from this run)", "", "1. ...", ...]``; ``[]`` when there are none."""
    c = conclusions(rows, verdicts, settings)
    if not c.statements:
        return []
    return ["", "## Conclusions (computed from this run)", "", *(f"{i}. {s}" for i, s in enumerate(c.statements, 1))]
