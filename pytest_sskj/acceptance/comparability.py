"""Whether two measurements may be compared at all: their recorded engine facts must agree.

A comparison changes one dimension (the backend of an A/B; the run of a cross-run comparison) and
nothing else.  :func:`fact_differences` lists every recorded fact (engine and FlashInfer versions or
commits, torch, driver, CUDA, GPU SKU, model path, parallel sizes, ...) on which the two sides differ,
except the compared dimension and facts that describe one server start rather than what it ran
(``startup_s``).  A fact recorded on one side only counts as a difference: nothing proves the two
sides agree on it; except the build identity of every node (``build``, ``build.*``), which runs from before
it was recorded lack (its values, where both sides have them, still count: a different build is a different
environment).  :func:`spec_differences` does the same for two server specs of one run.  Callers
mark a comparison ``incomparable`` with these reasons (:func:`pytest_sskj.acceptance.compare.compare`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PER_START_FACTS", "fact_differences", "spec_differences"]

PER_START_FACTS = frozenset({"startup_s", "versions_error", "started_at", "pid", "port", "url", "urls"})
"""Facts of one server start, not of what it runs: never a reason to refuse a comparison."""

_BACKEND_FACTS = ("backend", "moe_runner_backend")


def _norm(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _norm(x) for k, x in v.items()}
    return v


def _is_build_fact(key: str) -> bool:
    """The every-node build identity (:func:`pytest_sskj.identity.build_facts`: ``build``, ``build.sglang.commit``)."""
    return key == "build" or key.startswith("build.")


def fact_differences(
    a: Mapping[str, Any], b: Mapping[str, Any], *, compared: Iterable[str] = _BACKEND_FACTS
) -> list[str]:
    """``["driver: '550.54' vs '560.35'", ...]`` for every fact the two sides do not share."""
    skip = PER_START_FACTS | set(compared)
    out = []
    for key in sorted((set(a) | set(b)) - skip):
        if _is_build_fact(key) and (key not in a or key not in b):
            continue  # the build identity of a run recorded before nodes were probed: only values that differ count
        va, vb = _norm(a.get(key)), _norm(b.get(key))
        if va != vb:
            out.append(f"{key}: {va!r} vs {vb!r}")
    return out


def spec_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Differences of two server specs (``ServerSpec.as_dict()``) beyond backend, A/A instance and port."""
    return fact_differences(a, b, compared=("backend", "instance", "labels", "port"))
