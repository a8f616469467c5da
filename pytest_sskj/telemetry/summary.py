"""A point's telemetry summarised into its row, and the flags a reader must see.

Row columns (units in the names, ``None`` when not measured, never 0):

- ``gpu_power_mean_w`` (mean over every sample of every GPU of every node), ``gpu_sm_clock_min_mhz``,
  ``gpu_util_mean_pct``, ``gpu_mem_used_max_mib``, ``gpu_samples``; ``telemetry_gpu``: why there is no
  GPU telemetry (``no pynvml ...``, ``NVML: ...``) when none was sampled;
- ``server_output_tokens``: the engine's generated-token counter delta over the measured phase (warmup
  included: the bench sends it inside the phase), ``server_output_throughput``: that delta over the phase's
  wall time (tok/s), ``server_client_throughput_diff_pct``: how far the client's ``output_throughput``
  is from it, in percent of the server's;
- ``spec_verify_steps``, ``spec_draft_tokens``, ``spec_accepted_tokens``: the engine's speculative-decoding counter
  deltas over the phase (vLLM's and llama.cpp's ``spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total``;
  SGLang exports no such counter: its per-request ``meta_info`` counts summed over the completed requests),
  ``spec_accept_rate``: accepted / draft tokens (a fraction, without the bonus token), ``spec_accept_length``: 1 +
  accepted / steps (tokens per verification step, the bonus token included: vLLM's "mean acceptance length");
  ``None`` when the engine exports no such counter or proposed no draft (speculative decoding off);
- ``telemetry_flags``: ``throughput disagreement`` when that difference exceeds the stated tolerance
  (``--sskj-telemetry-tolerance``-free: :data:`THROUGHPUT_TOLERANCE_PCT` unless the caller passes another),
  ``clock throttling`` (an NVML clock-event reason such as ``sw_power_cap``/``hw_slowdown``/``sw_thermal``
  during the point, naming node, GPU and reasons), ``foreign GPU process`` (a process on a GPU of a node
  that is not part of the server's process trees there).

The two throughputs measure different windows (the server's counter includes the warmup requests and
the scrape interval's edges, the client's only the measured requests), so the tolerance is a sanity check
that the client measures what the engine serves, not a benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_sskj.bench.metrics import SPEC_REQUEST_KEYS
from pytest_sskj.telemetry.prometheus import generation_tokens, spec_counters

if TYPE_CHECKING:
    from pytest_sskj.telemetry.point import PointTelemetry

__all__ = ["THROUGHPUT_TOLERANCE_PCT", "summarise"]

THROUGHPUT_TOLERANCE_PCT = 25.0
"""Default tolerance between the server's own and the client's output throughput (percent of the server's)."""


@dataclass
class _GpuTally:
    """Every GPU sample of a point, gathered per column, with the throttled and foreign-process GPUs."""

    samples: dict[str, list[float]] = field(
        default_factory=lambda: {"power_w": [], "sm_clock_mhz": [], "util_pct": [], "mem_used_mib": []}
    )
    throttled: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    foreign: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    n: int = 0

    def add(self, rec: Mapping[str, Any], own: set[Any]) -> None:
        """One ``gpu`` record of a node: each GPU's readings, throttle reasons and processes not in ``own``."""
        for g in rec.get("gpus") or []:
            self.n += 1
            for key, sink in self.samples.items():
                if isinstance(g.get(key), (int, float)):
                    sink.append(float(g[key]))
            where = (str(rec.get("node")), int(g.get("index", -1)))
            if g.get("throttle"):
                self.throttled.setdefault(where, set()).update(g["throttle"])
            for pid, name in g.get("pids") or []:
                if own and pid not in own:
                    self.foreign.setdefault(where, set()).add(f"{pid} ({name or '?'})")

    def columns(self) -> dict[str, Any]:
        power, clock, util, mem = (self.samples[k] for k in ("power_w", "sm_clock_mhz", "util_pct", "mem_used_mib"))
        return {
            "gpu_samples": self.n or None,
            "gpu_power_mean_w": round(sum(power) / len(power), 1) if power else None,
            "gpu_sm_clock_min_mhz": min(clock) if clock else None,
            "gpu_util_mean_pct": round(sum(util) / len(util), 1) if util else None,
            "gpu_mem_used_max_mib": max(mem) if mem else None,
            "telemetry_gpu": "; ".join(dict.fromkeys(self.reasons)) if not self.n and self.reasons else None,
        }

    def flags(self) -> list[str]:
        return [
            f"clock throttling on {node} GPU {i}: {', '.join(sorted(r))}"
            for (node, i), r in sorted(self.throttled.items())
        ] + [
            f"foreign GPU process on {node} GPU {i}: {', '.join(sorted(p))}"
            for (node, i), p in sorted(self.foreign.items())
        ]


def _gpu_columns(tel: PointTelemetry) -> tuple[dict[str, Any], list[str]]:
    tally = _GpuTally()
    for rec in tel.records:
        if rec.get("source") != "gpu":
            continue
        if rec.get("unavailable"):
            tally.reasons.append(f"{rec.get('node')}: {rec['unavailable']}")
            continue
        tally.add(rec, set(tel.server_pids.get(str(rec.get("node")), ())))
    return tally.columns(), tally.flags()


def _server_columns(
    tel: PointTelemetry, client: Mapping[str, Any], tolerance_pct: float
) -> tuple[dict[str, Any], list[str]]:
    samples = [
        (float(r["t"]), generation_tokens(r.get("values") or {})) for r in tel.records if r.get("source") == "metrics"
    ]
    counted = [(t, v) for t, v in samples if v is not None]
    cols: dict[str, Any] = {"server_output_tokens": None, "server_output_throughput": None}
    if len(counted) < 2 or counted[-1][0] <= counted[0][0]:
        cols["server_client_throughput_diff_pct"] = None
        return cols, []
    (t0, v0), (t1, v1) = counted[0], counted[-1]
    server_tps = (v1 - v0) / (t1 - t0)
    cols["server_output_tokens"] = int(v1 - v0)
    cols["server_output_throughput"] = round(server_tps, 3)
    client_tps = client.get("output_throughput")
    if not isinstance(client_tps, (int, float)) or server_tps <= 0:
        cols["server_client_throughput_diff_pct"] = None
        return cols, []
    diff = 100.0 * (float(client_tps) - server_tps) / server_tps
    cols["server_client_throughput_diff_pct"] = round(diff, 1)
    if abs(diff) > tolerance_pct:
        return cols, [
            f"throughput disagreement: client {float(client_tps):.1f} tok/s vs server {server_tps:.1f} tok/s "
            f"({diff:+.1f} %, tolerance ±{tolerance_pct:g} %)"
        ]
    return cols, []


SPEC_COLUMNS = ("spec_verify_steps", "spec_draft_tokens", "spec_accepted_tokens", "spec_accept_rate",
                "spec_accept_length")  # fmt: skip


def _spec_columns(tel: PointTelemetry, client: Mapping[str, Any]) -> dict[str, Any]:
    """The speculative-decoding columns (module docstring) from the first and last ``/metrics`` samples; where the
    engine exports no counters (SGLang: gauges only), from its per-request counts the client summed."""
    counted = [c for r in tel.records if r.get("source") == "metrics" and (c := spec_counters(r.get("values") or {}))]
    cols: dict[str, Any] = dict.fromkeys(SPEC_COLUMNS)
    per_request = [v for k in SPEC_REQUEST_KEYS if isinstance(v := client.get(k), int)]  # steps, accepted, drafts
    if len(counted) >= 2:
        first, last = counted[0], counted[-1]
        delta = {k: last.get(k, 0.0) - first.get(k, 0.0) for k in ("steps", "draft", "accepted")}
    elif len(per_request) == len(SPEC_REQUEST_KEYS):
        delta = {k: float(v) for k, v in zip(("steps", "accepted", "draft"), per_request, strict=True)}
    else:
        return cols
    if delta["draft"] <= 0:
        return cols
    cols.update(
        spec_verify_steps=int(delta["steps"]),
        spec_draft_tokens=int(delta["draft"]),
        spec_accepted_tokens=int(delta["accepted"]),
        spec_accept_rate=round(delta["accepted"] / delta["draft"], 4),
        spec_accept_length=round(1 + delta["accepted"] / delta["steps"], 4) if delta["steps"] > 0 else None,
    )
    return cols


def summarise(
    tel: PointTelemetry, client: Mapping[str, Any], *, tolerance_pct: float = THROUGHPUT_TOLERANCE_PCT
) -> dict[str, Any]:
    """The row's telemetry columns (see the module docstring) and ``telemetry_flags``."""
    gpu, gflags = _gpu_columns(tel)
    srv, sflags = _server_columns(tel, client, tolerance_pct)
    return {
        **gpu,
        **srv,
        **_spec_columns(tel, client),
        "telemetry_flags": [*sflags, *gflags],
        "telemetry_errors": list(tel.errors),
        "telemetry_file": tel.path.name,
    }
