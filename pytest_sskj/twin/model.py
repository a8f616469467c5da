"""The twin's performance model: a data file of *observables* and the engine parameters derived from it.

A model file (TOML; schema in ``docs/twin.md``) lists *cells*: one per backend x chunk x concurrency x layout
(and PD role), each with what the users measured there -- mean input TPS, TTFT P50/P95 (seconds), TPOT
P50/P95 (ms) where decode was measured, and the between-repeat noise -- under the workload the cell was
measured with (``[workload]``: ISL, OSL, requests per repeat).  Nothing in it is an answer the client could
copy: :func:`calibrate` turns a cell into the parameters of the serving model that paces the twin's
responses (:mod:`pytest_sskj.twin.engine`): the prefill rate, a per-request service spread, the wake-up
latency of an idle engine and the per-request decode step, fitted by simulating the cell's own closed-loop
workload so that the simulated observables reproduce the cell's.  ``time_scale`` (wall seconds per modelled
second) shrinks every duration alike, so every ratio is kept.

Stdlib only: this module runs inside the stand-in ranks on the nodes (any Python >= 3.10).
"""

from __future__ import annotations

import heapq
import json
import math
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

from pytest_sskj.files import read_text_file
from pytest_sskj.twin.speculative import SpecModel, SpecModelError, load_speculative

__all__ = [
    "CELL_KEYS",
    "Cell",
    "EngineParams",
    "Fault",
    "ModelError",
    "TwinModel",
    "calibrate",
    "load_model",
    "percentile",
    "simulate",
    "tpot_quantiles",
    "uncalibrated",
]

MATCH_KEYS = ("role", "tp", "ep", "dp", "pp", "backend", "chunk")
"""Server facts a cell is matched on (a key a cell leaves out matches any value)."""
FIGURE_KEYS = (
    "concurrency",
    "isl",
    "osl",
    "requests",
    "input_tps",
    "ttft_p50_s",
    "ttft_p95_s",
    "tpot_p50_ms",
    "tpot_p95_ms",
    "repeat_noise_pct",
    "source",
    "note",
)
CELL_KEYS = (*MATCH_KEYS, *FIGURE_KEYS)
_TOP_KEYS = (
    "name", "description", "source", "time_scale", "seed", "workload", "defaults", "cells", "faults", "accuracy",
    "speculative", "context_length",
)  # fmt: skip
FAULT_KEYS = ("role", "node_rank", "after_requests", "lines")
_Z95 = 1.6448536269514722
TPOT_ORDER_SEED = 11
"""The order of the per-request decode-step quantiles (the prefill spread's is seed 7)."""


class ModelError(ValueError):
    """A model file that cannot be served, saying what is wrong and what is accepted."""


@dataclass(frozen=True)
class Cell:
    """One measured configuration (see the module docstring); ``None`` match keys match anything."""

    role: str = "serve"
    tp: int | None = None
    ep: int | None = None
    dp: int | None = None
    pp: int | None = None
    backend: str | None = None
    chunk: int | None = None
    concurrency: int = 1
    isl: int = 16384
    osl: int = 1
    requests: int = 40
    input_tps: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p95_ms: float | None = None
    repeat_noise_pct: float = 0.2
    source: str = ""
    note: str = ""

    def facts(self) -> dict[str, Any]:
        """The cell's matching facts (:data:`MATCH_KEYS`) and its workload, by name."""
        return {"role": self.role, "tp": self.tp, "ep": self.ep, "dp": self.dp, "pp": self.pp, "backend": self.backend,
                "chunk": self.chunk, "concurrency": self.concurrency, "isl": self.isl}  # fmt: skip

    def matches(self, facts: Mapping[str, Any]) -> bool:
        own = self.facts()
        return all(own[k] is None or own[k] == facts.get(k) for k in MATCH_KEYS)

    @property
    def key(self) -> str:
        own = self.facts()
        return "/".join(f"{k}={own[k]}" for k in (*MATCH_KEYS, "concurrency", "isl"))


@dataclass(frozen=True)
class Fault:
    """Log lines a rank writes once it has been sent ``after_requests`` requests (``[[faults]]`` in the file).

    How a model makes a rank fail *in its log* the way a real one does (an OOM, a Traceback, an NCCL error in
    the middle of serving), so that the log oracle's verdicts are checked against lines a rank really wrote."""

    role: str = "serve"
    """The ``--disaggregation-mode`` of the ranks it applies to (serve, prefill or decode)."""
    node_rank: int = 0
    after_requests: int = 1
    lines: tuple[str, ...] = ()

    def applies(self, role: str, node_rank: int) -> bool:
        return self.role == role and self.node_rank == node_rank


@dataclass(frozen=True)
class EngineParams:
    """What paces the twin for one cell (modelled seconds; the engine multiplies by ``time_scale``)."""

    prefill_tps: float
    """Prefill tokens per second of the busy engine (shared by every request in its FIFO queue)."""
    service_cv: float
    """Spread of a request's prefill cost (lognormal, coefficient of variation)."""
    wake_s: float
    """Latency before the first step after the engine was idle."""
    tpot_s: float
    """Median per-request decode step."""
    tpot_sigma: float
    """Log-spread of the per-request decode step."""
    noise_sigma: float
    """Between-repeat relative noise of the engine rate (one draw per repeat, i.e. per cache flush)."""
    fit: dict[str, float] = field(default_factory=dict, compare=False)
    """The simulated observables of the fitted parameters (for docs and tests)."""


@dataclass(frozen=True)
class TwinModel:
    name: str
    path: Path | None
    time_scale: float
    seed: int
    cells: tuple[Cell, ...]
    default_tpot_ms: float
    description: str = ""
    faults: tuple[Fault, ...] = ()
    accuracy: Mapping[str, float] = field(default_factory=dict)
    """``[accuracy]``: the fraction of the accuracy questions each backend answers right (docs/twin.md); a backend
    not named answers every question right."""
    speculative: SpecModel | None = None
    """``[speculative]``: the draft's acceptance and cost (:mod:`pytest_sskj.twin.speculative`); ``None``: a server
    launched with speculative decoding is refused at start."""
    context_length: int | None = None
    """The model's context length in tokens (sglang's ``context_len``: ``--context-length`` wins); a prompt of at
    least that many tokens, or one whose output would run past it, is refused as sglang refuses it."""

    def candidates(self, facts: Mapping[str, Any]) -> list[Cell]:
        """The cells of a server with these facts (role, tp, ep, dp, pp, backend, chunk)."""
        return [c for c in self.cells if c.matches(facts)]

    def describe(self, facts: Mapping[str, Any]) -> str:
        shown = ", ".join(f"{k}={facts.get(k)}" for k in MATCH_KEYS)
        known = "; ".join(sorted({"/".join(f"{k}={c.facts()[k]}" for k in MATCH_KEYS) for c in self.cells}))
        return f"no cell of twin model {self.name!r} matches {shown}; the model has: {known}"


def percentile(values: Sequence[float], q: float) -> float:
    """numpy's default ("linear") percentile, as the bench client computes it."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of nothing")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def lognormal_quantiles(n: int, cv: float, seed: int | str = 7) -> list[float]:
    """``n`` median-1 lognormal multipliers at the quantiles (i + 0.5) / n, in a fixed shuffled order."""
    sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0
    nd = NormalDist()
    vals = [math.exp(sigma * nd.inv_cdf((i + 0.5) / n)) for i in range(n)]
    random.Random(seed).shuffle(vals)
    return vals


def tpot_quantiles(n: int, sigma: float) -> list[float]:
    """``n`` median-1 lognormal per-request decode-step multipliers of log-spread ``sigma``, in the fixed order the
    engine gives them (another order than the prefill spread's)."""
    return lognormal_quantiles(n, math.sqrt(math.expm1(sigma * sigma)), seed=TPOT_ORDER_SEED)


def simulate(
    n: int,
    c: int,
    isl: int,
    rate: float,
    wake: float,
    mults: Sequence[float],
    *,
    osl: int = 1,
    tpots: Sequence[float] | None = None,
) -> dict[str, float]:
    """Closed loop: ``n`` requests of ``isl`` tokens at concurrency ``c`` on a FIFO prefill engine of ``rate``
    tokens/s (request i costs ``isl * mults[i] / rate``), each then decoding ``osl - 1`` tokens of ``tpots[i]``
    seconds; a request is sent when a slot frees (a request completes).  An idle engine -- at the first send, and
    whenever a request arrives after the last prefill finished -- wakes up ``wake`` after that arrival, as the
    twin's engine does.  Returns input TPS, TTFT P50/P95 (s), TPOT P50/P95 (ms, OSL > 1) and the duration, as the
    bench client would measure them."""
    free = -1.0
    slots: list[float] = []  # completion times of the requests in flight
    ends: list[float] = []
    ttft: list[float] = []
    steps = list(tpots) if tpots is not None and osl > 1 else []
    for i in range(n):
        sent = 0.0 if i < c else heapq.heappop(slots)
        first = (sent + wake if free <= sent else free) + isl * mults[i] / rate
        free = first
        done = first + (osl - 1) * steps[i] if steps else first
        heapq.heappush(slots, done)
        ends.append(done)
        ttft.append(first - sent)
    dur = max(ends)
    out = {
        "input_tps": n * isl / dur,
        "ttft_p50_s": percentile(ttft, 50.0),
        "ttft_p95_s": percentile(ttft, 95.0),
        "duration_s": dur,
    }
    if steps:
        out["tpot_p50_ms"] = percentile(steps[:n], 50.0) * 1000.0
        out["tpot_p95_ms"] = percentile(steps[:n], 95.0) * 1000.0
    return out


def _fit_tpot(cell: Cell, default_tpot_ms: float) -> tuple[float, float]:
    """(median decode step in s, log-spread) whose per-request quantiles have the cell's TPOT P50 and P95 as the
    bench computes them over the cell's requests (bisection on the spread)."""
    p50 = (cell.tpot_p50_ms if cell.tpot_p50_ms is not None else default_tpot_ms) / 1000.0
    p95 = cell.tpot_p95_ms / 1000.0 if cell.tpot_p95_ms is not None else p50
    n = cell.requests

    def ratio(sigma: float) -> float:
        q = tpot_quantiles(n, sigma)
        return percentile(q, 95.0) / percentile(q, 50.0)

    lo, hi = 0.0, 3.0
    if p95 / p50 <= 1.0:
        hi = 0.0
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if ratio(mid) < p95 / p50 else (lo, mid)
    sigma = (lo + hi) / 2
    return p50 / percentile(tpot_quantiles(n, sigma), 50.0), sigma


def _fit_prefill(cell: Cell, tpots: Sequence[float] | None) -> tuple[float, float, float, dict[str, float]]:
    """(rate, spread, wake) whose simulated closed loop reproduces the cell's input TPS and TTFT P50/P95: a
    fixed-point pass (rate from P50, spread from P95/P50, wake from the duration the TPS implies), then, where
    that left a figure more than 0.05 % off -- ramp-heavy workloads (few requests per concurrency slot), where
    the wake moves TTFT P50 too -- a Nelder-Mead polish of the relative errors from the better of two starts."""
    n, c, isl = cell.requests, cell.concurrency, cell.isl
    assert cell.ttft_p50_s is not None
    p50 = cell.ttft_p50_s
    p95 = cell.ttft_p95_s if cell.ttft_p95_s is not None else p50
    tps = cell.input_tps if cell.input_tps is not None else c * isl / p50
    want = {"input_tps": tps, "ttft_p50_s": p50, "ttft_p95_s": p95}

    def run(rate: float, cv: float, wake: float) -> dict[str, float]:
        return simulate(n, c, isl, rate, wake, lognormal_quantiles(n, cv), osl=cell.osl, tpots=tpots)

    def miss(x: Sequence[float]) -> float:
        rate, cv, wake = math.exp(x[0]), x[1], x[2]
        if not 0.0 <= cv <= 1.5 or wake < 0.0:
            return 1e9
        sim = run(rate, cv, wake)
        return sum((sim[k] / v - 1.0) ** 2 for k, v in want.items())

    rate, cv, wake = c * isl / p50, 0.05, 0.0
    for _ in range(60):
        sim = run(rate, cv, wake)
        rate *= sim["ttft_p50_s"] / p50
        want_r, got_r = p95 / p50 - 1.0, sim["ttft_p95_s"] / sim["ttft_p50_s"] - 1.0
        cv = min(1.5, max(0.0, cv + 0.8 * (want_r - got_r) * math.sqrt(c) / _Z95))
        wake = max(0.0, wake + n * isl / tps - sim["duration_s"])
    best = [math.log(rate), cv, wake]
    if miss(best) > 2.5e-7:
        starts = (best, [math.log(tps), 0.05, 0.0])
        best = min((_nelder_mead(miss, x0) for x0 in starts), key=miss)
    rate, cv, wake = math.exp(best[0]), best[1], best[2]
    return rate, cv, wake, run(rate, cv, wake)


def _nelder_mead(f: Any, x0: Sequence[float], *, iters: int = 600) -> list[float]:
    """Minimise ``f`` from ``x0`` (Nelder-Mead, standard coefficients, restarted once from its best point)."""
    best = list(x0)
    for _ in range(2):
        pts = [best] + [[v + (0.05 if i == j else 0.0) * (1.0 + abs(v)) for j, v in enumerate(best)]
                        for i in range(len(best))]  # fmt: skip
        vals = [f(p) for p in pts]
        for _ in range(iters):
            _nm_step(f, pts, vals)
        best = pts[min(range(len(pts)), key=vals.__getitem__)]
    return best


def _towards(a: Sequence[float], b: Sequence[float], t: float) -> list[float]:
    """``a + t (b - a)``."""
    return [x + t * (y - x) for x, y in zip(a, b, strict=True)]


def _nm_step(f: Any, pts: list[list[float]], vals: list[float]) -> None:
    """One Nelder-Mead move of the simplex ``pts`` (values ``vals``), in place: reflect, expand, contract or
    shrink towards the best point."""
    order = sorted(range(len(pts)), key=vals.__getitem__)
    pts[:], vals[:] = [pts[i] for i in order], [vals[i] for i in order]
    centre = [sum(col) / (len(pts) - 1) for col in zip(*pts[:-1], strict=True)]
    refl = _towards(centre, pts[-1], -1.0)
    fr = f(refl)
    if fr < vals[0]:
        exp_ = _towards(centre, pts[-1], -2.0)
        fe = f(exp_)
        pts[-1], vals[-1] = (exp_, fe) if fe < fr else (refl, fr)
    elif fr < vals[-2]:
        pts[-1], vals[-1] = refl, fr
    else:
        con = _towards(centre, pts[-1], 0.5)
        fc = f(con)
        if fc < vals[-1]:
            pts[-1], vals[-1] = con, fc
        else:
            pts[1:] = [_towards(pts[0], p, 0.5) for p in pts[1:]]
            vals[1:] = [f(p) for p in pts[1:]]


def calibrate(cell: Cell, default_tpot_ms: float) -> EngineParams:
    """Engine parameters that reproduce ``cell``'s observables under its own workload (see the module doc)."""
    tpot, sigma = _fit_tpot(cell, default_tpot_ms)
    tpots = [tpot * m for m in tpot_quantiles(cell.requests, sigma)]
    if cell.ttft_p50_s is not None:
        rate, cv, wake, sim = _fit_prefill(cell, tpots)
    elif cell.input_tps is not None:
        rate, cv, wake, sim = cell.input_tps, 0.0, 0.0, {}
    else:
        rate, cv, wake, sim = 1e12, 0.0, 0.0, {}  # a decode-only cell: prefill is not its cost
    return EngineParams(
        prefill_tps=rate,
        service_cv=cv,
        wake_s=wake,
        tpot_s=tpot,
        tpot_sigma=sigma,
        noise_sigma=cell.repeat_noise_pct / 100.0,
        fit=sim,
    )


def uncalibrated(cell: Cell, default_tpot_ms: float) -> EngineParams:
    """The cell's figures taken at face value -- its input TPS (or C x ISL / TTFT P50) as the rate, no spread, no
    wake-up -- what serving looks like with the calibration switched off (``SSKJ_TWIN_CALIBRATION=off``)."""
    rate = cell.input_tps or (cell.concurrency * cell.isl / cell.ttft_p50_s if cell.ttft_p50_s else 1e12)
    tpot = (cell.tpot_p50_ms if cell.tpot_p50_ms is not None else default_tpot_ms) / 1000.0
    return EngineParams(rate, 0.0, 0.0, tpot, 0.0, cell.repeat_noise_pct / 100.0)


# -- loading -------------------------------------------------------------------------------------------------
def _read(path: Path) -> dict[str, Any]:
    try:
        text = read_text_file(path, what="twin model", limit=4 * 1024 * 1024)
    except FileNotFoundError:
        raise ModelError(f"twin model {path} does not exist") from None
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10 on a node
            import tomli as tomllib
        data = tomllib.loads(text)
    if not isinstance(data, dict):
        raise ModelError(f"twin model {path}: expected a table at the top level")
    return data


def _positive(where: str, key: str, v: Any, kind: type) -> Any:
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (kind is int and not isinstance(v, int))
        or not math.isfinite(v)
        or v <= 0
    ):
        raise ModelError(f"{where}: {key} must be a positive {kind.__name__}, got {v!r}")
    return v


def _table(raw: Mapping[str, Any], key: str, known: tuple[str, ...], where: str) -> dict[str, Any]:
    """The top-level table ``key`` (empty when absent); refused when it is no table or has unknown keys."""
    value = raw.get(key, {})
    if not isinstance(value, Mapping):
        raise ModelError(f"{where}: [{key}] must be a table, got {type(value).__name__}")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ModelError(f"{where}: [{key}] has unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return dict(value)


def _texts(vals: Mapping[str, Any], where: str) -> None:
    for k in ("role", "backend", "source", "note"):
        if k in vals and vals[k] is not None and not isinstance(vals[k], str):
            raise ModelError(f"{where}: {k} must be a string, got {vals[k]!r}")


def _cell(raw: Any, base: Mapping[str, Any], where: str) -> Cell:
    if not isinstance(raw, Mapping):
        raise ModelError(f"{where}: expected a [[cells]] table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(CELL_KEYS))
    if unknown:
        raise ModelError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(CELL_KEYS)}")
    vals = {**base, **raw}
    for k in ("tp", "ep", "dp", "pp", "chunk", "concurrency", "isl", "osl", "requests"):
        if k in vals:
            _positive(where, k, vals[k], int)
    for k in ("input_tps", "ttft_p50_s", "ttft_p95_s", "tpot_p50_ms", "tpot_p95_ms", "repeat_noise_pct"):
        if k in vals:
            _positive(where, k, vals[k], float)
    _texts(vals, where)
    if vals.get("role", "serve") not in ("serve", "prefill", "decode"):
        raise ModelError(f"{where}: role must be serve, prefill or decode, got {vals.get('role')!r}")
    if "input_tps" not in vals and "ttft_p50_s" not in vals and "tpot_p50_ms" not in vals:
        raise ModelError(f"{where}: a cell needs input_tps / ttft_p50_s (prefill) or tpot_p50_ms (decode)")
    return Cell(**vals)


def _fault(raw: Any, where: str) -> Fault:
    if not isinstance(raw, Mapping):
        raise ModelError(f"{where}: expected a table with {', '.join(FAULT_KEYS)}")
    unknown = sorted(set(raw) - set(FAULT_KEYS))
    if unknown:
        raise ModelError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(FAULT_KEYS)}")
    role = raw.get("role", "serve")
    if role not in ("serve", "prefill", "decode"):
        raise ModelError(f"{where}: role must be serve, prefill or decode, got {role!r}")
    node_rank = raw.get("node_rank", 0)
    if isinstance(node_rank, bool) or not isinstance(node_rank, int) or node_rank < 0:
        raise ModelError(f"{where}: node_rank must be an integer >= 0, got {node_rank!r}")
    after = _positive(where, "after_requests", raw.get("after_requests", 1), int)
    lines = raw.get("lines")
    if not isinstance(lines, list) or not lines or not all(isinstance(x, str) and x for x in lines):
        raise ModelError(f"{where}: lines must be a non-empty list of non-empty strings, got {lines!r}")
    return Fault(role=role, node_rank=node_rank, after_requests=after, lines=tuple(lines))


def load_model(path: Path) -> TwinModel:
    """Read and check a model file; :class:`ModelError` says what is wrong and what is accepted."""
    where = f"twin model {path}"
    try:
        raw = _read(path)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{where}: cannot be read: {exc}") from None
    unknown = sorted(set(raw) - set(_TOP_KEYS))
    if unknown:
        raise ModelError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_TOP_KEYS)}")
    scale = _positive(where, "time_scale", raw.get("time_scale", 1.0), float)
    workload = _table(raw, "workload", ("isl", "osl", "requests", "concurrency"), where)
    defaults = _table(raw, "defaults", ("tpot_ms", *CELL_KEYS), where)
    tpot = float(_positive(f"{where}, [defaults]", "tpot_ms", defaults.pop("tpot_ms", 60.0), float))
    base = {**defaults, **workload}
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ModelError(f"{where}: seed must be an integer >= 0, got {seed!r}")
    for k in ("name", "description", "source"):
        if k in raw and not isinstance(raw[k], str):
            raise ModelError(f"{where}: {k} must be a string, got {raw[k]!r}")
    cells_raw = raw.get("cells")
    if not isinstance(cells_raw, list) or not cells_raw:
        raise ModelError(f"{where}: needs [[cells]] tables (one per backend x chunk x concurrency x layout)")
    cells = tuple(_cell(c, base, f"{where}, cell {i + 1}") for i, c in enumerate(cells_raw))
    faults_raw = raw.get("faults", [])
    if not isinstance(faults_raw, list):
        raise ModelError(f"{where}: faults must be [[faults]] tables")
    faults = tuple(_fault(f, f"{where}, fault {i + 1}") for i, f in enumerate(faults_raw))
    accuracy = _accuracy(raw.get("accuracy", {}), where)
    try:
        speculative = load_speculative(raw.get("speculative"))
    except SpecModelError as exc:
        raise ModelError(f"{where}: {exc}") from None
    ctx = raw.get("context_length")
    return TwinModel(
        context_length=None if ctx is None else int(_positive(where, "context_length", ctx, int)),
        name=str(raw.get("name", path.stem)),
        path=path,
        time_scale=float(scale),
        seed=seed,
        cells=cells,
        default_tpot_ms=tpot,
        description=str(raw.get("description", "")),
        faults=faults,
        accuracy=accuracy,
        speculative=speculative,
    )


def _accuracy(raw: Any, where: str) -> dict[str, float]:
    """``[accuracy]``: backend name -> fraction of questions answered right, each in [0, 1]."""
    if not isinstance(raw, Mapping):
        raise ModelError(f"{where}: accuracy must be a table of backend = fraction (e.g. marlin = 0.93), got {raw!r}")
    out = {}
    for backend, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
            raise ModelError(f"{where}, [accuracy]: {backend} must be a fraction in [0, 1] (0.93 = 93 %), got {v!r}")
        out[str(backend)] = float(v)
    return out
