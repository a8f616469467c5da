"""The acceptance matrix: serving points, comparisons, chunk curves and SLO configs from :class:`Settings`.

A *point* is one (backend, chunk, concurrency, repeat) measurement and carries the id users see in the
test id (``flashinfer_mxfp4-chunk8192-c8-r2``).  This module owns how points are enumerated and in which
order they run: grouped by server spec so each server starts once, or interleaved A B A B across
backends when restarting a server is cheap (the embedded CPU engine), so slow drift of the machine
cannot masquerade as a backend difference.  It also enumerates the verdicts built on the points
(backend comparisons, chunk curves, SLO configs, search configs).  Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sskj.engines import ENGINES
from pytest_sskj.settings import Settings

__all__ = [
    "CHEAP_RESTART_ENGINES",
    "Comparison",
    "ConfigKey",
    "CurveKey",
    "Point",
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
        for backend in settings.backends
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
    return [ConfigKey(b, c, k) for c in _chunks(settings) for k in settings.concurrencies for b in settings.backends]


def comparisons(settings: Settings) -> list[Comparison]:
    """Every non-baseline backend vs the baseline (the first backend), per chunk and concurrency."""
    base = settings.baseline
    return [
        Comparison(base, cand, chunk, conc)
        for chunk in _chunks(settings)
        for conc in settings.concurrencies
        for cand in settings.backends[1:]
    ]


def curves(settings: Settings) -> list[CurveKey]:
    """One chunk curve per backend and concurrency."""
    return [CurveKey(b, c, _chunks(settings)) for b in settings.backends for c in settings.concurrencies]


def search_configs(settings: Settings) -> list[tuple[str, int | None]]:
    """The (backend, chunk) configurations an adaptive concurrency search runs over."""
    return [(b, c) for c in _chunks(settings) for b in settings.backends]
