"""Failure-message prefixes shared by the acceptance layer and the Allure categories.

A failing check starts its message with one of these tags (``f"{OOM} rank 3 ran out of memory ..."``) so
that ``categories.json`` (see :mod:`pytest_sskj.report.allure_env`) can sort failures into
environment (nodes on different builds), OOM, NCCL,
server crash, timeout, SLO miss, regression, client-bound, numerics mismatch and output mismatch (a candidate
backend that changes the generated tokens) without guessing from
free text.

A verdict's word is one of five, distinct everywhere it is shown (assertion text, terminal, summary.md, Allure, the
results database, export): a comparison is ``better``, ``worse`` (a significant loss), ``equivalent`` (within the
equivalence bound: not better) or ``inconclusive`` (the repeats could not decide); ``regression`` is only the
baseline gate's failure (this run against a stored baseline run).  :func:`verdict_tag` gives a failed comparison's
tag.  Each category also carries a few fallback regexes for failures that come from elsewhere
(pytest-timeout, CUDA, NCCL tracebacks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "CLIENT_BOUND",
    "CRASH",
    "ENVIRONMENT",
    "EQUIVALENT",
    "EXPECTATION",
    "INCONCLUSIVE",
    "NCCL",
    "NUMERICS",
    "OOM",
    "OUTPUT_MISMATCH",
    "REGRESSION",
    "SLO",
    "TIMEOUT",
    "WORSE",
    "Category",
    "categorize",
    "verdict_tag",
]

OOM = "[oom]"
ENVIRONMENT = "[environment]"
NCCL = "[nccl]"
CRASH = "[crash]"
TIMEOUT = "[timeout]"
SLO = "[slo]"
REGRESSION = "[regression]"
"""The baseline gate's failure only: a headline metric of this run fell below the stored baseline run's."""
WORSE = "[worse]"
"""A comparison whose candidate is significantly worse than the baseline."""
EQUIVALENT = "[equivalent]"
"""A comparison whose candidate is equivalent to the baseline (within the equivalence bound): not better."""
EXPECTATION = "[expectation]"
"""A result other than the one the run said to expect (``--expect-best-chunk``, ``--sskj-expect-layout``, a
throughput floor): neither a comparison's loss nor a regression against a baseline."""
CLIENT_BOUND = "[client-bound]"
NUMERICS = "[numerics]"
OUTPUT_MISMATCH = "[output-mismatch]"
INCONCLUSIVE = "[inconclusive]"
"""A comparison the repeats could not decide (not a regression): see its power-planner line."""


@dataclass(frozen=True)
class Category:
    """One Allure category: a display name, the tag our messages start with, and fallback regexes."""

    name: str
    tag: str
    fallbacks: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ("failed", "broken")

    @property
    def message_regex(self) -> str:
        """A regex over the whole failure message (Allure matches it with DOTALL semantics)."""
        alternatives = [re.escape(self.tag), *self.fallbacks]
        return r"(?s).*(" + "|".join(alternatives) + r").*"


CATEGORIES: tuple[Category, ...] = (
    Category("Environment", ENVIRONMENT, (r"EnvironmentMismatch",)),
    Category("Out of memory", OOM, (r"CUDA out of memory", r"OutOfMemoryError", r"\bOOM\b")),
    Category("NCCL error", NCCL, (r"NCCL (error|WARN|timeout)", r"ncclInternalError", r"ProcessGroupNCCL")),
    Category("Server crash", CRASH, (r"ServerCrashed", r"EngineDeadError", r"ServerLaunchError")),
    Category("Timeout", TIMEOUT, (r"Timeout >[0-9.]+s", r"HealthTimeout", r"TimeoutError")),
    Category("SLO miss", SLO),
    Category("Performance regression (baseline gate)", REGRESSION),
    Category("Comparison: worse", WORSE),
    Category("Comparison: equivalent, not better", EQUIVALENT),
    Category("Expectation not met", EXPECTATION),
    Category("Client-bound measurement", CLIENT_BOUND),
    Category("Numerics mismatch", NUMERICS, (r"Not equal to tolerance", r"Tensor-likes are not close")),
    Category("Output mismatch", OUTPUT_MISMATCH),
    Category("Inconclusive comparison", INCONCLUSIVE),
)


def categorize(message: str) -> str | None:
    """The name of the first category whose tag or fallback matches ``message``; ``None`` otherwise."""
    for cat in CATEGORIES:
        if re.fullmatch(cat.message_regex, message or ""):
            return cat.name
    return None


def verdict_tag(outcome: str) -> str:
    """The tag a comparison that did not come out ``better`` fails with: its own outcome, bracketed."""
    return {"worse": WORSE, "equivalent": EQUIVALENT, "inconclusive": INCONCLUSIVE}.get(outcome, f"[{outcome}]")
