"""Chunk curves: per backend and concurrency, input throughput and TTFT across chunked-prefill sizes.

Each chunk's values are medians over repeats (as in the users' tables).  The best chunk has the highest
median input throughput (ties: lower TTFT P50).  With ``--expect-best-chunk`` the curve becomes a
verdict: the expected chunk must be the best one, and the message names every chunk's distance from
the best so "8K beats 4K and 16K" reads off the failure directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_sskj.acceptance.compare import fmt_pct, median

__all__ = ["ChunkPoint", "Curve", "build_curve"]


@dataclass(frozen=True)
class ChunkPoint:
    """One chunk on the curve: medians over its repeats."""

    chunk: int | None
    input_tps: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    repeats: int


@dataclass(frozen=True)
class Curve:
    """The chunk curve of one backend at one concurrency."""

    backend: str
    concurrency: int
    points: tuple[ChunkPoint, ...]
    expected_best: int | None = None

    @property
    def best(self) -> ChunkPoint | None:
        """The chunk with the highest median input TPS (ties: lower TTFT P50); ``None`` without data."""
        measured = [p for p in self.points if p.input_tps is not None]
        if not measured:
            return None
        return max(
            measured,
            key=lambda p: (p.input_tps or 0.0, -(p.ttft_p50_ms if p.ttft_p50_ms is not None else float("inf"))),
        )

    @property
    def passed(self) -> bool | None:
        """``None`` without an expectation; else whether the expected chunk is the best."""
        if self.expected_best is None:
            return None
        best = self.best
        return best is not None and best.chunk == self.expected_best

    def describe(self) -> str:
        """``marlin C=8: best chunk 8192 (2935.02 input TPS); 4096 −8.19 % TPS, 16384 −4.16 % TPS``."""
        best = self.best
        if best is None:
            return f"{self.backend} C={self.concurrency}: no measured chunk"
        others = []
        for p in self.points:
            if p is best:
                continue
            if p.input_tps is None or not best.input_tps:
                others.append(f"{p.chunk} not measured")
            else:
                others.append(f"{p.chunk} {fmt_pct((p.input_tps / best.input_tps - 1) * 100)} TPS")
        ttft = f", TTFT P50 {best.ttft_p50_ms:.1f} ms" if best.ttft_p50_ms is not None else ""
        text = f"{self.backend} C={self.concurrency}: best chunk {best.chunk} ({best.input_tps:.2f} input TPS{ttft})"
        if others:
            text += "; " + ", ".join(others)
        if self.expected_best is not None:
            text += f"; expected best {self.expected_best}: " + ("met" if self.passed else "NOT met")
        return text

    def as_dict(self) -> dict[str, Any]:
        """The verdict; each point's medians under their registry names (:mod:`pytest_sskj.vocabulary`)."""
        best = self.best
        return {
            "backend": self.backend,
            "concurrency": self.concurrency,
            "best_chunk": best.chunk if best else None,
            "expected_best_chunk": self.expected_best,
            "passed": self.passed,
            "message": self.describe(),
            "points": [
                {
                    "chunk": p.chunk,
                    "input_throughput": p.input_tps,
                    "median_ttft_ms": p.ttft_p50_ms,
                    "p95_ttft_ms": p.ttft_p95_ms,
                    "repeats": p.repeats,
                }
                for p in self.points
            ],
        }


def _num(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) else None


def build_curve(
    backend: str,
    concurrency: int,
    rows_by_chunk: Mapping[int | None, Sequence[Mapping[str, Any]]],
    *,
    expected_best: int | None = None,
) -> Curve:
    """Build the curve from the result rows of each chunk (only rows with status ``passed`` count)."""
    pts = []
    for chunk, rows in rows_by_chunk.items():
        ok = [r for r in rows if r.get("status") == "passed"]
        pts.append(
            ChunkPoint(
                chunk,
                median([v for r in ok if (v := _num(r, "input_throughput")) is not None]),
                median([v for r in ok if (v := _num(r, "median_ttft_ms")) is not None]),
                median([v for r in ok if (v := _num(r, "p95_ttft_ms")) is not None]),
                len(ok),
            )
        )
    return Curve(backend, concurrency, tuple(pts), expected_best)
