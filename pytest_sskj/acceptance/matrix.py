"""The acceptance matrix: serving points, comparisons, chunk curves and SLO configs from :class:`Settings`.

A *point* is one (backend, chunk, concurrency, repeat) measurement and carries the id users see in the
test id (``flashinfer_mxfp4-chunk8192-c8-r2``); with ``--layout`` and several shapes it also names its
layout and (ISL, OSL) shape (``tp4dp2-isl1024-osl128-auto-chunk8192-c16-r1``), each layout being its own
server spec that is reused across shapes and concurrencies.  This module owns how points are enumerated and in which
order they run: grouped by server spec so each server starts once, or interleaved A B A B across
backends when restarting a server is cheap (the embedded CPU engine), so slow drift of the machine
cannot masquerade as a backend difference.  It also enumerates the verdicts built on the points
(backend comparisons, chunk curves, SLO configs, search configs).  Pure data: no I/O.

A backend named twice (``--backend marlin,marlin``) is an A/A control: the second occurrence is the
*arm* ``marlin@2``, a second, independently launched identical server (:func:`arms`); its comparison
with the first is a control (:attr:`Comparison.is_control`) whose measured difference is the run's
noise floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sskj.deploy.layouts import shape_id
from pytest_sskj.engines import ENGINES
from pytest_sskj.server.spec import ServerSpec, spec_from_settings
from pytest_sskj.server.speculative import arm_override
from pytest_sskj.settings import Settings
from pytest_sskj.speculative import split_arm

__all__ = [
    "ARM_SEP",
    "CHEAP_RESTART_ENGINES",
    "Comparison",
    "ConfigKey",
    "CurveKey",
    "Point",
    "arm_backend",
    "arm_config",
    "arm_instance",
    "arms",
    "build_points",
    "comparisons",
    "configs",
    "curves",
    "dimensions",
    "execution_order",
    "id_prefix",
    "interleaves",
    "not_applicable",
    "search_configs",
    "spec_for",
    "speculative_pair",
]

Shape = tuple[int, int]


def id_prefix(layout: str | None, shape: Shape | None) -> str:
    """``tp4dp2-isl1024-osl128-`` (only the dimensions the run has)."""
    return (f"{layout}-" if layout else "") + (f"{shape_id(shape)}-" if shape else "")


def _chunk_id(chunk: int | None) -> str:
    """``-chunk8192``; nothing for the engine's own chunk size (a deployment, or no ``--chunk``)."""
    return "" if chunk is None else f"-chunk{chunk}"


CHEAP_RESTART_ENGINES = frozenset(n for n, e in ENGINES.items() if e.restart_cost == "cheap")
"""Engines whose servers restart in well under a second: their repeats are interleaved A B A B."""

ARM_SEP = "@"


def arms(backends: Sequence[str]) -> tuple[str, ...]:
    """The matrix's arms: ``marlin,marlin`` -> ``marlin``, ``marlin@2`` (an A/A control's second server)."""
    seen: dict[str, int] = {}
    out = []
    for b in backends:
        seen[b] = seen.get(b, 0) + 1
        out.append(b if seen[b] == 1 else f"{b}{ARM_SEP}{seen[b]}")
    return tuple(out)


def arm_config(arm: str) -> str:
    """The server configuration of an arm: ``marlin+dflash@2`` -> ``marlin+dflash`` (an A/A control's two arms
    have the same one)."""
    return arm.split(ARM_SEP, 1)[0]


def arm_backend(arm: str) -> str:
    """The engine backend of an arm: ``marlin@2`` -> ``marlin``, ``marlin+dflash`` -> ``marlin``."""
    return split_arm(arm_config(arm))[0]


def speculative_pair(a: str, b: str) -> bool:
    """Whether arms ``a`` and ``b`` are one backend with different speculative configurations (``marlin`` and
    ``marlin+dflash``): a comparison whose greedy outputs must be identical."""
    (ab, an), (bb, bn) = split_arm(arm_config(a)), split_arm(arm_config(b))
    return ab == bb and an != bn


def arm_instance(arm: str) -> int:
    """0 for the first server of a backend, ``n - 1`` for the arm ``backend@n``."""
    _, sep, n = arm.partition(ARM_SEP)
    return int(n) - 1 if sep and n.isdigit() else 0


@dataclass(frozen=True)
class ConfigKey:
    """One server configuration at one concurrency: ``marlin-chunk8192-c8``."""

    backend: str
    chunk: int | None
    concurrency: int
    layout: str | None = None
    shape: Shape | None = None

    @property
    def id(self) -> str:
        return f"{id_prefix(self.layout, self.shape)}{self.backend}{_chunk_id(self.chunk)}-c{self.concurrency}"

    def point(self, repeat: int, repeats: int, kind: str = "serve") -> Point:
        """The point of this configuration at ``repeat`` (of ``repeats``)."""
        return Point(self.backend, self.chunk, self.concurrency, repeat, repeats, kind, self.layout, self.shape)


@dataclass(frozen=True)
class Point:
    """One serving point: a backend, a chunk size, a concurrency and a repeat (1-based, of ``repeats``)."""

    backend: str
    chunk: int | None
    concurrency: int
    repeat: int
    repeats: int
    kind: str = "serve"
    """``serve`` for matrix points, ``search`` for a step of the adaptive concurrency search."""
    layout: str | None = None
    """The layout's name when the run has ``--layout`` (``None``: the run's one parallel setting)."""
    shape: Shape | None = None
    """(ISL, OSL) when the run has several shapes or layouts (``None``: the run's ``--isl``/``--osl``)."""

    @property
    def id(self) -> str:
        base = f"{id_prefix(self.layout, self.shape)}{self.backend}{_chunk_id(self.chunk)}-c{self.concurrency}"
        return f"{base}-search" if self.kind == "search" else f"{base}-r{self.repeat}"

    @property
    def config(self) -> ConfigKey:
        return ConfigKey(self.backend, self.chunk, self.concurrency, self.layout, self.shape)

    @property
    def spec_group(self) -> tuple[str | None, str, int | None]:
        """What identifies the server this point needs (shape, concurrency and repeat are client-side)."""
        return (self.layout, self.backend, self.chunk)


@dataclass(frozen=True)
class Comparison:
    """Candidate backend vs the baseline (first backend) at one chunk and concurrency."""

    baseline: str
    candidate: str
    chunk: int | None
    concurrency: int
    layout: str | None = None
    shape: Shape | None = None

    @property
    def id(self) -> str:
        pre = id_prefix(self.layout, self.shape)
        return f"{pre}{self.candidate}-vs-{self.baseline}{_chunk_id(self.chunk)}-c{self.concurrency}"

    def baseline_config(self) -> ConfigKey:
        return ConfigKey(self.baseline, self.chunk, self.concurrency, self.layout, self.shape)

    def candidate_config(self) -> ConfigKey:
        return ConfigKey(self.candidate, self.chunk, self.concurrency, self.layout, self.shape)

    @property
    def is_control(self) -> bool:
        """An A/A control: the same backend (and speculative configuration) on two independently launched servers."""
        return arm_config(self.candidate) == arm_config(self.baseline)


@dataclass(frozen=True)
class CurveKey:
    """One backend at one concurrency, across every chunk size."""

    backend: str
    concurrency: int
    chunks: tuple[int | None, ...]
    layout: str | None = None
    shape: Shape | None = None

    @property
    def id(self) -> str:
        return f"{id_prefix(self.layout, self.shape)}{self.backend}-c{self.concurrency}"

    def configs(self) -> list[ConfigKey]:
        return [ConfigKey(self.backend, c, self.concurrency, self.layout, self.shape) for c in self.chunks]


def _chunks(settings: Settings) -> tuple[int | None, ...]:
    return tuple(settings.chunks) if settings.chunks else (None,)


def dimensions(settings: Settings) -> list[tuple[str | None, Shape | None]]:
    """The (layout, shape) cells of the run: ``[(None, None)]`` without ``--layout`` and with one shape."""
    layouts: list[str | None] = [lay.name for lay in settings.layouts] or [None]
    several = bool(settings.layouts) or len(settings.shapes) > 1
    shapes: list[Shape | None] = list(settings.shapes) if several and settings.shapes else [None]
    return [(lay, sh) for lay in layouts for sh in shapes]


def build_points(settings: Settings) -> list[Point]:
    """Every serving point of the matrix in canonical (layout, shape, chunk, concurrency, backend, repeat) order."""
    return [
        Point(backend, chunk, conc, r, settings.repeats, "serve", lay, sh)
        for lay, sh in dimensions(settings)
        for chunk in _chunks(settings)
        for conc in settings.concurrencies
        for backend in arms(settings.backends)
        for r in range(1, settings.repeats + 1)
    ]


def spec_for(settings: Settings, point: Point) -> ServerSpec:
    """The server spec ``point`` needs: the run's spec with the point's layout (sizes, args, env) applied."""
    lay = None
    if point.layout is not None:
        lay = next((x for x in settings.layouts if x.name == point.layout), None)
        if lay is None:
            raise ValueError(f"point {point.id} names layout {point.layout!r}, which this run does not have")
    override = lay.override() if lay is not None else None
    # the arm ``marlin@2`` of an A/A control is a second, separate server (``instance``); ``marlin+dflash`` adds
    # the speculative configuration's flags (server/speculative.py)
    return spec_from_settings(
        settings,
        backend=arm_backend(point.backend),
        chunk=point.chunk,
        override=arm_override(settings, point.backend, override),
        instance=arm_instance(point.backend) or 0,
    )


def interleaves(settings: Settings) -> bool:
    """Whether repeats run A B A B: only where restarting a server is cheap and there is more than one backend."""
    return settings.engine in CHEAP_RESTART_ENGINES and len(settings.backends) > 1 and settings.target_url is None


def execution_order(points: Sequence[Point], *, interleave: bool) -> list[Point]:
    """The order the points run in.

    ``interleave=False``: grouped by server spec (chunk, then backend in the order given, then
    concurrency, then repeat), so every server starts exactly once.  ``interleave=True``: for each
    chunk and concurrency, repeat 1 of every backend, then repeat 2 of every backend, ... (A B A B).
    """
    layouts = list(dict.fromkeys(p.layout for p in points))
    shapes = list(dict.fromkeys(p.shape for p in points))
    chunks = list(dict.fromkeys(p.chunk for p in points))
    backends = list(dict.fromkeys(p.backend for p in points))
    concs = list(dict.fromkeys(p.concurrency for p in points))
    if interleave:

        def key(p: Point) -> tuple[int, ...]:
            return (
                layouts.index(p.layout),
                chunks.index(p.chunk),
                shapes.index(p.shape),
                concs.index(p.concurrency),
                p.repeat,
                backends.index(p.backend),
            )
    else:

        def key(p: Point) -> tuple[int, ...]:
            # one server per (layout, chunk, backend), reused across shapes and concurrencies
            return (
                layouts.index(p.layout),
                chunks.index(p.chunk),
                backends.index(p.backend),
                shapes.index(p.shape),
                concs.index(p.concurrency),
                p.repeat,
            )

    return sorted(points, key=key)


def configs(settings: Settings) -> list[ConfigKey]:
    """Every (backend, chunk, concurrency) of the matrix, in canonical order."""
    return [
        ConfigKey(b, c, k, lay, sh)
        for lay, sh in dimensions(settings)
        for c in _chunks(settings)
        for k in settings.concurrencies
        for b in arms(settings.backends)
    ]


def comparisons(settings: Settings) -> list[Comparison]:
    """Every non-baseline arm vs the baseline (the first backend), per chunk and concurrency.

    A/A controls come first at each chunk and concurrency, so their noise floor is known before the
    candidates are judged.
    """
    base = settings.baseline
    out = [
        Comparison(base, cand, chunk, conc, lay, sh)
        for lay, sh in dimensions(settings)
        for chunk in _chunks(settings)
        for conc in settings.concurrencies
        for cand in arms(settings.backends)[1:]
    ]
    cells = dimensions(settings)
    return sorted(
        out,
        key=lambda c: (
            cells.index((c.layout, c.shape)),
            _chunks(settings).index(c.chunk),
            c.concurrency,
            not c.is_control,
        ),
    )


def curves(settings: Settings) -> list[CurveKey]:
    """One chunk curve per backend and concurrency."""
    return [
        CurveKey(b, c, _chunks(settings), lay, sh)
        for lay, sh in dimensions(settings)
        for b in arms(settings.backends)
        for c in settings.concurrencies
    ]


def search_configs(settings: Settings) -> list[tuple[str, int | None]]:
    """The (backend, chunk) configurations an adaptive concurrency search runs over.

    None when the run has layouts or several shapes: there the search runs per layout x shape inside
    ``test_recommendation`` (:mod:`pytest_sskj.deploy.recommend`).
    """
    if dimensions(settings) != [(None, None)]:
        return []
    return [(b, c) for c in _chunks(settings) for b in arms(settings.backends)]


def _where(settings: Settings, dest: str) -> str:
    src = settings.sources.get(dest, "default")
    if src == "profile" and settings.profile is not None:
        return f"profile {settings.profile.name}"
    return {"cli": "command line", "env": "environment", "ini": "ini", "engine": "engine default"}.get(src, "default")


def _fixed_deployment(settings: Settings) -> str:
    topo = settings.deployment
    assert topo is not None
    per = ", ".join(f"{g.name} {g.backend or 'engine default'}" for g in topo.groups)
    return f"one fixed {topo.kind} deployment (backends per group: {per})"


def _curve_na(settings: Settings, value: object) -> str | None:
    if settings.deployment is not None:
        chunks = ", ".join(f"{g.name} {g.chunk}" for g in settings.deployment.groups if g.chunk)
        per = chunks or "engine default"
        return f"{_fixed_deployment(settings)}: the chunk is a per-group setting ({per}); no chunk curve"
    if settings.target_url:
        return f"--target-url {settings.target_url} is one running server with one chunk size: no chunk curve"
    if not settings.chunks:
        return "no chunk sizes given (the engine's own chunk size): no chunk curve; give several with --chunk 4K,8K,16K"
    if len(settings.chunks) == 1:
        return (
            f"one chunk size ({settings.chunks[0]}): a representative single-chunk run, the chunk curve does not "
            "apply (it needs several, e.g. --chunk 4K,8K,16K)"
        )
    return None


def _search_na(settings: Settings, value: object) -> str | None:
    if settings.search == "none":
        concs = ",".join(map(str, settings.concurrencies)) or "none"
        return (
            f"no concurrency search (search = none, {_where(settings, 'search')}): fixed concurrencies {concs} only; "
            "enable one with --sskj-search double|add16"
        )
    if value is None:
        return "the concurrency search runs per layout x shape inside test_recommendation"
    return None


def _slo_na(settings: Settings, value: object) -> str | None:
    if not settings.slo:
        return (
            f"no SLO gates (slo = none, {_where(settings, 'slo')}): the serving SLO does not apply to this job; "
            "judge one with --sskj-slo 'p95_ttft_ms<3000,p95_tpot_ms<50'"
        )
    if value is None:
        return "no fixed-concurrency points: the SLO is judged inside the concurrency search"
    return None


def _comparison_na(settings: Settings, value: object) -> str | None:
    if value is not None:
        return None
    if settings.deployment is not None:
        return f"{_fixed_deployment(settings)}: no backend A/B across one deployment"
    return (
        f"one backend ({','.join(settings.backends)}): no A/B to judge; give a baseline and a candidate, "
        "e.g. --backend marlin,flashinfer_mxfp4"
    )


def _recommendation_na(settings: Settings, value: object) -> str | None:
    if value is not None:
        return None
    what = _fixed_deployment(settings) if settings.deployment is not None else "one parallel setting"
    return f"no layouts to compare ({what}): give them with --layout tp2dp4,tp4dp2,tp8dp1 or a profile's [[layouts]]"


def _point_na(settings: Settings, value: object) -> str | None:
    if value is None:
        return "no fixed-concurrency points (no --concurrency): the concurrency search measures the points"
    return None


_NOT_APPLICABLE = {
    "sskj_point": _point_na,
    "sskj_slo_config": _slo_na,
    "sskj_comparison": _comparison_na,
    "sskj_curve": _curve_na,
    "sskj_search_config": _search_na,
    "sskj_recommendation": _recommendation_na,
}


def not_applicable(settings: Settings, param: str, value: object) -> str | None:
    """Why the verdict test of ``param`` (at ``value``; ``None``: the run has none) does not apply to this
    run's configuration, or ``None`` when it does.  Such tests are deselected and listed (``outcomes.json``,
    the release mark), not skipped: ``slo = "none"``, ``search = "none"``, one chunk size (a representative
    run), one backend, a fixed deployment, no layouts."""
    why = _NOT_APPLICABLE.get(param)
    return why(settings, value) if why is not None else None
