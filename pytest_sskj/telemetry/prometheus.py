"""The engine's own Prometheus ``/metrics``: text-format parsing and the counters a point is judged by.

SGLang (``--enable-metrics``) and vLLM both serve ``/metrics`` on the API port.  :func:`parse` reads the
text exposition format into ``{name: summed value}`` (label sets summed: one engine, several ranks or
models; ``_bucket``/``_created`` series left out).  :data:`KEPT` lists the series a telemetry sample keeps:
token counters (``<engine>:generation_tokens_total``, ``<engine>:prompt_tokens_total``), running/queued
requests, KV-cache use and SGLang's own ``gen_throughput`` gauge.
"""

from __future__ import annotations

import math
import re

__all__ = ["GENERATION_COUNTERS", "KEPT", "SPEC_COUNTERS", "generation_tokens", "parse", "spec_counters"]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")

KEPT = (
    "generation_tokens_total",
    "prompt_tokens_total",
    "num_requests_running",
    "num_requests_waiting",
    "num_running_reqs",
    "num_queue_reqs",
    "gen_throughput",
    "kv_cache_usage_perc",
    "gpu_cache_usage_perc",
    "token_usage",
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
)
"""Suffixes (after ``vllm:`` / ``sglang:`` / ``llamacpp:``) of the series kept in each sample (the speculative
decoding counters are vLLM's and llama.cpp's: verification steps, draft tokens proposed, draft tokens accepted)."""

SPEC_COUNTERS = {
    "steps": "spec_decode_num_drafts_total",
    "draft": "spec_decode_num_draft_tokens_total",
    "accepted": "spec_decode_num_accepted_tokens_total",
}
"""The speculative-decoding counters by meaning (suffixes of :data:`KEPT`)."""

GENERATION_COUNTERS = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")


def parse(text: str) -> dict[str, float]:
    """``{series name: value summed over its label sets}`` for the kept series of a ``/metrics`` body."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name = m.group(1)
        if name.rsplit(":", 1)[-1] not in KEPT:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[name] = out.get(name, 0.0) + value
    return out


def generation_tokens(sample: dict[str, float]) -> float | None:
    """The engine's cumulative generated-token counter in one parsed sample (``None``: the engine has none)."""
    for name in GENERATION_COUNTERS:
        if name in sample:
            return sample[name]
    return None


def spec_counters(sample: dict[str, float]) -> dict[str, float] | None:
    """The speculative-decoding counters of one parsed sample (``steps``, ``draft``, ``accepted``), whatever the
    engine's prefix; ``None`` when the engine exports none of them."""
    found = {
        key: sum(v for name, v in sample.items() if name.rsplit(":", 1)[-1] == suffix)
        for key, suffix in SPEC_COUNTERS.items()
        if any(name.rsplit(":", 1)[-1] == suffix for name in sample)
    }
    return found or None
