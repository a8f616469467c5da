"""The acceptance matrix: serving points, comparisons, chunk curves and SLO configs from :class:`Settings`.

A *point* is one (backend, chunk, concurrency, repeat) measurement and carries the id users see in the
test id (``flashinfer_mxfp4-chunk8192-c8-r2``).  This module owns how points are enumerated and in which
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

from pytest_sskj.engines import ENGINES
from pytest_sskj.settings import Settings

__all__ = [
    "ARM_SEP",
    "CHEAP_RESTART_ENGINES",
    "Comparison",
    "ConfigKey",
    "CurveKey",
    "Point",
    "arm_backend",
    "arm_instance",
    "arms",
    "build_points",
    "comparisons",
    "configs",
    "curves",
    "execution_order",
    "interleaves",
    "search_configs",
]

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


def arm_backend(arm: str) -> str:
    """The engine backend of an arm: ``marlin@2`` -> ``marlin``."""
    return arm.split(ARM_SEP, 1)[0]


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

    @property
    def id(self) -> str:
        return f"{self.backend}-chunk{self.chunk}-c{self.concurrency}"


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

    @property
    def id(self) -> str:
        base = f"{self.backend}-chunk{self.chunk}-c{self.concurrency}"
        return f"{base}-search" if self.kind == "search" else f"{base}-r{self.repeat}"

    @property
    def config(self) -> ConfigKey:
        return ConfigKey(self.backend, self.chunk, self.concurrency)

    @property
    def spec_group(self) -> tuple[str, int | None]:
        """What identifies the server this point needs (concurrency and repeat are client-side)."""
        return (self.backend, self.chunk)


@dataclass(frozen=True)
class Comparison:
    """Candidate backend vs the baseline (first backend) at one chunk and concurrency."""

    baseline: str
    candidate: str
    chunk: int | None
    concurrency: int

    @property
    def id(self) -> str:
        return f"{self.candidate}-vs-{self.baseline}-chunk{self.chunk}-c{self.concurrency}"

    def baseline_config(self) -> ConfigKey:
        return ConfigKey(self.baseline, self.chunk, self.concurrency)

    def candidate_config(self) -> ConfigKey:
        return ConfigKey(self.candidate, self.chunk, self.concurrency)

    @property
    def is_control(self) -> bool:
        """An A/A control: the same backend on two independently launched servers."""
        return arm_backend(self.candidate) == arm_backend(self.baseline)


@dataclass(frozen=True)
class CurveKey:
    """One backend at one concurrency, across every chunk size."""

    backend: str
    concurrency: int
    chunks: tuple[int | None, ...]

    @property
    def id(self) -> str:
        return f"{self.backend}-c{self.concurrency}"

    def configs(self) -> list[ConfigKey]:
        return [ConfigKey(self.backend, c, self.concurrency) for c in self.chunks]


def _chunks(settings: Settings) -> tuple[int | None, ...]:
    return tuple(settings.chunks) if settings.chunks else (None,)


def build_points(settings: Settings) -> list[Point]:
    """Every serving point of the matrix in canonical (chunk, concurrency, backend, repeat) order."""
    return [
        Point(backend, chunk, conc, r, settings.repeats)
        for chunk in _chunks(settings)
        for conc in settings.concurrencies
        for backend in arms(settings.backends)
        for r in range(1, settings.repeats + 1)
    ]


def interleaves(settings: Settings) -> bool:
    """Whether repeats run A B A B: only where restarting a server is cheap and there is more than one backend."""
    return settings.engine in CHEAP_RESTART_ENGINES and len(settings.backends) > 1 and settings.target_url is None


def execution_order(points: Sequence[Point], *, interleave: bool) -> list[Point]:
    """The order the points run in.

    ``interleave=False``: grouped by server spec (chunk, then backend in the order given, then
    concurrency, then repeat), so every server starts exactly once.  ``interleave=True``: for each
    chunk and concurrency, repeat 1 of every backend, then repeat 2 of every backend, ... (A B A B).
    """
    chunks = list(dict.fromkeys(p.chunk for p in points))
    backends = list(dict.fromkeys(p.backend for p in points))
    concs = list(dict.fromkeys(p.concurrency for p in points))
    if interleave:

        def key(p: Point) -> tuple[int, ...]:
            return (chunks.index(p.chunk), concs.index(p.concurrency), p.repeat, backends.index(p.backend))
    else:

        def key(p: Point) -> tuple[int, ...]:
            return (chunks.index(p.chunk), backends.index(p.backend), concs.index(p.concurrency), p.repeat)

    return sorted(points, key=key)


def configs(settings: Settings) -> list[ConfigKey]:
    """Every (backend, chunk, concurrency) of the matrix, in canonical order."""
    return [
        ConfigKey(b, c, k) for c in _chunks(settings) for k in settings.concurrencies for b in arms(settings.backends)
    ]


def comparisons(settings: Settings) -> list[Comparison]:
    """Every non-baseline arm vs the baseline (the first backend), per chunk and concurrency.

    A/A controls come first at each chunk and concurrency, so their noise floor is known before the
    candidates are judged.
    """
    base = settings.baseline
    out = [
        Comparison(base, cand, chunk, conc)
        for chunk in _chunks(settings)
        for conc in settings.concurrencies
        for cand in arms(settings.backends)[1:]
    ]
    return sorted(out, key=lambda c: (_chunks(settings).index(c.chunk), c.concurrency, not c.is_control))


def curves(settings: Settings) -> list[CurveKey]:
    """One chunk curve per backend and concurrency."""
    return [CurveKey(b, c, _chunks(settings)) for b in arms(settings.backends) for c in settings.concurrencies]


def search_configs(settings: Settings) -> list[tuple[str, int | None]]:
    """The (backend, chunk) configurations an adaptive concurrency search runs over."""
    return [(b, c) for c in _chunks(settings) for b in arms(settings.backends)]
