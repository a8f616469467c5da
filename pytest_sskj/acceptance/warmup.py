"""Where a point's warmup is sent: by its bench, on its prepared server beforehand, or not at all.

The bench sends a repeat's warmup requests (``--sskj-warmup``, sglang's 1) right before its measured phase,
so on a server that was just started they lie between two measured phases.  :class:`Warmups` moves them
off that path without changing what is measured:

- a server the pool starts early (``ServingPool.prepare``, while the previous point's post-bench phases
  run) gets the next point's warmup on the preparing thread, once healthy (:meth:`Warmups.hook`); that
  point's bench records those requests as its warmup and sends none (``BenchFn``'s ``warmed``);
- a server that already ran a measured phase (the next concurrency of a search, the points of one repeat
  sharing a server) is warm: its next bench sends no warmup (``warmed=[]``; the row's ``warmup`` is 0).

The plan of the repeat is the same in every case (the warmup prompts keep their numbers), so both arms of
an A/B and every repeat still see identical measured prompts.  A prepared warmup with a failed request is
not used: the bench then sends its own, and its records say what failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sskj.bench.client import BenchTimeouts
    from pytest_sskj.bench.records import RequestRecord
    from pytest_sskj.bench.workload import Workload
    from pytest_sskj.server.serving import Serving

__all__ = ["Warmups"]

_log = logging.getLogger(__name__)


class Warmups:
    """One per runner: the warmups sent to prepared servers, by point id, and the last server benched."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[Serving, list[RequestRecord]]] = {}
        self._warm: Serving | None = None

    def hook(
        self, point_id: str, workload: Workload, repeat: int, timeouts: BenchTimeouts
    ) -> Callable[[Serving], None]:
        """What the pool calls with the prepared server once it is healthy (on its preparing thread): send
        ``point_id``'s warmup there and keep the records for that point's bench."""

        def warm(server: Serving) -> None:
            if workload.warmup <= 0 or server.external:
                return
            earlier = self._sent.get(point_id)
            if earlier is not None and earlier[0] is server:  # warmed for this point already (a spare kept on)
                return
            from pytest_sskj.bench.runner import run_warmup

            try:
                records = run_warmup(server.urls, workload, repeat=repeat, label=point_id, timeouts=timeouts)
            except Exception as exc:  # the bench sends the warmup itself, and reports what fails then
                _log.info("pytest-sskj: the early warmup of %s failed (%s); its bench sends it", point_id, exc)
                return
            if all(r.ok for r in records):
                self._sent[point_id] = (server, records)

        return warm

    def done(self, point_id: str, server: Serving) -> list[RequestRecord] | None:
        """The warmup ``point_id``'s bench on ``server`` need not send: the records sent to this very server
        early, ``[]`` when the server already ran a measured phase, ``None`` (the bench sends it) else."""
        sent = self._sent.pop(point_id, None)
        if sent is not None and sent[0] is server:
            return sent[1]
        if self._warm is not None and self._warm is server:
            return []
        return None

    def benched(self, server: Serving) -> None:
        """``server`` ran a measured phase: it is warm for the points that reuse it."""
        self._warm = server
