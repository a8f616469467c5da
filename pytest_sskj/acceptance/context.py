"""The max-context-length probe in the acceptance run (issue 48, item 2): ``--sskj-max-context LO:HI`` finds, for
each arm's server, the largest input length it accepts and serves within the SLO, by bisection between the stated
bounds (:mod:`pytest_sskj.acceptance.context_probe`), and one verdict per arm says it -- ``max_context``
(``test_max_context[parallel-ctx]``).  It fails when the server does not serve even ``LO`` (the floor the user
states), and errors when the search could not finish (the server went away).  Every probe's outcome (accepted,
over_slo, rejected with the server's own message, oom, timeout, error, gone) is kept.

Which server answers: the arm's *host point* (the accuracy questions' one: repeat 1 at the first chunk, the first
concurrency and the first shape; one per layout), after its bench and its other probes, while it is up.  The
search is kept in that point's folder (``max-context.json``).  Its requests are never measured as throughput.

The interface: :class:`ContextKey`, :data:`OPTIONS`, :func:`keys`, :func:`not_applicable`, :func:`dry_run_lines`,
:func:`ttft_limit_ms`, :func:`describe`, :func:`ask_point` (the runner), :func:`verdict` (the session),
:func:`register`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.acceptance.accuracy import host_layouts, host_point
from pytest_sskj.acceptance.matrix import Point, arms, id_prefix
from pytest_sskj.options import Option
from pytest_sskj.options.row import MAX_TOKENS

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = [
    "FILE",
    "OPTIONS",
    "PARAM",
    "ContextKey",
    "ask_point",
    "describe",
    "dry_run_lines",
    "keys",
    "not_applicable",
    "parse_range",
    "register",
    "ttft_limit_ms",
    "verdict",
]

PARAM = "sskj_max_context"
FILE = "max-context.json"

OPTIONS: tuple[Option, ...] = (
    Option(
        "max_context",
        ("--sskj-max-context",),
        "size_range",
        "Max-context probe: LO:HI input tokens (e.g. 1K:256K); each backend's server is asked for the largest "
        "input length it accepts and serves within the SLO's TTFT bound, by bisection to one token (its advertised "
        "limit probed first); fails when not even LO is served; default none (no probe)",
        metavar="LO:HI",
        hi=MAX_TOKENS,
        unit="tokens",
        bound_why="the longest context of any model",
    ),
    Option(
        "max_context_timeout_s",
        ("--sskj-max-context-timeout",),
        "float",
        "Max-context probe: seconds one probe request may take before it counts as a timeout (default 300)",
        default=300.0,
        lo=0.0,
        lo_open=True,
        hi=3600.0,
        unit="s",
        bound_why="a single prefill of the longest context finishes well within an hour",
    ),
)
"""The probe's settings."""


def parse_range(text: str) -> tuple[int, int] | None:
    """``LO:HI`` (sizes: 1K:256K) -> ``(1024, 262144)``; ``none`` -> ``None``; else a ``ValueError``."""
    from pytest_sskj.parsing import parse_size

    if text.strip().lower() == "none":
        return None
    lo_text, sep, hi_text = text.partition(":")
    if not sep or ":" in hi_text:
        raise ValueError(f"{text!r} is not LO:HI (two token counts joined by ':', e.g. 1K:256K)")
    lo, hi = parse_size(lo_text.strip()), parse_size(hi_text.strip())
    if lo >= hi:
        raise ValueError(f"{text!r}: LO ({lo}) must be below HI ({hi}); e.g. 1K:256K")
    if hi > MAX_TOKENS:
        raise ValueError(f"{text!r}: HI ({hi}) is above {MAX_TOKENS} tokens, the longest context of any model")
    return lo, hi


def register(registry: Registry) -> None:
    """Add the probe's rows and the ``size_range`` parser."""
    registry.add_options(*OPTIONS)
    registry.add_parser("size_range", parse_range)


@dataclass(frozen=True)
class ContextKey:
    """One arm's max-context probe: ``parallel-ctx`` (``tp2dp4-parallel-ctx`` with layouts)."""

    backend: str
    layout: str | None = None

    @property
    def id(self) -> str:
        return f"{id_prefix(self.layout, None)}{self.backend}-ctx"


def keys(s: Settings) -> list[ContextKey]:
    """Every arm's probe in every layout (none without ``--sskj-max-context`` or serving points)."""
    if not_applicable(s, PARAM, True) is not None:
        return []
    return [ContextKey(b, lay) for lay in host_layouts(s) for b in arms(s.backends)]


def not_applicable(s: Settings, param: str, value: object) -> str | None:
    """Why ``test_max_context`` does not apply to this run (``None``: it does)."""
    if s.max_context is None:
        return "no max-context probe (--sskj-max-context none): give the bounds, e.g. --sskj-max-context 1K:256K"
    if not s.concurrencies:
        return "no fixed-concurrency points (no --concurrency): no server is up for the probe"
    return None


def ttft_limit_ms(s: Settings) -> float | None:
    """The SLO's tightest upper bound on a TTFT figure (one probe request's TTFT is judged by it), else ``None``."""
    bounds = [g.threshold for g in s.slo if "ttft" in g.metric and g.op in ("<", "<=")]
    return min(bounds) if bounds else None


def probe_limit(lo: int, hi: int) -> int:
    """Most probes one search sends: LO, HI, the advertised limit's two sides, then the bisection."""
    return 4 + max(1, math.ceil(math.log2(hi - lo)))


def describe(s: Settings) -> str:
    """The search in words: the bounds, the probes per arm at most, the SLO bound and the time bound (the dry run's
    line and the Allure step's title)."""
    assert s.max_context is not None
    lo, hi = s.max_context
    n = probe_limit(lo, hi)
    limit = ttft_limit_ms(s)
    slo = f"within the SLO's TTFT bound {limit:g} ms" if limit is not None else "no TTFT bound (no SLO on TTFT)"
    return (
        f"max context: ISL {lo}..{hi} by bisection, at most {n} probes of OSL 1 per arm ({slo}), each within "
        f"{s.max_context_timeout_s:g} s (at most {n * s.max_context_timeout_s / 60:.0f} min per arm)"
    )


def dry_run_lines(s: Settings) -> list[str]:
    """The plan's probe line: :func:`describe` and where the probes are asked."""
    if s.max_context is None:
        return []
    arm_list = arms(s.backends)
    where = ", ".join(host_point(s, b, lay).id for lay in host_layouts(s) for b in arm_list) if s.concurrencies else ""
    return [f"{describe(s)}; asked on {where or 'no server'}"]


def ask_point(s: Settings, url: str, dialect: str, out_dir: Path, model: str | None) -> dict[str, Any]:
    """Run the search against ``url`` (the caller's point is its arm's host point) and keep it in ``out_dir``."""
    from pytest_sskj.acceptance.context_probe import search
    from pytest_sskj.rundir import atomic_write_json

    assert s.max_context is not None
    lo, hi = s.max_context
    found = search(
        url,
        dialect,
        lo,
        hi,
        ttft_limit_ms=ttft_limit_ms(s),
        timeout_s=s.max_context_timeout_s,
        model=model,
        seed=s.seed,
        max_probes=probe_limit(lo, hi),
    )
    data = {"api": dialect, **found.as_dict()}
    atomic_write_json(out_dir / FILE, data)
    return data


def _line(p: dict[str, Any]) -> str:
    return f"{p['isl']} tokens: {p['outcome']}" + (f" ({p['message']})" if p.get("message") else "")


def verdict(key: ContextKey, host: Point, point_dir: Path, why_absent: str) -> dict[str, Any]:
    """The ``max_context`` verdict of one arm from its host point's folder (``why_absent``: what to say when the
    folder holds no search)."""
    base = {"kind": "max_context", "id": key.id, "backend": key.backend, "layout": key.layout, "host_point": host.id}
    try:
        d = json.loads((point_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {**base, "passed": None, "outcome": "error", "message": why_absent}
    probes, largest = d["probes"], d["largest"]
    failed = [p for p in probes if p["outcome"] != "accepted"]
    first_bad = min(failed, key=lambda p: p["isl"]) if failed else None
    adv = f"; advertised {d['advertised']} ({d['advertised_from']})" if d.get("advertised") else ""
    common = {**base, "largest_isl": largest, "lo": d["lo"], "hi": d["hi"], "probes": probes,
              "advertised": d.get("advertised"), "settled": d["settled"], "wall_s": d["wall_s"]}  # fmt: skip
    if largest is None:
        msg = f"{key.backend}: not even the stated floor was served: {_line(probes[0])}{adv}"
        if d.get("stopped"):
            return {**common, "passed": None, "outcome": "error", "message": msg}
        return {**common, "passed": False, "outcome": "below_floor", "message": msg}
    if d.get("stopped"):
        msg = f"{key.backend}: search unfinished at {largest} tokens served: {d['stopped']}{adv}"
        return {**common, "passed": None, "outcome": "error", "message": msg}
    if first_bad is None:
        msg = f"{key.backend}: served the upper bound {largest} tokens within the SLO ({len(probes)} probes){adv}"
        return {**common, "passed": True, "outcome": "at_least_hi", "message": msg}
    msg = (
        f"{key.backend}: largest input served within the SLO {largest} tokens; {_line(first_bad)} "
        f"({len(probes)} probes){adv}"
    )
    return {**common, "passed": True, "outcome": "found", "message": msg}
