"""The twin's speculative decoding: a model file's ``[speculative]`` table and the draft it drives.

A stand-in server launched with ``--speculative-algorithm`` decodes in verify steps: each step proposes ``d`` draft
tokens (sglang's ``speculative_num_draft_tokens - 1``), accepts each in turn with the model file's acceptance
probability until the first rejection, and emits the accepted tokens plus the target's own (the bonus token); a
step costs ``1 + draft_cost * d`` plain decode steps (the draft's forward passes and the wider verify).  So a high
acceptance rate buys output throughput and a low one costs it -- the A/B must say so.  The counts are what sglang
reports per request in ``meta_info`` (``spec_verify_ct``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``).

``[speculative]``::

    draft_cost = 0.1                 # a draft token's cost in target decode steps (required)
    [speculative.accept_rate]        # the probability that a draft token is accepted, by backend or backend/ALGORITHM
    marlin = 0.75
    "marlin/NGRAM" = 0.05            # the more specific key wins

Stdlib only: this module runs inside the stand-in ranks on the nodes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Draft", "SpecModel", "SpecModelError", "load_speculative"]

_KEYS = ("draft_cost", "accept_rate")


class SpecModelError(ValueError):
    """A malformed ``[speculative]`` table (the model loader turns it into its own error)."""


@dataclass(frozen=True)
class SpecModel:
    """``[speculative]``: acceptance probability by backend (``marlin``) or backend and algorithm
    (``marlin/NGRAM``), and a draft token's cost in target decode steps."""

    accept_rate: Mapping[str, float]
    draft_cost: float

    def rate(self, backend: str, algorithm: str) -> float | None:
        """The acceptance probability of ``algorithm`` on ``backend`` (``None``: the file does not say)."""
        return self.accept_rate.get(f"{backend}/{algorithm.upper()}", self.accept_rate.get(backend))


def _fraction(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
        raise SpecModelError(f"{what} must be a probability in [0, 1], got {v!r}")
    return float(v)


def load_speculative(raw: Any) -> SpecModel | None:
    """The ``[speculative]`` table (``None`` when the file has none); :class:`SpecModelError` saying what is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SpecModelError(f"speculative must be a table (draft_cost, [speculative.accept_rate]), got {raw!r}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise SpecModelError(f"speculative: unknown key(s) {', '.join(unknown)} (accepted: {', '.join(_KEYS)})")
    cost = raw.get("draft_cost")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or not 0 <= cost <= 10:
        raise SpecModelError(f"speculative.draft_cost must be a number in [0, 10] (target decode steps), got {cost!r}")
    rates = raw.get("accept_rate")
    if not isinstance(rates, Mapping) or not rates:
        raise SpecModelError("speculative.accept_rate must be a table of backend (or backend/ALGORITHM) = probability")
    accept = {str(k): _fraction(v, f"speculative.accept_rate.{k}") for k, v in rates.items()}
    return SpecModel(accept, float(cost))


class Draft:
    """The draft of one stand-in server: ``proposed`` draft tokens per verify step, accepted with probability
    ``rate`` each until the first rejection; draws seeded per request (an A/A pair draws alike)."""

    def __init__(self, rate: float, proposed: int, draft_cost: float, seed: str) -> None:
        if proposed < 1:
            raise ValueError(f"a draft proposes at least one token per step, not {proposed}")
        self.rate, self.proposed, self.seed = rate, proposed, seed
        self.step_cost = 1.0 + draft_cost * proposed
        """A verify step's duration in plain decode steps."""

    def stream(self, request: int) -> random.Random:
        """The draw stream of the ``request``-th request of the server."""
        return random.Random(f"{self.seed}/{request}")

    def accepted(self, rng: random.Random) -> int:
        """Draft tokens accepted in one verify step."""
        n = 0
        while n < self.proposed and rng.random() < self.rate:
            n += 1
        return n
