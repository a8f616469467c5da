"""The baseline regression gate (``--sskj-baseline REF``): every serving configuration of this run judged
against the matching configuration of an earlier run, repeat by repeat.

The unit of replication is the repeat (one server run): for each headline metric the median over this
run's passed repeats is compared with the median over the baseline's.  The tolerance is the baseline's
own repeat spread (the largest relative distance of a baseline repeat from its median) plus
``--sskj-regression-margin``.  Outcomes:

- ``regression``: the median is worse by more than the tolerance *and* even this run's best repeat is
  worse than the baseline's worst (the repeat ranges do not overlap) — ``TTFT P95 regressed 12.3 % since
  v1.3 …``; a waiver in ``release.toml`` that has not expired turns it into ``waived``;
- ``inconclusive``: worse by more than the tolerance but the ranges overlap (more repeats decide);
- ``passed``: no metric worse by more than its tolerance;
- ``no_match``: the baseline has no passed repeat of this configuration (never a silent pass);
- client-bound repeats make it ``inconclusive``: this run's for a regression (the client may have caused
  the drop), the baseline's for a pass (its figures only bound the server's).

A baseline of another shape (ISL/OSL) or environment (engine, model, platform, parallel layout, endpoint)
is refused before anything runs (:func:`refusals`).
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj import names
from pytest_sskj.history.db import ResultsDB
from pytest_sskj.history.importer import read_manifest, release_marks
from pytest_sskj.report.results import read_results
from pytest_sskj.vocabulary import COMPARISON_METRICS, METRICS

__all__ = [
    "HEADLINE",
    "Baseline",
    "BaselineError",
    "GateOutcome",
    "Waiver",
    "engine_differences",
    "env_facts",
    "incomparable",
    "judge_config",
    "load_waivers",
    "read_toml",
    "refusals",
    "resolve_baseline",
]

HEADLINE: tuple[tuple[str, str, bool], ...] = tuple(
    (METRICS[m].label, m, METRICS[m].higher_is_better) for m in COMPARISON_METRICS
)
"""(label in the users' tables, row column, higher is better), from the metric vocabulary."""

_COMPARABLE = ("engine", "model", "platform", "layout", "deployment", "endpoint")


class BaselineError(ValueError):
    """The baseline reference cannot be used (unknown, or not comparable); the message says why."""


@dataclass(frozen=True)
class Baseline:
    """The run a gate or ``compare`` judges against."""

    ref: str
    run_id: str
    label: str
    facts: Mapping[str, Any]
    rows: tuple[Mapping[str, Any], ...]
    source: str
    samples: Mapping[str, Mapping[str, Sequence[float]]] = field(default_factory=dict)
    """Per-request samples (ms) by point id, for the repeat-level comparison of ``compare``."""

    @property
    def named(self) -> str:
        """``release v1.3 (run 20261130-…)`` or ``run 20261130-…``."""
        return self.label if self.label == f"run {self.run_id}" else f"{self.label} (run {self.run_id})"


def env_facts(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What makes two runs comparable, from a manifest: engine (+ version), model, platform, layout, endpoint,
    shape."""
    s = manifest.get("settings") if isinstance(manifest.get("settings"), Mapping) else {}
    assert isinstance(s, Mapping)
    eng = manifest.get("engine") if isinstance(manifest.get("engine"), Mapping) else {}
    assert isinstance(eng, Mapping)
    pkgs = manifest.get("packages") if isinstance(manifest.get("packages"), Mapping) else {}
    assert isinstance(pkgs, Mapping)
    engine = s.get("engine")
    return {
        "engine": engine,
        "engine_version": eng.get("version") or eng.get(str(engine)) or _package_version(str(engine), pkgs),
        "model": s.get("model_name") or s.get("model_path"),
        "platform": s.get("platform"),
        "layout": "/".join(f"{k.upper()}{s.get(k)}" for k in ("tp", "ep", "dp", "pp")),
        "deployment": _deployment(s.get("deployment")),
        "endpoint": s.get("endpoint"),
        "shape": f"ISL {s.get('isl')} / OSL {s.get('osl')}",
        "engine_facts": dict(eng),
    }


def _deployment(d: Any) -> str:
    """``aggregated`` for one server spec, else the topology's kind and its groups' roles and sizes: a PD run and
    an aggregated one are compared only explicitly (``compare --allow-incomparable``), never as a baseline."""
    if not isinstance(d, Mapping):
        return "aggregated"
    groups = [g for g in d.get("groups") or [] if isinstance(g, Mapping)]
    parts = [f"{g.get('role')} TP{g.get('tp')}/EP{g.get('ep')}/DP{g.get('dp')}/PP{g.get('pp')}" for g in groups]
    return f"{d.get('kind')}: " + ", ".join(parts)


def engine_differences(base: Baseline, current: Mapping[str, Any]) -> list[str]:
    """Recorded engine facts (versions, commits, driver, GPU) on which ``current`` (an :func:`env_facts`) and
    the baseline differ (:func:`pytest_sskj.acceptance.comparability.fact_differences`); ``[]`` when either
    side recorded none yet."""
    from pytest_sskj.acceptance.comparability import fact_differences

    a, b = base.facts.get("engine_facts") or {}, current.get("engine_facts") or {}
    return [f"engine fact {d}" for d in fact_differences(a, b)] if a and b else []


def _package_version(engine: str, packages: Mapping[str, Any]) -> Any:
    """The recorded version of the engine's first distribution (the registry names them), else ``None``."""
    from pytest_sskj.engines import UnknownEngine, get_engine

    try:
        dists = get_engine(engine).versions.distributions
    except UnknownEngine:
        return None
    return next((packages[d] for d in dists if packages.get(d)), None)


def incomparable(current: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    """Why two runs' environments cannot be compared (``[]``: comparable)."""

    # facts recorded before the deployment fact existed describe aggregated runs
    def fact(d: Mapping[str, Any], k: str) -> Any:
        return d.get(k, "aggregated" if k == "deployment" else None)

    return [
        f"{k} {fact(base, k)!r} in the baseline, {fact(current, k)!r} here"
        for k in _COMPARABLE
        if fact(base, k) != fact(current, k)
    ]


def refusals(current: Mapping[str, Any], baseline: Baseline) -> list[str]:
    """Reasons to refuse ``baseline`` for this run: another shape, or an incomparable environment."""
    out = []
    if baseline.facts.get("shape") != current.get("shape"):
        out.append(f"the baseline ran {baseline.facts.get('shape')}, this run {current.get('shape')}")
    return out + incomparable(current, baseline.facts)


def _run_from_files(ref: str, run_id: str, label: str, reports_dir: Path) -> Baseline | None:
    try:  # a run id (given, or from a mark or the database) names a folder of the reports dir, never more
        d = names.inside(reports_dir, run_id, what="run id")
    except names.NameRefused:
        return None
    if not (d / "manifest.json").is_file():
        return None
    from pytest_sskj.acceptance.store import PointStore

    rows = tuple(read_results(d).rows)
    store = PointStore(d)
    samples = {str(r.get("point_id")): (store.read(str(r.get("point_id"))) or ({}, {}))[1] for r in rows}
    return Baseline(ref, run_id, label, env_facts(read_manifest(d)), rows, f"run directory {d}", samples)


def _run_from_db(ref: str, run_id: str, label: str, db: ResultsDB | None) -> Baseline | None:
    if db is None:
        return None
    runs = {r["run_id"]: r for r in db.runs()}
    if run_id not in runs:
        return None
    pts = db.points_of([run_id])
    rows = tuple(dict(p["row"]) for p in pts)
    samples = {str(p["point_id"]): dict(p["samples"] or {}) for p in pts}
    facts = env_facts(runs[run_id].get("manifest") or {})
    return Baseline(ref, run_id, label, facts, rows, f"database {db.display}", samples)


def resolve_baseline(ref: str, reports_dir: Path, db: ResultsDB | None, *, prefer_db: bool = False) -> Baseline:
    """``ref`` is a release tag, a run id or ``last-release``; the run directory is read when it is here,
    else the database.  Raises :class:`BaselineError` naming what exists."""
    marks = release_marks(reports_dir)
    tag = _last_release(marks, reports_dir, db) if ref == "last-release" else ref
    mark = next((m for m in marks if m["tag"] == tag), None)
    run_ids = [str(mark["figures_run"])] if mark else (db.tagged(tag) if db is not None else [])
    label = f"release {tag}" if run_ids else f"run {ref}"
    for rid in run_ids or [ref]:
        if prefer_db:
            found = _run_from_db(ref, rid, label, db) or _run_from_files(ref, rid, label, reports_dir)
        else:
            found = _run_from_files(ref, rid, label, reports_dir) or _run_from_db(ref, rid, label, db)
        if found is not None:
            return found
    raise _unknown_baseline(ref, reports_dir, db, marks)


def _last_release(marks: Sequence[Mapping[str, Any]], reports_dir: Path, db: ResultsDB | None) -> str:
    """The newest release tag: of the marks here, else the database's; :class:`BaselineError` when none."""
    tag = marks[-1]["tag"] if marks else (db.last_release() if db is not None else None) or ""
    if not tag:
        raise BaselineError(f"--sskj-baseline last-release: no release mark in {reports_dir / 'releases'}")
    return str(tag)


def _unknown_baseline(
    ref: str, reports_dir: Path, db: ResultsDB | None, marks: Sequence[Mapping[str, Any]]
) -> BaselineError:
    known_runs = sorted((p.name for p in reports_dir.glob("*") if (p / "manifest.json").is_file()), reverse=True)
    return BaselineError(
        f"--sskj-baseline {ref}: no release tag or run id {ref!r} in {reports_dir} "
        f"{'or the database ' if db is not None else ''}"
        f"(release tags: {', '.join(m['tag'] for m in marks) or 'none'}; latest runs: "
        f"{', '.join(known_runs[:5]) or 'none'})"
    )


@dataclass(frozen=True)
class Waiver:
    """``[[waiver]]`` in ``release.toml``: ``point`` (config id glob), ``metric`` (optional), ``reason``,
    ``expires`` (ISO date, required)."""

    point: str
    reason: str
    expires: _dt.date
    metric: str | None = None

    def covers(self, config_id: str, metric: str) -> bool:
        return fnmatch.fnmatchcase(config_id, self.point) and (self.metric is None or self.metric == metric)


def load_waivers(data: Mapping[str, Any], where: str = "release.toml") -> list[Waiver]:
    """The waivers of a parsed ``release.toml``; ``ValueError`` names a bad entry."""
    out = []
    for i, w in enumerate(data.get("waiver") or []):
        if not isinstance(w, Mapping) or not w.get("point") or not w.get("reason") or not w.get("expires"):
            raise ValueError(f"{where}: [[waiver]] #{i + 1} needs point, reason and expires (YYYY-MM-DD), got {w!r}")
        exp = w["expires"]
        try:
            day = exp if isinstance(exp, _dt.date) else _dt.date.fromisoformat(str(exp))
        except ValueError:
            raise ValueError(f"{where}: [[waiver]] #{i + 1} expires={exp!r} is not a date YYYY-MM-DD") from None
        out.append(Waiver(str(w["point"]), str(w["reason"]), day, str(w["metric"]) if w.get("metric") else None))
    return out


@dataclass
class GateOutcome:
    """The gate's judgement of one configuration."""

    status: str
    """``passed``, ``regression``, ``waived``, ``inconclusive`` or ``no_match``."""
    message: str
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def as_verdict(self, config_id: str, baseline: Baseline) -> dict[str, Any]:
        return {
            "kind": "baseline",
            "id": config_id,
            "passed": {"passed": True, "waived": True, "regression": False}.get(self.status),
            "outcome": self.status,
            "baseline_ref": baseline.ref,
            "baseline_run": baseline.run_id,
            "metrics": self.metrics,
            "message": self.message,
        }


def _nums(rows: Sequence[Mapping[str, Any]], col: str) -> list[float]:
    return [float(r[col]) for r in rows if isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool)]


def _median(vals: Sequence[float]) -> float:
    s = sorted(vals)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _metric(name: str, col: str, higher: bool, cur: list[float], base: list[float], margin: float) -> dict[str, Any]:
    bm, cm = _median(base), _median(cur)
    spread = max(abs(v / bm - 1.0) for v in base) * 100.0 if bm else 0.0
    worse = ((1.0 - cm / bm) if higher else (cm / bm - 1.0)) * 100.0 if bm else 0.0
    best_cur = max(cur) if higher else min(cur)
    worst_base = min(base) if higher else max(base)
    apart = best_cur < worst_base if higher else best_cur > worst_base
    tol = spread + margin
    status = "passed" if worse <= tol else ("regression" if apart else "inconclusive")
    return {
        "name": name,
        "metric": col,
        "baseline": bm,
        "current": cm,
        "worse_pct": worse,
        "spread_pct": spread,
        "tolerance_pct": tol,
        "repeats": [len(base), len(cur)],
        "status": status,
    }


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def _client_bound(rows: Sequence[Mapping[str, Any]], whose: str) -> str:
    """Why client-bound repeats void the claim: this run's void a regression (the client may have set the
    drop), the baseline's void a pass (its figures are only bounds on the server's)."""
    ids = [str(r.get("point_id") or "?") for r in rows if r.get("client_bound")]
    if not ids:
        return ""
    return (
        f"{whose} repeat(s) {', '.join(ids)} were client-bound (the client, not the server, set them), so the "
        "comparison cannot be trusted; run the client on a less loaded machine or lower --concurrency"
    )


def _sentence(m: Mapping[str, Any], label: str) -> str:
    verb = "regressed" if m["worse_pct"] > 0 else "improved"
    return (
        f"{m['name']} {verb} {abs(m['worse_pct']):.1f} % since {label} ({_fmt(m['baseline'])} -> {_fmt(m['current'])}, "
        f"median of {m['repeats'][0]} vs {m['repeats'][1]} repeats; tolerance {m['tolerance_pct']:.1f} % = baseline "
        f"repeat spread {m['spread_pct']:.1f} % + margin {m['tolerance_pct'] - m['spread_pct']:g} %)"
    )


def _matching(baseline: Baseline, config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The baseline's passed serving rows of ``config``'s backend, chunk and concurrency."""
    keys = ("backend", "chunk", "concurrency")
    want = tuple(str(config[k]) for k in keys)
    return [
        r
        for r in baseline.rows
        if r.get("status") == "passed"
        and r.get("kind", "serve") == "serve"
        and tuple(str(r.get(k)) for k in keys) == want
    ]


def _no_match(baseline: Baseline, cfg_id: str) -> GateOutcome:
    have = sorted({f"{r.get('backend')}-chunk{r.get('chunk')}-c{r.get('concurrency')}" for r in baseline.rows})
    return GateOutcome(
        "no_match",
        f"no matching point: {baseline.named} has no passed repeat of {cfg_id} "
        f"(it has: {', '.join(have) or 'no points'})",
    )


def _regression(
    text: str, bad: Sequence[Mapping[str, Any]], cfg_id: str, waivers: Sequence[Waiver], today: _dt.date
) -> tuple[str, str]:
    """``(status, message)`` of a regression: ``waived`` by an unexpired waiver covering every bad metric."""
    live = [w for w in waivers if all(w.covers(cfg_id, m["name"]) for m in bad)]
    valid = [w for w in live if w.expires >= today]
    if valid:
        return "waived", f"{text} — waived until {valid[0].expires}: {valid[0].reason}"
    return "regression", text + "".join(f" (waiver expired {w.expires}: {w.reason})" for w in live)


def judge_config(
    config: Mapping[str, Any],
    current: Sequence[Mapping[str, Any]],
    baseline: Baseline,
    *,
    margin_pct: float,
    waivers: Sequence[Waiver] = (),
    today: _dt.date | None = None,
) -> GateOutcome:
    """Judge ``current`` passed repeats of ``config`` (``backend``, ``chunk``, ``concurrency``, ``id``)."""
    base = _matching(baseline, config)
    cfg_id = str(config["id"])
    if not base:
        return _no_match(baseline, cfg_id)
    metrics = []
    for name, col, higher in HEADLINE:
        cur, ref = _nums(current, col), _nums(base, col)
        if cur and ref:
            metrics.append(_metric(name, col, higher, cur, ref, margin_pct))
    bad = [m for m in metrics if m["status"] == "regression"]
    bound = _client_bound(current if bad else base, "this run's" if bad else f"{baseline.label}'s")
    if bound:
        return GateOutcome("inconclusive", f"inconclusive: {bound}", metrics)
    unsure = [m for m in metrics if m["status"] == "inconclusive"]
    text = "; ".join(_sentence(m, baseline.label) for m in (bad or unsure or metrics))
    if bad:
        return GateOutcome(*_regression(text, bad, cfg_id, waivers, today or _dt.date.today()), metrics)
    if unsure:
        return GateOutcome(
            "inconclusive",
            f"inconclusive: {text}; the repeat ranges overlap — add --repeats to separate signal from noise",
            metrics,
        )
    return GateOutcome("passed", f"within tolerance of {baseline.label}: {text}", metrics)


def _config_samples(base: Baseline) -> dict[tuple[str, str, str], list[Any]]:
    from pytest_sskj.acceptance.compare import RepeatSample

    out: dict[tuple[str, str, str], list[Any]] = {}
    for r in base.rows:
        if r.get("status") == "passed" and r.get("kind", "serve") == "serve":
            key = (str(r.get("backend")), str(r.get("chunk")), str(r.get("concurrency")))
            out.setdefault(key, []).append(RepeatSample.from_row(r))
    return out


def same_code(x: Baseline, y: Baseline) -> bool:
    """Whether two stored runs measured the same thing with the same code: same shape, comparable environment,
    no differing engine fact (their comparison is an A/A pair across runs)."""
    return x.facts.get("shape") == y.facts.get("shape") and not incomparable(y.facts, x.facts) + engine_differences(
        x, y.facts
    )


def between_run_noise(runs: Sequence[Baseline]) -> tuple[dict[tuple[str, str, str], float], int]:
    """Per configuration, the largest |delta| % of the primary metric (ratio of geometric means of the
    repeats) between consecutive stored runs of the same code: the between-run A/A noise; and how many run
    pairs it rests on."""
    from pytest_sskj.acceptance.compare import compare

    noise: dict[tuple[str, str, str], float] = {}
    pairs = 0
    ordered = sorted(runs, key=lambda r: r.run_id)
    for x, y in itertools.pairwise(ordered):
        if not same_code(x, y):
            continue
        pairs += 1
        cx, cy = _config_samples(x), _config_samples(y)
        for key in set(cx) & set(cy):
            d = compare(x.run_id, y.run_id, cx[key], cy[key]).primary.delta_pct
            if d is not None:
                noise[key] = max(noise.get(key, 0.0), abs(d))
    return noise, pairs


def judge_between_runs(
    a: str, b: str, ra: Sequence[Any], rb: Sequence[Any], noise: float | None, margin: float, problems: Sequence[str]
) -> Any:
    """``compare``'s verdict of one configuration across runs: the repeat-level method, with a claim needing to
    clear the between-run noise ``noise`` in both directions; without a known noise, inconclusive."""
    from dataclasses import replace

    from pytest_sskj.acceptance.compare import compare

    if noise is None:
        v = compare(a, b, ra, rb, margin_pct=margin, incomparable=problems)
        if v.outcome == "incomparable":
            return v
        metrics = tuple(replace(m, outcome="inconclusive") for m in v.metrics)
        return replace(v, outcome="inconclusive", metrics=metrics, reasons=("no between-run noise known yet",))
    floor = max(noise, margin)
    return compare(a, b, ra, rb, margin_pct=-floor, noise_floor_pct=floor, incomparable=problems)


def read_toml(path: Path) -> dict[str, Any]:
    """``release.toml`` as a dict (``{}`` when absent)."""
    from pytest_sskj.report.release import _toml_loads

    return _toml_loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
