"""The option rows the accuracy gates own (``--sskj-accuracy-*``), the parsers of their two value kinds and the
cross-setting check, all through the option schema: a bad set, margin or count is a usage error at parse time,
before anything is launched.

- ``--sskj-accuracy-set gsm8k=PATH``: the question file, read and checked when the options are parsed and pinned
  by sha256 and record count (:class:`SetRef`); the run reads it again and refuses a file that changed meanwhile.
- ``--sskj-accuracy-questions N`` (default 64), ``--sskj-accuracy-concurrency 1,8``,
  ``--sskj-accuracy-extract flexible|strict``, ``--sskj-accuracy-max-tokens N`` (default 256) and
  ``--sskj-accuracy-min delta>=-1pt`` (the non-inferiority margin; ``none``: scores only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.options.row import Option

if TYPE_CHECKING:
    from pytest_sskj.accuracy.gsm8k import QuestionSet
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = ["ACCURACY", "SETS", "SetRef", "parse_set", "register"]

SETS: Mapping[str, str] = {"gsm8k": "GSM8K's JSONL format (question, answer ending in '#### N')"}
"""The question-set formats by name (``--sskj-accuracy-set NAME=PATH``)."""
MAX_REQUESTS = 1_000_000
"""The most accuracy requests one run may plan (GSM8K's 1,319 questions x 8 concurrencies x 8 arms is 84,416)."""


@dataclass(frozen=True)
class SetRef:
    """A question file as checked at parse time: its set name, path, sha256 and record count (not its items)."""

    name: str
    path: Path
    sha256: str
    records: int

    def __str__(self) -> str:
        return f"{self.name}={self.path}"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "sha256": self.sha256, "records": self.records}

    def read(self) -> QuestionSet:
        """The whole set, read again; an :class:`~pytest_sskj.accuracy.gsm8k.AccuracySetError` when the file
        changed since the options were parsed (a run must ask the questions it announced)."""
        from pytest_sskj.accuracy.gsm8k import AccuracySetError, load

        qs = load(self.name, self.path)
        if qs.sha256 != self.sha256:
            raise AccuracySetError(
                f"{self}: the file changed during the run (sha256 {self.sha256[:12]}... at start, "
                f"{qs.sha256[:12]}... now); accepted: the file as it was when the run started; "
                "hint: keep question files read-only while a run uses them"
            )
        return qs


def parse_set(text: str) -> SetRef | None:
    """``gsm8k=PATH`` -> the checked file's :class:`SetRef`; ``none`` -> ``None``; ``ValueError`` otherwise."""
    from pytest_sskj.accuracy.gsm8k import AccuracySetError, load

    if text.strip().lower() == "none":
        return None
    name, sep, path = text.partition("=")
    name = name.strip()
    if not sep or not path.strip():
        shown = "PATH" if name in SETS or not name or sep else name
        raise ValueError(f"{text!r} is not NAME=PATH; hint: --sskj-accuracy-set gsm8k={shown}")
    if name not in SETS:
        raise ValueError(f"unknown question set {name!r} (known: {', '.join(SETS)}); hint: gsm8k={path.strip()}")
    try:
        qs = load(name, Path(path.strip()).expanduser())
    except AccuracySetError as exc:
        raise ValueError(str(exc)) from None
    except OSError as exc:  # unreadable (permissions, a folder, a broken link)
        raise ValueError(f"{text}: cannot be read ({exc.strerror or exc}); hint: check the path") from None
    return SetRef(name, qs.path, qs.sha256, qs.records)


def _parse_margin(text: str) -> Any:
    from pytest_sskj.accuracy.gate import MarginError, parse_margin

    try:
        return parse_margin(text)
    except MarginError as exc:
        raise ValueError(str(exc)) from None


ACCURACY: tuple[Option, ...] = (
    Option(
        "accuracy_set",
        ("--sskj-accuracy-set",),
        "accuracy_set",
        "Accuracy gates: the question file, gsm8k=PATH (GSM8K's JSONL: question, answer ending in '#### N'); "
        "each backend answers a fixed subset of it greedily while its server is up (docs/accuracy.md); "
        "checked and pinned by sha256 when the options are read; default none (no accuracy tests)",
        metavar="NAME=PATH",
    ),
    Option(
        "accuracy_questions",
        ("--sskj-accuracy-questions",),
        "int",
        "Accuracy gates: questions of the fixed seeded subset (default 64, the same indices on every run)",
        default=64,
        lo=1,
        hi=100_000,
        unit="questions",
        bound_why="more than any GSM-style set holds",
    ),
    Option(
        "accuracy_concurrencies",
        ("--sskj-accuracy-concurrency",),
        "int_list",
        "Accuracy gates: requests in flight while the questions are asked, each a separate score (default 1,8)",
        default="1,8",
        metavar="LIST",
        lo=1,
        hi=1024,
        unit="requests",
        bound_why="more than any question subset needs",
    ),
    Option(
        "accuracy_extract",
        ("--sskj-accuracy-extract",),
        "choice",
        "Accuracy gates: answer extraction, lm-eval's gsm8k filters: flexible (the last number, default) or "
        "strict (the first '#### N')",
        default="flexible",
        choices_of=("flexible", "strict"),
    ),
    Option(
        "accuracy_max_tokens",
        ("--sskj-accuracy-max-tokens",),
        "int",
        "Accuracy gates: most tokens of one answer (default 256)",
        default=256,
        lo=1,
        hi=32768,
        unit="tokens",
        bound_why="a worked answer is a few hundred tokens",
    ),
    Option(
        "accuracy_min",
        ("--sskj-accuracy-min",),
        "accuracy_margin",
        "Accuracy gates: the non-inferiority margin of every candidate against the baseline, in percentage points "
        "of exact match, e.g. delta>=-1pt; fails on too few questions to decide it (and says how many would); "
        "default none (scores recorded, no gate)",
        metavar="MARGIN",
    ),
)
"""The accuracy gates' settings."""

_TUNING = ("accuracy_questions", "accuracy_concurrencies", "accuracy_extract", "accuracy_max_tokens", "accuracy_min")


def check_accuracy(s: Settings, opts: Mapping[str, Option]) -> None:
    """An accuracy setting without a question set, or more questions than the set holds: a usage error."""
    import pytest

    from pytest_sskj.schema import accepted

    given = [d for d in _TUNING if s.sources.get(d) in ("cli", "env", "ini")]
    if s.accuracy_set is None and given:
        flags = ", ".join(opts[d].display for d in given)
        raise pytest.UsageError(
            f"{flags}: no question set to apply it to\n  accepted: {accepted(opts['accuracy_set'])}\n"
            f"  Hint: add --sskj-accuracy-set gsm8k=PATH (CI's stand-in: python -m pytest_sskj.accuracy.generate "
            f"--out FILE), or drop {flags}"
        )
    if s.accuracy_set is not None:
        asked = s.accuracy_questions * len(s.accuracy_concurrencies) * len(s.backends) * max(1, len(s.layouts))
        if asked > MAX_REQUESTS:
            raise pytest.UsageError(
                f"--sskj-accuracy-questions {s.accuracy_questions} x --sskj-accuracy-concurrency "
                f"{','.join(map(str, s.accuracy_concurrencies))} x {len(s.backends)} backend(s) x "
                f"{max(1, len(s.layouts))} layout(s) = {asked:,} greedy requests\n  accepted: at most "
                f"{MAX_REQUESTS:,} per run\n  Hint: fewer questions or accuracy concurrencies, or split the run"
            )
    if s.accuracy_set is not None and s.accuracy_questions > s.accuracy_set.records:
        raise pytest.UsageError(
            f"--sskj-accuracy-questions {s.accuracy_questions}: {s.accuracy_set} holds {s.accuracy_set.records} "
            f"record(s)\n  accepted: 1 to {s.accuracy_set.records}\n  Hint: ask for fewer, or name a larger file"
        )


def register(registry: Registry) -> None:
    """Add the accuracy rows, the ``accuracy_set`` and ``accuracy_margin`` parsers and the check."""
    registry.add_options(*ACCURACY)
    registry.add_parser("accuracy_set", parse_set)
    registry.add_parser("accuracy_margin", _parse_margin)
    registry.add_check(check_accuracy)
