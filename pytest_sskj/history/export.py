"""The users' JSONL shapes from the run store: ``adaptive_points.jsonl``, ``adaptive_shapes.jsonl`` and
``run_manifest.json`` (their ``adaptive_results/<run_id>/`` layout), so their Python analysis keeps working, and
``verdicts.jsonl`` (every verdict with its word).

Every field is documented in ``docs/HISTORY.md``; metric names are sglang's with the unit in the name and
``null`` when undefined (never 0).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_sskj.history.importer import read_manifest
from pytest_sskj.history.layout import LAYOUT_FIELDS, config_text, deployment_config, point_layout
from pytest_sskj.records import METRIC_FIELDS
from pytest_sskj.report.results import read_results, read_verdicts
from pytest_sskj.rundir import RunLayout, atomic_write_json, atomic_write_text, jsonable
from pytest_sskj.telemetry.summary import SPEC_COLUMNS
from pytest_sskj.twin.plugin import time_scale
from pytest_sskj.vocabulary import COMPUTED, users_name

__all__ = [
    "POINT_FIELDS",
    "VERDICT_FIELDS",
    "export_run",
    "point_lines",
    "shape_lines",
    "verdict_lines",
    "verdict_word",
]

_EXPORTED = (
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "median_ttft_ms",
    "p95_ttft_ms",
    "median_tpot_ms",
    "p95_tpot_ms",
    "p95_itl_ms",
    "p95_e2e_latency_ms",
)
_POINT_METRICS = tuple((n if n.endswith("_throughput") else users_name(n), n) for n in _EXPORTED)
"""(field, registry name) of the users' flat metric fields (their spelling, from the registry's aliases); every
computed metric is also in each line's ``metrics`` under its registry name."""
POINT_FIELDS = (
    "run_id",
    "platform",
    "model",
    "engine",
    "layout",
    "config",
    "tp",
    "ep",
    "dp",
    "pp",
    "groups",
    "twin_time_scale",
    "deployment",
    "backend",
    "chunk",
    "isl",
    "osl",
    "concurrency",
    "repeat",
    "kind",
    "status",
    "completed",
    "failed",
    *(name for name, _ in _POINT_METRICS),
    "slo_met",
    "slo",
    "request_file",
    "reasons",
    "metrics",
    "speculative",
)


def _settings(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    s = manifest.get("settings")
    return s if isinstance(s, Mapping) else {}


def _run_facts(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The run's own facts; ``config`` is the run's parallel setting (its layouts, or its deployment)."""
    s = _settings(manifest)
    layouts = [x for x in s.get("layouts") or [] if isinstance(x, Mapping)]
    if isinstance(s.get("deployment"), Mapping) and s["deployment"].get("groups"):
        config: str | None = deployment_config(s["deployment"])
    elif layouts:
        config = ", ".join(f"{x.get('name')} {config_text(x)}" for x in layouts)
    else:
        config = config_text(s)
    return {
        "platform": s.get("platform"),
        "model": s.get("model_name") or s.get("model_path"),
        "engine": s.get("engine"),
        "config": config,
    }


def _slo_met(gates: Mapping[str, Any]) -> bool | None:
    judged = [v for v in gates.values() if v is not None]
    if not judged:
        return None
    return all(bool(v) for v in judged)


def _groups(settings: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A deployment's groups, each with its role and its own TP/EP/DP/PP (a PD point's sizes are per group)."""
    dep = settings.get("deployment")
    if not isinstance(dep, Mapping) or not dep.get("groups"):
        return None
    keys = ("name", "role", "tp", "ep", "dp", "pp", "backend", "chunk")
    return [{k: g.get(k) for k in keys} for g in dep["groups"] if isinstance(g, Mapping)]


def point_lines(rows: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One ``adaptive_points.jsonl`` object per probed point and repeat; ``layout`` / ``config`` /
    ``deployment`` are the point's own (:func:`pytest_sskj.history.layout.point_layout`)."""
    facts = _run_facts(manifest)
    settings = _settings(manifest)
    groups = _groups(settings)
    scale = time_scale(settings)
    out = []
    for r in rows:
        gates = r.get("slo_met") if isinstance(r.get("slo_met"), Mapping) else {}
        assert isinstance(gates, Mapping)
        own = point_layout(r, settings)
        line = {"run_id": r.get("run_id"), **facts, **{k: own[k] for k in LAYOUT_FIELDS}, "groups": groups}
        line["twin_time_scale"] = scale
        line.update({k: r.get(k) for k in ("backend", "chunk", "isl", "osl", "concurrency", "repeat")})
        line.update(kind=r.get("kind", "serve"), status=r.get("status"), completed=r.get("completed"))
        line["failed"] = r.get("failed")
        line.update({name: r.get(col) for name, col in _POINT_METRICS})
        line.update(slo_met=_slo_met(gates), slo=dict(gates), request_file=r.get("request_file"))
        line["reasons"] = list(r.get("reasons") or [])
        line["metrics"] = {n: r.get(n) for n in METRIC_FIELDS if n in COMPUTED}
        line["speculative"] = {n: r.get(n) for n in SPEC_COLUMNS}
        out.append({k: line.get(k) for k in POINT_FIELDS})
    return out


def _median(vals: Sequence[Any]) -> float | None:
    nums = [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(nums) if nums else None


_SHAPE_KEYS = ("layout", "config", "deployment", "backend", "chunk", "isl", "osl")


def shape_lines(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One ``adaptive_shapes.jsonl`` object per layout x shape (layout, config, backend, chunk, ISL, OSL): the
    concurrencies probed and the best one, the highest concurrency whose every passed repeat met every judged
    SLO gate."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for p in points:
        groups.setdefault(tuple(str(p.get(k)) for k in _SHAPE_KEYS), []).append(p)
    return [_shape_line(group) for group in groups.values()]


def _shape_line(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The points of one layout x shape: probed concurrencies, the best one, the misses, the medians at the best."""
    by_c: dict[int, list[Mapping[str, Any]]] = {}
    for p in group:
        if p.get("status") == "passed" and isinstance(p.get("concurrency"), int):
            by_c.setdefault(int(p["concurrency"]), []).append(p)
    ok = [c for c, ps in by_c.items() if all(q.get("slo_met") is not False for q in ps)]
    best = max(ok) if ok else None
    at = by_c.get(best, []) if best is not None else []
    missed = sorted(c for c in by_c if c not in ok)
    first = group[0]
    return {
        **{k: first.get(k) for k in ("run_id", "platform", "model", "engine", *_SHAPE_KEYS)},
        "concurrencies": sorted({int(p["concurrency"]) for p in group if isinstance(p.get("concurrency"), int)}),
        "best_concurrency": best,
        "slo_missed_at": missed,
        "repeats_at_best": len(at),
        **{f"{m}_at_best": _median([q.get(m) for q in at]) for m in ("input_throughput", "output_throughput")},
        **{f"{m}_at_best": _median([q.get(m) for q in at]) for m in _AT_BEST},
    }


_AT_BEST = ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "e2e_p95_ms")


def _manifest_doc(manifest: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("run_id", "start_iso", "end_iso", "status", "exitstatus", "settings", "engine", "engines", "gpu")
    doc = {k: manifest.get(k) for k in keep}
    doc.update(_run_facts(manifest))
    doc["twin_time_scale"] = time_scale(_settings(manifest))
    doc.update(packages=manifest.get("packages"), host=manifest.get("host"), pytest_sskj=manifest.get("pytest_sskj"))
    return doc


VERDICT_FIELDS = ("run_id", "kind", "id", "verdict", "passed", "backend", "baseline", "candidate", "chunk",
                  "concurrency", "control", "message")  # fmt: skip
"""``verdicts.jsonl``: one line per verdict; ``verdict`` is its word (docs/HISTORY.md)."""


def verdict_word(v: Mapping[str, Any]) -> str:
    """A verdict's one word: a comparison's ``better``/``worse``/``equivalent``/``inconclusive``, the baseline gate's
    ``passed``/``regression``/``waived``/``inconclusive``/``no_match``; any other kind ``pass``/``fail``/``info``."""
    if v.get("kind") in ("comparison", "baseline") and v.get("outcome"):
        return str(v["outcome"])
    passed = v.get("passed")
    return "pass" if passed is True else "fail" if passed is False else "info"


def verdict_lines(verdicts: Sequence[Mapping[str, Any]], run_id: str | None) -> list[dict[str, Any]]:
    def field(v: Mapping[str, Any], k: str) -> Any:
        return verdict_word(v) if k == "verdict" else v.get(k, run_id if k == "run_id" else None)

    return [{k: field(v, k) for k in VERDICT_FIELDS} for v in verdicts]


def export_run(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Write the four files for ``run_dir`` into ``out`` (default ``<run dir>/export``); returns their paths."""
    out = Path(out) if out is not None else RunLayout(run_dir).export
    manifest = read_manifest(run_dir)
    points = point_lines(read_results(run_dir).rows, manifest)
    verdicts = verdict_lines(read_verdicts(run_dir).rows, manifest.get("run_id") or run_dir.name)

    def jsonl(items: Sequence[Mapping[str, Any]]) -> str:
        return "".join(json.dumps(jsonable(i), sort_keys=False, allow_nan=False) + "\n" for i in items)

    return [
        atomic_write_text(out / "adaptive_points.jsonl", jsonl(points)),
        atomic_write_text(out / "adaptive_shapes.jsonl", jsonl(shape_lines(points))),
        atomic_write_json(out / "run_manifest.json", _manifest_doc(manifest), indent=2),
        atomic_write_text(out / "verdicts.jsonl", jsonl(verdicts)),
    ]
