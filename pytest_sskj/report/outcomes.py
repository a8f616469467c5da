"""Per-test outcomes of a run, ``<run dir>/outcomes.json``, recorded for release marking.

The controller folds every ``TestReport`` (setup/call/teardown; xdist forwards workers' reports to
the controller) into one outcome per node id: ``passed``, ``failed``, ``error`` (setup or teardown
failed), ``skipped``, ``xfailed``, ``xpassed`` or ``running`` (no call
report arrived: the run died inside the test), with the phase that decided it, the suite (the
top-level directory of the node id, e.g. ``unit`` or ``acceptance``), the registered markers and a
short redacted message.  The file is rewritten atomically at most once a second while the run goes
on and once at the end with ``complete: true``, so a crashed run is recognisable as incomplete.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.files import read_json_file
from pytest_sskj.report.scrub import scrub_text
from pytest_sskj.rundir import atomic_write_text

__all__ = ["MARKERS_ATTR", "OUTCOMES_FILE", "OutcomeRecorder", "load_outcomes", "suite_of"]

OUTCOMES_FILE = "outcomes.json"
MARKERS_ATTR = "sskj_markers"
"""Attribute the reporter sets on every ``TestReport`` (it survives xdist's report serialization)."""


def suite_of(nodeid: str) -> str:
    """``unit/report/test_x.py::t`` -> ``unit``; a test file at the root is its own suite."""
    path = nodeid.split("::", 1)[0]
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return parts[0] if len(parts) > 1 else "(root)"


def _outcome(report: Any) -> str:
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "xpassed" if xfail else "passed"
        if report.skipped:
            return "xfailed" if xfail else "skipped"
        return "failed"
    if report.failed:
        return "error"
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    return "passed"


def _message(report: Any, secrets: Iterable[str]) -> str | None:
    if report.passed and not hasattr(report, "wasxfail"):
        return None
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        text = str(report.longrepr[2])
    elif hasattr(report, "wasxfail") and report.wasxfail:
        text = f"xfail: {report.wasxfail}"
    else:
        crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
        text = str(crash.message) if crash is not None else str(report.longrepr or "")
    return scrub_text(text.strip()[:500], secrets)


@dataclass
class OutcomeRecorder:
    """Folds test reports into per-node outcomes and persists them; controller only."""

    run_dir: Path
    run_id: str
    marker_names: frozenset[str] = frozenset()
    secrets: tuple[str, ...] = ()
    min_interval_s: float = 1.0
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    selection: dict[str, Any] = field(default_factory=dict)
    """What was selected: ``args``, ``keyword`` (-k), ``markexpr`` (-m), ``deselect``, ``lf``, ``maxfail``,
    ``collected`` and ``deselected`` counts per suite (see the reporter's collection hooks)."""
    _phases: dict[str, dict[str, tuple[str, str | None, float]]] = field(default_factory=dict)
    _last_write: float = 0.0

    @property
    def path(self) -> Path:
        return self.run_dir / OUTCOMES_FILE

    def record(self, report: Any) -> None:
        """Fold one setup/call/teardown report into the node's outcome."""
        phases = self._phases.setdefault(report.nodeid, {})
        phases[report.when] = (
            _outcome(report),
            _message(report, self.secrets),
            float(getattr(report, "duration", 0.0) or 0.0),
        )
        setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
        if setup is not None and setup[0] != "passed":
            outcome, when, msg = setup[0], "setup", setup[1]
        elif call is not None:
            outcome, when, msg = call[0], "call", call[1]
        else:
            outcome, when, msg = "running", "setup", None  # setup passed, no call report (yet)
        if teardown is not None and teardown[0] == "error" and outcome in ("passed", "xpassed", "skipped", "running"):
            outcome, when, msg = "error", "teardown", teardown[1]
        markers = getattr(report, MARKERS_ATTR, None)
        if markers is None:  # a report that did not pass through our makereport hook
            keywords: Mapping[str, Any] = getattr(report, "keywords", {}) or {}
            markers = sorted(k for k in keywords if k in self.marker_names)
        self.tests[report.nodeid] = {
            "nodeid": report.nodeid,
            "suite": suite_of(report.nodeid),
            "outcome": outcome,
            "when": when,
            "markers": list(markers),
            "duration_s": round(sum(p[2] for p in phases.values()), 6),
            "message": msg,
        }
        if time.monotonic() - self._last_write >= self.min_interval_s:
            self.write(complete=False)

    def write(self, *, complete: bool, exitstatus: int | None = None) -> Path:
        counts: dict[str, int] = {}
        for t in self.tests.values():
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
        data = {
            "run_id": self.run_id,
            "complete": complete,
            "exitstatus": exitstatus,
            "written": time.time(),
            "counts": counts,
            "selection": self.selection,
            "tests": sorted(self.tests.values(), key=lambda t: t["nodeid"]),
        }
        atomic_write_text(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        self._last_write = time.monotonic()
        return self.path


def load_outcomes(run_dir: Path) -> dict[str, Any]:
    """The parsed ``outcomes.json`` of ``run_dir``; ``FileNotFoundError``/``ValueError`` say what is wrong."""
    path = run_dir / OUTCOMES_FILE
    try:
        data = read_json_file(path, what="outcomes")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} does not exist: the run recorded no test outcomes (was pytest-sskj's "
            f"report plugin active, and did the run get past collection?)"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list):
        raise ValueError(f"{path} has no 'tests' list")
    return data
