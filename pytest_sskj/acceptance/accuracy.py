"""Accuracy in the acceptance run (issue 51): each arm's server answers the fixed questions while it is up, and two
verdict kinds judge them -- ``accuracy`` (one arm's exact-match score at one accuracy concurrency; it fails when a
question went unanswered) and ``accuracy_gate`` (a candidate's paired non-inferiority against the baseline at
``--sskj-accuracy-min``; docs/accuracy.md).

Which server answers: the arm's *host point*, its first serving point (repeat 1 at the first chunk, the first
concurrency and the first shape; one per layout).  Its answers are kept in that point's folder, one JSON line per
question (``accuracy-c<C>.jsonl``) and a summary (``accuracy-c<C>.json``: the set's manifest, the API, the wall
time, the score).

The interface: :class:`AccuracyKey`, :class:`AccuracyComparison`, :func:`keys`, :func:`comparisons`,
:func:`host_point`, :func:`ask_point` (the runner, while the point's server is up), :func:`score_verdict` and
:func:`gate_verdict` (the session, when the test asks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.acceptance.matrix import Point, arm_config, arms, dimensions, id_prefix

if TYPE_CHECKING:
    from pytest_sskj.accuracy.score import Graded
    from pytest_sskj.settings import Settings

__all__ = [
    "PARAMS",
    "AccuracyComparison",
    "AccuracyKey",
    "absent",
    "ask_point",
    "comparisons",
    "dry_run_lines",
    "gate_verdict",
    "host_layouts",
    "host_point",
    "keys",
    "not_applicable",
    "score_verdict",
]


PARAMS = ("sskj_accuracy", "sskj_accuracy_comparison")
"""The acceptance parameters of the accuracy tests (their deselection reasons are :func:`not_applicable`'s)."""


@dataclass(frozen=True)
class AccuracyKey:
    """One arm's questions at one accuracy concurrency: ``parallel-acc-c8``."""

    backend: str
    concurrency: int
    layout: str | None = None

    @property
    def id(self) -> str:
        return f"{id_prefix(self.layout, None)}{self.backend}-acc-c{self.concurrency}"


@dataclass(frozen=True)
class AccuracyComparison:
    """A candidate arm's answers vs the baseline's at one accuracy concurrency: ``q8_0-vs-parallel-acc-c8``."""

    baseline: str
    candidate: str
    concurrency: int
    layout: str | None = None

    @property
    def id(self) -> str:
        return f"{id_prefix(self.layout, None)}{self.candidate}-vs-{self.baseline}-acc-c{self.concurrency}"

    @property
    def is_control(self) -> bool:
        """The baseline's backend named twice (``parallel,parallel``): the A/A control of the gate."""
        return arm_config(self.candidate) == arm_config(self.baseline)


def host_layouts(s: Settings) -> list[str | None]:
    """The run's layouts, each once (``[None]`` without layouts): one host point per arm and layout."""
    return list(dict.fromkeys(lay for lay, _ in dimensions(s)))


def keys(s: Settings) -> list[AccuracyKey]:
    """Every arm's questions at every accuracy concurrency (none without a question set or serving points)."""
    if _no_set(s) is not None:
        return []
    return [
        AccuracyKey(b, c, lay) for lay in host_layouts(s) for c in s.accuracy_concurrencies for b in arms(s.backends)
    ]


def comparisons(s: Settings) -> list[AccuracyComparison]:
    """Every candidate arm against the baseline at every accuracy concurrency (A/A controls first)."""
    if _no_set(s) is not None:
        return []
    layouts = host_layouts(s)
    out = [
        AccuracyComparison(s.baseline, cand, c, lay)
        for lay in layouts
        for c in s.accuracy_concurrencies
        for cand in arms(s.backends)[1:]
    ]
    return sorted(out, key=lambda x: (layouts.index(x.layout), x.concurrency, not x.is_control))


def host_point(s: Settings, backend: str, layout: str | None) -> Point:
    """The serving point whose server answers ``backend``'s questions (one per layout)."""
    shape = next(sh for lay, sh in dimensions(s) if lay == layout)
    chunk = s.chunks[0] if s.chunks else None
    return Point(backend, chunk, s.concurrencies[0], 1, s.repeats, "serve", layout, shape)


def _no_set(s: Settings) -> str | None:
    if s.accuracy_set is None:
        return (
            "no question set (--sskj-accuracy-set none): accuracy is not judged in this job; judge it with "
            "--sskj-accuracy-set gsm8k=PATH (docs/accuracy.md)"
        )
    if not s.concurrencies:
        return "no fixed-concurrency points (no --concurrency): no server is up for the questions"
    return None


def not_applicable(s: Settings, param: str, value: object) -> str | None:
    """Why ``test_accuracy`` / ``test_accuracy_gate`` does not apply to this run (``None``: it does)."""
    why = _no_set(s)
    if why is not None or param == "sskj_accuracy":
        return why
    if value is None:
        return f"one backend ({','.join(s.backends)}): no accuracy A/B; give a baseline and a candidate"
    if s.accuracy_min is None:
        return (
            "no accuracy margin (--sskj-accuracy-min none): each backend's score is recorded, no candidate is "
            "judged; judge them with --sskj-accuracy-min delta>=-1pt"
        )
    return None


def dry_run_lines(s: Settings) -> list[str]:
    """The plan's accuracy lines: the set, the questions each arm answers and where, the margin and whether the
    questions can decide it at all (with identical answers the interval's own half-width is the floor)."""
    from pytest_sskj.accuracy.gate import Pairs, questions_needed
    from pytest_sskj.accuracy.score import Z95

    if s.accuracy_set is None:
        return []
    ref, n, cs = s.accuracy_set, s.accuracy_questions, s.accuracy_concurrencies
    arm_list = arms(s.backends)
    hosts = ", ".join(host_point(s, b, lay).id for lay in host_layouts(s) for b in arm_list) if s.concurrencies else ""
    where = hosts or "no server (no fixed-concurrency points)"
    total = n * len(cs) * len(arm_list)
    at = ",".join(map(str, cs))
    lines = [
        f"accuracy: {ref} ({ref.records} records, sha256 {ref.sha256[:12]}...): {n} questions x C={at} x "
        f"{len(arm_list)} arm(s) = {total} greedy requests of at most {s.accuracy_max_tokens} tokens, "
        f"{s.accuracy_extract} extraction; asked on {where}",
    ]
    if s.accuracy_min is None:
        return [*lines, "accuracy gate: none (--sskj-accuracy-min): scores recorded, no candidate judged"]
    floor = 100 * Z95 / (n + 2)
    need = questions_needed(Pairs(n, 0, 0, 0), s.accuracy_min)
    decide = (
        f"{n} identical answers would decide it (the interval's floor is {floor:.1f} pt)"
        if floor <= s.accuracy_min.points
        else f"{n} questions cannot decide it even with identical answers (floor {floor:.1f} pt; about {need} would)"
    )
    return [*lines, f"accuracy gate: {s.accuracy_min} per candidate and C, paired non-inferiority: {decide}"]


# -- asking (the runner, while the host point's server is up) ------------------------------------------------
def ask_point(s: Settings, url: str, dialect: str, out_dir: Path, model: str | None) -> None:
    """Ask the fixed questions at every accuracy concurrency (the caller's point is its arm's host point, see
    :func:`host_point`); keep the answers and the summary in ``out_dir``."""
    from pytest_sskj.accuracy import grade_all, score
    from pytest_sskj.accuracy.client import ask, save_answers
    from pytest_sskj.rundir import atomic_write_json

    assert s.accuracy_set is not None
    qs = s.accuracy_set.read()
    items = qs.subset(s.accuracy_questions)
    for c in s.accuracy_concurrencies:
        answers = ask(url, dialect, items, concurrency=c, max_tokens=s.accuracy_max_tokens, model=model)
        graded = grade_all(items, answers.completions, s.accuracy_extract)
        sc = score(graded, s.accuracy_extract)
        save_answers(out_dir / f"accuracy-c{c}.jsonl", items, answers, graded)
        errors = sorted(answers.errors.items())
        atomic_write_json(
            out_dir / f"accuracy-c{c}.json",
            {
                "set": qs.manifest(items),
                "api": dialect,
                "concurrency": c,
                "max_tokens": s.accuracy_max_tokens,
                "wall_s": answers.wall_s,
                "score": {**sc.__dict__, "line": sc.line()},
                "errors": [f"record {i}: {e}" for i, e in errors[:5]],
            },
        )


# -- judging (the session, when a test asks) -----------------------------------------------------------------
def _read(point_dir: Path, c: int) -> tuple[dict[str, Any], list[Graded]] | None:
    from pytest_sskj.accuracy.score import Graded

    summary, answers = point_dir / f"accuracy-c{c}.json", point_dir / f"accuracy-c{c}.jsonl"
    if not summary.is_file() or not answers.is_file():
        return None
    graded = []
    for line in answers.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        graded.append(Graded(int(r["index"]), r["extracted"], str(r["reference"]), bool(r["correct"]),
                             missing=r["completion"] is None))  # fmt: skip
    return json.loads(summary.read_text(encoding="utf-8")), graded


def absent(host: Point, status: str, message: str, kept: str = "answers", option: str = "--sskj-accuracy-set") -> str:
    """Why ``host`` kept no ``kept`` (its status and message, as its outcome has them; ``option``: what asks for
    them -- the max-context search says its own)."""
    if status != "passed":
        return f"{host.id} did not pass ({message.splitlines()[0] if message else status}): no server answered"
    return f"{host.id} kept no {kept} (measured before {option} was given, e.g. a resumed point)"


def score_verdict(key: AccuracyKey, host: Point, point_dir: Path, why_absent: str) -> dict[str, Any]:
    """The ``accuracy`` verdict of one arm at one accuracy concurrency from its host point's folder
    (``why_absent``: what to say when the folder holds no answers)."""
    base = {"kind": "accuracy", "id": key.id, "backend": key.backend, "concurrency": key.concurrency,
            "layout": key.layout, "host_point": host.id}  # fmt: skip
    found = _read(point_dir, key.concurrency)
    if found is None:
        return {**base, "passed": None, "outcome": "error", "message": why_absent}
    summary, _ = found
    sc: Mapping[str, Any] = summary["score"]
    missing = int(sc["missing"])
    msg = f"{key.backend} at C={key.concurrency}: {sc['line']} ({summary['set']['name']}, {summary['api']} API)"
    if missing:
        msg += f"; {missing} question(s) unanswered, e.g. {'; '.join(summary['errors'][:2])}"
    return {**base, "passed": missing == 0, "outcome": "answered" if missing == 0 else "unanswered",
            "message": msg, "set": summary["set"], "score": dict(sc), "wall_s": summary["wall_s"],
            "api": summary["api"], "max_tokens": summary["max_tokens"]}  # fmt: skip


def gate_verdict(comp: AccuracyComparison, s: Settings, sides: tuple[tuple[Path, str], ...]) -> dict[str, Any]:
    """The ``accuracy_gate`` verdict: the candidate's paired non-inferiority against the baseline (``sides``: the
    baseline's and the candidate's host point folders, each with what to say when it holds no answers)."""
    from pytest_sskj.accuracy.gate import METHOD_VERSION, judge

    base = {"kind": "accuracy_gate", "id": comp.id, "baseline": comp.baseline, "candidate": comp.candidate,
            "concurrency": comp.concurrency, "layout": comp.layout, "control": comp.is_control,
            "margin": str(s.accuracy_min), "method": METHOD_VERSION, "extraction": s.accuracy_extract}  # fmt: skip
    read = [_read(d, comp.concurrency) for d, _ in sides]
    if read[0] is None or read[1] is None or s.accuracy_min is None:
        gone = [why for (_, why), r in zip(sides, read, strict=True) if r is None] or ["no margin"]
        return {**base, "passed": None, "outcome": "error", "message": "; ".join(gone)}
    v = judge(read[0][1], read[1][1], s.accuracy_min)
    subject = f"accuracy of {comp.candidate} vs {comp.baseline} at C={comp.concurrency}"
    passed = v.outcome != "worse" if comp.is_control else v.passed
    return {**base, "passed": passed, "outcome": v.outcome, "message": f"{subject}: {v.message}",
            "delta_pt": v.delta_pt, "ci95_pt": list(v.ci95_pt) if v.ci95_pt else None,
            "questions_needed": v.needed, "pairs": v.pairs.__dict__}  # fmt: skip
