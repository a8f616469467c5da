"""Time and memory budgets of a plan's points (issue 48, item 3: long-context matrices up to 256K in / 4K out).

A serving point's **time budget** is what pytest-timeout allows it: the engine's fixed allowance
(``Engine.point_budget_s``), or -- when the shape needs more -- its work at *floor rates*: the slowest prefill
throughput and the longest decode step the job expects of a healthy server (``--sskj-budget-prefill-tps``, default
2000 tokens/s; ``--sskj-budget-tpot-ms``, default 200 ms).  A repeat of ``requests`` at concurrency ``C`` runs
``ceil(requests / C)`` waves; a wave prefills its ``C`` prompts one after another at the floor rate and then decodes
``OSL`` steps::

    work_s = waves x (C x ISL / prefill_tps + OSL x tpot_s)      budget_s = max(engine allowance, work_s)

(the warmup requests add one more wave).  So a 256K-in / 4K-out point on sglang is allowed hours where a 1K point is
allowed the engine's 15 minutes, and a healthy long-context point is never killed as a hang.  A point's **memory
budget** is the KV cache its requests hold at once: ``min(C, requests) x (ISL + OSL)`` tokens.

The dry run states both for every shape and concurrency, and the plan's total work at the floor rates (the most a
healthy run spends measuring; the hang allowances and server starts come on top); a plan whose total exceeds
``--sskj-plan-budget`` (hours, default 72) is refused at parse time, naming its size and the bound.

The interface: :data:`OPTIONS`, :func:`cells`, :func:`work_s`, :func:`point_budget_s`, :func:`kv_tokens`,
:func:`plan_budget_s`, :func:`dry_run_lines`, :func:`register`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_sskj.options import Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = ["OPTIONS", "cells", "dry_run_lines", "kv_tokens", "plan_budget_s", "point_budget_s", "register", "work_s"]

OPTIONS: tuple[Option, ...] = (
    Option(
        "budget_prefill_tps",
        ("--sskj-budget-prefill-tps",),
        "float",
        "Time budgets: the slowest prefill throughput (tokens/s per server) a healthy server of this job has; a "
        "point whose shape needs more time than the engine's allowance at this rate is allowed that time "
        "(default 2000)",
        default=2000.0,
        lo=1.0,
        hi=1e9,
        unit="tokens/s",
        bound_why="no server prefills a billion tokens a second",
    ),
    Option(
        "budget_tpot_ms",
        ("--sskj-budget-tpot-ms",),
        "float",
        "Time budgets: the longest decode step (ms per output token) a healthy server of this job has (default 200)",
        default=200.0,
        lo=0.0,
        lo_open=True,
        hi=60_000.0,
        unit="ms",
        bound_why="a decode step of a minute is a hang",
    ),
    Option(
        "plan_budget_h",
        ("--sskj-plan-budget",),
        "float",
        "Time budgets: the most hours of floor-rate work the whole plan may hold (every point's requests at "
        "--sskj-budget-prefill-tps and --sskj-budget-tpot-ms); a plan past it is refused at parse time (default 72)",
        default=72.0,
        lo=0.0,
        lo_open=True,
        hi=24.0 * 366,
        unit="h",
        bound_why="a year",
    ),
)
"""The budget settings."""


def _floors(s: Settings) -> tuple[float, float]:
    """(prefill tokens/s, decode seconds per token) at the job's floor rates."""
    return s.budget_prefill_tps, s.budget_tpot_ms / 1000.0


def work_s(s: Settings, isl: int, osl: int, concurrency: int) -> float:
    """Seconds one repeat of ``requests`` (plus the warmup) takes at the floor rates (see the module text)."""
    tps, tpot_s = _floors(s)
    c = max(1, min(concurrency, s.requests))
    waves = math.ceil(s.requests / c) + (1 if s.warmup else 0)
    return waves * (c * isl / tps + osl * tpot_s)


def point_budget_s(s: Settings, isl: int, osl: int, concurrency: int) -> float:
    """What pytest-timeout allows one serving point of this shape: the engine's allowance or its floor-rate work."""
    from pytest_sskj.engines import get_engine

    fixed = max(get_engine(s.engine).point_budget_s, s.stall_timeout_s + 30.0)
    return max(fixed, work_s(s, isl, osl, concurrency))


def kv_tokens(s: Settings, isl: int, osl: int, concurrency: int) -> int:
    """The KV cache one point's requests hold at once, in tokens."""
    return max(1, min(concurrency, s.requests)) * (isl + osl)


def cells(s: Settings) -> list[tuple[int, int, int]]:
    """Every (ISL, OSL, C) of the plan (a search's points: C = the request count, its widest)."""
    shapes = list(s.shapes) or [(s.isl, s.osl)]
    return [(i, o, c) for i, o in shapes for c in (s.concurrencies or (s.requests,))]


def plan_budget_s(s: Settings) -> tuple[float, int]:
    """The whole plan's work at the floor rates (the most a healthy run takes measuring, not its hang allowances)
    and its point count."""
    from pytest_sskj.validate import plan_size

    points, _ = plan_size(s)
    every = cells(s)
    per_cell = points / len(every)  # layouts x chunks x backends x repeats of each (shape, C)
    return sum(work_s(s, i, o, c) for i, o, c in every) * per_cell, points


def _tokens(n: int) -> str:
    return f"{n / 1024 / 1024:.2f}M" if n >= 1024 * 1024 else (f"{n / 1024:.0f}K" if n >= 1024 else str(n))


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def dry_run_lines(s: Settings) -> list[str]:
    """Each shape and concurrency's time and memory budget per point, and the plan's total against its bound."""
    tps, tpot_s = _floors(s)
    lines = [f"budgets per point (floor rates {tps:g} prefill tokens/s, {tpot_s * 1000:g} ms TPOT; KV held at once):"]
    for i, o, c in cells(s):
        lines.append(
            f"  ISL {i} / OSL {o} at C={c}: time {_duration(point_budget_s(s, i, o, c))} "
            f"(floor-rate work {_duration(work_s(s, i, o, c))}), KV {min(c, s.requests)} x {i + o} = "
            f"{_tokens(kv_tokens(s, i, o, c))} tokens"
        )
    total, points = plan_budget_s(s)
    lines.append(
        f"plan budget: {points} point(s), {_duration(total)} of floor-rate work (bound --sskj-plan-budget "
        f"{s.plan_budget_h:g} h), plus a server start per point (each allowed {_duration(s.health_timeout_s)})"
    )
    return lines


def check_budget(s: Settings, opts: Mapping[str, Option]) -> None:
    """A plan whose time budget exceeds ``--sskj-plan-budget`` is refused, naming its size and the bound."""
    from pytest_sskj.validate import MAX_MODEL_TOKENS, MAX_PLAN_POINTS, plan_size, usage

    if plan_size(s)[0] > MAX_PLAN_POINTS or any(i + o > MAX_MODEL_TOKENS for i, o, _ in cells(s)):
        return  # the plan-size and shape checks (validate.py, next) say so, in their own words
    total, points = plan_budget_s(s)
    if total > s.plan_budget_h * 3600:
        worst = max(cells(s), key=lambda x: work_s(s, *x))
        raise usage(
            f"the plan's {points} point(s) are {_duration(total)} of work at the floor rates, past "
            f"--sskj-plan-budget {s.plan_budget_h:g} h (its longest point: ISL {worst[0]} / OSL {worst[1]} at "
            f"C={worst[2]}, {_duration(work_s(s, *worst))})",
            f"a plan within {s.plan_budget_h:g} h at the floor rates (--sskj-budget-prefill-tps, "
            "--sskj-budget-tpot-ms)",
            "fewer shapes, requests or repeats, split the job, or raise the bound: --sskj-plan-budget 168",
        )


def register(registry: Registry) -> None:
    """Add the budget rows and the plan-budget check."""
    registry.add_options(*OPTIONS)
    registry.add_check(check_budget)
