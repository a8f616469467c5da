"""pytest fixtures of the bench client: ``bench_client`` (a helper bound to the run) and ``run_bench``.

``bench_client`` is a :class:`BenchHelper`: it builds :class:`~pytest_sskj.bench.workload.Workload` s
from the session settings (ISL/OSL/requests/concurrency/warmup/seed/rate/endpoint), runs points and
repeats against a target (a base URL, a list of them, or anything with ``.urls`` such as the server
pool's ``RunningServer``) and puts every output under ``<run dir>/bench/<test>/<label>/``.
``run_bench(target, workload, ...)`` is its :meth:`BenchHelper.run`.  Outside pytest use
:func:`pytest_sskj.bench.run_bench` directly.  Heavy modules (httpx, numpy) are imported on first use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import pytest

from pytest_sskj.settings import Settings

if TYPE_CHECKING:
    from pytest_sskj.bench.result import BenchResult, RepeatsResult
    from pytest_sskj.bench.workload import Workload

__all__ = ["BenchHelper", "bench_client", "run_bench"]


@runtime_checkable
class _HasUrls(Protocol):
    @property
    def urls(self) -> list[str]: ...


Target = str | Sequence[str] | _HasUrls


def target_urls(target: Target) -> list[str]:
    """Base URLs of ``target``: a URL, a sequence of URLs, or an object with ``.urls``."""
    if isinstance(target, str):
        return [target]
    if isinstance(target, Sequence):
        return [str(u) for u in target]
    if isinstance(target, _HasUrls):
        return list(target.urls)
    raise TypeError(f"bench target must be a URL, a list of URLs or have .urls; got {type(target).__name__}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_")[:120] or "point"


class BenchHelper:
    """Runs benchmark points for one test, with outputs under ``base_dir``."""

    def __init__(self, settings: Settings, base_dir: Path, config: pytest.Config | None = None) -> None:
        self.settings = settings
        self.base_dir = base_dir
        self.config = config

    def workload(self, **overrides: Any) -> Workload:
        """A Workload from the session settings, with ``overrides`` (any Workload field)."""
        from pytest_sskj.bench.workload import Workload

        s = self.settings
        w = Workload(
            isl=s.isl,
            osl=s.osl,
            requests=s.requests,
            concurrency=s.concurrencies[0] if s.concurrencies else 1,
            warmup=s.warmup,
            seed=s.seed,
            request_rate=s.request_rate,
            endpoint=s.endpoint,
        )
        return replace(w, **overrides) if overrides else w

    def out_dir(self, label: str) -> Path:
        return self.base_dir / _safe(label)

    def progress(self, point: str, *, repeat: int = 0, repeats: int = 1) -> Callable[[int, int], None] | None:
        """A throttled terminal progress callback (None on xdist workers or without a terminal)."""
        if self.config is None:
            return None
        from pytest_sskj.bench.progress import progress_for

        return progress_for(self.config, point, repeat=repeat, repeats=repeats)

    def run(
        self,
        target: Target,
        workload: Workload,
        *,
        repeat: int = 0,
        label: str = "",
        out_dir: Path | None = None,
        progress: Callable[[int, int], None] | None = None,
        flush_cache: bool = True,
    ) -> BenchResult:
        """One repeat of ``workload`` against ``target``; see :func:`pytest_sskj.bench.run_bench`."""
        from pytest_sskj.bench.runner import run_bench as _run

        label = label or workload.label
        return _run(
            target_urls(target),
            workload,
            out_dir or self.out_dir(label),
            repeat=repeat,
            label=label,
            progress=progress,
            flush_cache=flush_cache,
        )

    def run_repeats(
        self,
        target: Target,
        workload: Workload,
        repeats: int | None = None,
        *,
        label: str = "",
        out_dir: Path | None = None,
        flush_cache: bool = True,
        show_progress: bool = False,
    ) -> RepeatsResult:
        """``repeats`` (default: the session's) repeats with fresh prompts; median and spread included."""
        from pytest_sskj.bench.result import RepeatsResult

        label = label or workload.label
        n = repeats if repeats is not None else self.settings.repeats
        results = []
        for r in range(n):
            cb = self.progress(label, repeat=r, repeats=n) if show_progress else None
            results.append(
                self.run(target, workload, repeat=r, label=label, out_dir=out_dir, progress=cb, flush_cache=flush_cache)
            )
        return RepeatsResult(results)


@pytest.fixture
def bench_client(request: pytest.FixtureRequest, sskj_settings: Settings, run_dir: Path) -> BenchHelper:
    """A :class:`BenchHelper` writing under ``<run dir>/bench/<test name>/``."""
    return BenchHelper(sskj_settings, run_dir / "bench" / _safe(request.node.name), request.config)


@pytest.fixture
def run_bench(bench_client: BenchHelper) -> Callable[..., BenchResult]:
    """``run_bench(target, workload, *, repeat=0, label="", progress=None, flush_cache=True) -> BenchResult``."""
    return bench_client.run
