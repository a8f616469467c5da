"""Telemetry during every serving point: GPU power/clock/memory/utilisation on every node (NVML) and the
engine's own Prometheus ``/metrics``, stored with the point, summarised into its row, plotted, flagged.

The interface (everything callers use):

- :func:`point_telemetry` ``(server, launcher, out_dir, interval_s=, python=)``: a context manager around a
  point's measured phase; yields a :class:`PointTelemetry` whose records land in
  ``<point dir>/telemetry.jsonl`` when the block ends.
- :meth:`PointTelemetry.summary` ``(client_row, tolerance_pct=)`` -> the row's telemetry columns and
  ``telemetry_flags`` (:mod:`~pytest_sskj.telemetry.summary`: mean power, min SM clock, server-side
  generation throughput, throughput disagreement, clock throttling, foreign GPU processes).
- :func:`plot_point` ``(path, out_png)``: power, SM clock and the server's token throughput over the point,
  next to the client's throughput.
- :data:`THROUGHPUT_TOLERANCE_PCT`: the stated default tolerance between the two throughputs.
"""

from __future__ import annotations

from pytest_sskj.telemetry.plot import plot_point
from pytest_sskj.telemetry.point import PointTelemetry, point_telemetry, read_gpu_log
from pytest_sskj.telemetry.summary import THROUGHPUT_TOLERANCE_PCT, summarise

__all__ = ["THROUGHPUT_TOLERANCE_PCT", "PointTelemetry", "plot_point", "point_telemetry", "read_gpu_log", "summarise"]
