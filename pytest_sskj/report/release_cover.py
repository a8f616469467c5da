"""Whether the runs given to a release mark ran each required suite *in full*, and which runs a mark without
``--run`` judges.  The one rule (:func:`suite_reasons`), whatever way the suite was split into runs:

Each run records, per suite, its *collection* in ``outcomes.json`` (``selection.collection``: every test it
found, deselected ones included) and the tests it ran.  The suite's full collection is the union of the
collections of the runs that selected the *whole* suite (no path below it, no ``--ignore`` inside it; ``-k``,
``-m``, ``--deselect`` or a conftest's deselection still collect everything).  The runs together ran the
suite in full when every test of that collection has an outcome in at least one of them or was deselected
by the plugin as not applicable.  So ``pytest unit/`` + ``pytest unit/ --run-slow -m slow`` + ``pytest
unit/twin/ --run-slow`` is ``unit`` in full, and so is any other split that leaves nothing out.  A test that
failed (or was skipped outside the scope's policy) in any of the runs refuses -- that is judged per test by
:func:`pytest_sskj.report.release.judge_tests`, not here.  Runs recorded before the collection was (no
``selection.collection``) are judged by the older rule: the same collection size in every run.

:func:`latest_runs`: per required suite, the newest runs that cover its collection between them: first the
whole-suite runs, newest first, each taken only when it ran a test no newer one did; then runs of a path below
the suite (a CI phase such as ``pytest unit/twin/``) for what is still uncovered.  ``-k`` and ``--lf`` runs
(debugging) never stand in.  Newest means newest, green or not: an older green run never hides a newer red one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sskj.files import read_json_file
from pytest_sskj.report.outcomes import suite_of

__all__ = ["finished_runs", "latest_runs", "selection_reasons", "suite_reasons", "typed_selection", "whole_suite"]

_SHOW = 3


def _rel(arg: Any, rootdir: str) -> str:
    """A command-line path relative to the rootdir, forward slashes, without ``::test`` or ``./``."""
    path = str(arg).split("::", 1)[0].replace("\\", "/")
    if rootdir and path.startswith(rootdir.rstrip("/") + "/"):
        path = path[len(rootdir.rstrip("/")) + 1 :]
    while path.startswith("./"):
        path = path[2:]
    return path.strip("/")


def _paths_below(selection: Mapping[str, Any], suite: str) -> list[str]:
    """The command-line paths below ``suite`` (``unit/twin``), unless the suite itself was named too."""
    rootdir = str(selection.get("rootdir") or "")
    paths = [(str(a), _rel(a, rootdir)) for a in selection.get("paths", selection.get("args")) or []]
    if any(rel == suite for _, rel in paths):
        return []
    return [arg for arg, rel in paths if rel.startswith(f"{suite}/")]


def _ignored(selection: Mapping[str, Any], suite: str) -> list[str]:
    rootdir = str(selection.get("rootdir") or "")
    return [
        str(i) for i in selection.get("ignore") or [] if (r := _rel(i, rootdir)) == suite or r.startswith(suite + "/")
    ]


def whole_suite(selection: Mapping[str, Any], suite: str) -> bool:
    """Whether a run collected the whole suite: no path below it, nothing inside it ``--ignore``-d."""
    return bool(selection) and not _paths_below(selection, suite) and not _ignored(selection, suite)


def typed_selection(selection: Mapping[str, Any], suite: str) -> bool:
    """Whether a run selected ``suite`` as typed (``pytest unit/``): the whole suite, nothing narrowed on the
    command line (no ``-k``, ``-m``, ``--deselect``, ``--lf``); its conftest's default deselection is its own."""
    narrowed = selection.get("keyword") or selection.get("markexpr") or selection.get("deselect")
    return bool(selection) and whole_suite(selection, suite) and not narrowed and not selection.get("lf")


# -- why one run alone did not run a suite in full -------------------------------------------------------------
def _expression_reasons(selection: Mapping[str, Any], suite: str) -> list[str]:
    head = f"required suite {suite!r} did not run in full"
    out = [
        f"{head}: selected with {opt} {selection[key]!r}"
        for opt, key in (("-k", "keyword"), ("-m", "markexpr"))
        if selection.get(key)
    ]
    if selection.get("deselect"):
        out.append(f"{head}: --deselect {', '.join(selection['deselect'])}")
    out += [f"{head}: --ignore {ign}" for ign in _ignored(selection, suite)]
    if selection.get("lf"):
        out.append(f"{head}: --lf reran only the last failures")
    return out


def _count_reasons(selection: Mapping[str, Any], suite: str, ran: int) -> list[str]:
    head = f"required suite {suite!r} did not run in full"
    out = []
    deselected = int((selection.get("deselected") or {}).get(suite, 0))
    if deselected:
        out.append(f"{head}: {deselected} test(s) deselected")
    out += [f"{head}: only {arg!r} was selected" for arg in _paths_below(selection, suite)]
    collected = (selection.get("collected") or {}).get(suite)
    if isinstance(collected, int) and ran < collected:
        out.append(f"required suite {suite!r}: {collected - ran} of {collected} collected test(s) have no outcome")
    return out


def selection_reasons(selection: Mapping[str, Any], suite: str, ran: int) -> list[str]:
    """Why ``suite`` did not run in full in one run with this recorded ``selection`` (empty: it did)."""
    if not selection:
        return [f"required suite {suite!r}: the run recorded no selection (outcomes.json predates it); run it again"]
    return _expression_reasons(selection, suite) + _count_reasons(selection, suite, ran)


# -- several runs together ---------------------------------------------------------------------------------
def _not_applicable(selections: Sequence[Mapping[str, Any]], suite: str) -> set[str]:
    return {n for sel in selections for n in (sel.get("not_applicable") or {}) if suite_of(n) == suite}


def _same_collection_cover(ran: set[str], selections: Sequence[Mapping[str, Any]], suite: str) -> bool:
    """The rule for runs recorded without ``selection.collection``: every run found the same number of tests
    (selected + deselected + not applicable) and the tests with an outcome, plus the not-applicable ones, are
    all of them.  One run alone is judged by its own selection; ``--lf`` never counts."""
    if len(selections) < 2 or any(not sel or sel.get("lf") for sel in selections):
        return False
    totals = set()
    for sel in selections:
        na = _not_applicable([sel], suite)
        collected = (sel.get("collected") or {}).get(suite)
        deselected = (sel.get("deselected") or {}).get(suite, 0)
        if not isinstance(collected, int) or not isinstance(deselected, int):
            return False
        totals.add(collected + deselected + len(na))
    return len(totals) == 1 and len(ran | _not_applicable(selections, suite)) >= totals.pop()


@dataclass(frozen=True)
class _Cover:
    full: frozenset[str]
    """The suite's collection (union over the whole-suite runs); empty when no run collected the whole suite."""
    missing: tuple[str, ...]
    """Tests of it that ran in none of the runs (and are not the plugin's not-applicable ones)."""


def _cover(ran: set[str], selections: Sequence[Mapping[str, Any]], suite: str) -> _Cover:
    full: set[str] = set()
    for sel in selections:
        if whole_suite(sel, suite):
            full |= set((sel.get("collection") or {}).get(suite) or ())
    missing = sorted(full - ran - _not_applicable(selections, suite))
    return _Cover(frozenset(full), tuple(missing))


def _runs_named(selections: Sequence[Mapping[str, Any]]) -> str:
    names = [str(s.get("run_id")) for s in selections if s.get("run_id")]
    return f" ({', '.join(names)})" if names else ""


def suite_reasons(tests: Sequence[Mapping[str, Any]], selections: Sequence[Mapping[str, Any]], suite: str) -> list[str]:
    """Why the runs with these recorded ``selections`` (one per run of ``suite``) did not run it in full
    between them (empty: they did); ``tests`` are the tests with an outcome, merged over the runs."""
    ran = {str(t.get("nodeid")) for t in tests if t.get("suite") == suite}
    per_run = list(dict.fromkeys(r for sel in selections or [{}] for r in selection_reasons(sel, suite, len(ran))))
    if not selections or any(not sel or "collection" not in sel for sel in selections):
        return [] if _same_collection_cover(ran, selections, suite) else per_run
    cover = _cover(ran, selections, suite)
    if cover.full and not cover.missing:
        return []
    if len(selections) == 1 and per_run:  # one run: what its own selection left out says it best
        return per_run
    named = _runs_named(selections)
    if not cover.full:
        head = f"required suite {suite!r} did not run in full: no run{named} collected the whole suite"
        return [f"{head} (each named a path below it or --ignore-d one); add a run of pytest {suite}/", *per_run]
    eg = ", ".join(cover.missing[:_SHOW]) + (", ..." if len(cover.missing) > _SHOW else "")
    line = (
        f"required suite {suite!r} did not run in full: {len(cover.missing)} of its {len(cover.full)} test(s) ran "
        f"in none of the runs{named}, e.g. {eg}"
    )
    return [line, *per_run]


# -- which runs a mark without --run judges ------------------------------------------------------------------
def finished_runs(reports: Path) -> list[tuple[float, str, dict[str, Any]]]:
    """(written time, run id, outcomes) of every run with a complete ``outcomes.json``, newest first."""
    found: list[tuple[float, str, dict[str, Any]]] = []
    for path in reports.glob("*/outcomes.json"):
        try:
            data = read_json_file(path, what="outcomes")
        except (OSError, ValueError):  # not a regular file, corrupt: not a finished run
            continue
        if isinstance(data, dict) and isinstance(data.get("tests"), list):
            found.append((float(data.get("written") or path.stat().st_mtime), path.parent.name, data))
    return sorted(found, key=lambda f: f[0], reverse=True)


def _debugging(selection: Mapping[str, Any]) -> bool:
    return bool(selection.get("keyword") or selection.get("lf"))


def _ran(data: Mapping[str, Any], suite: str) -> set[str]:
    return {str(t.get("nodeid")) for t in data.get("tests", []) if isinstance(t, dict) and t.get("suite") == suite}


def _covering(mine: Sequence[tuple[str, dict[str, Any]]], suite: str) -> list[str] | None:
    """Newest-first runs that cover the newest whole-suite run's collection; ``None``: no collection recorded."""
    whole = [(rid, d) for rid, d in mine if whole_suite(d.get("selection") or {}, suite)]
    if not whole or "collection" not in (whole[0][1].get("selection") or {}):
        return None
    full = set((whole[0][1]["selection"].get("collection") or {}).get(suite) or ())
    full -= _not_applicable([d.get("selection") or {} for _, d in mine], suite)
    whole_ids = {rid for rid, _ in whole}
    below = [(rid, d) for rid, d in mine if rid not in whole_ids]
    picked: list[str] = []
    covered: set[str] = set()
    for rid, data in [*whole, *below]:
        new = (_ran(data, suite) & full) - covered
        if new:
            picked.append(rid)
            covered |= new
        if covered >= full:
            break
    return picked


def _suite_total(selection: Mapping[str, Any], suite: str) -> int:
    """How many tests of ``suite`` the run found: collected + deselected + the plugin's not-applicable ones."""
    collected = (selection.get("collected") or {}).get(suite, 0)
    deselected = (selection.get("deselected") or {}).get(suite, 0)
    return int(collected or 0) + int(deselected or 0) + len(_not_applicable([selection], suite))


def _by_signature(mine: Sequence[tuple[str, dict[str, Any]]], suite: str) -> list[str]:
    """The older choice, for runs recorded without a collection: the newest whole-suite run of each ``-m``
    selection that found as many tests as any (the inner loop and its slow phase)."""
    mine = [(rid, d) for rid, d in mine if whole_suite(d.get("selection") or {}, suite)]
    most = max((_suite_total(d.get("selection") or {}, suite) for _, d in mine), default=0)
    newest: dict[str, str] = {}
    for rid, data in mine:
        sel = data.get("selection") or {}
        if _suite_total(sel, suite) >= most:
            newest.setdefault(str(sel.get("markexpr") or ""), rid)
    ordered = list(newest.values())
    if not ordered:
        return []
    first = next(d.get("selection") or {} for rid, d in mine if rid == ordered[0])
    alone = not (first.get("deselected") or {}).get(suite) and not first.get("markexpr")
    return ordered[:1] if alone else ordered


def latest_runs(reports: Path, required_suites: Sequence[str], as_typed: Collection[str] = ()) -> list[str]:
    """The runs a mark without ``--run`` judges (see the module docstring), in the order they were picked.
    For a suite in ``as_typed`` (a scope that needs it as typed, ``pytest unit/``): its newest run as typed."""
    runs: list[str] = []
    finished = finished_runs(reports)
    for suite in required_suites:
        mine = [
            (rid, data)
            for _, rid, data in finished
            if _ran(data, suite) and not _debugging(data.get("selection") or {})
        ]
        if suite in as_typed:
            typed = [rid for rid, d in mine if typed_selection(d.get("selection") or {}, suite)]
            runs += [rid for rid in typed[:1] if rid not in runs]
            continue
        picked = _covering(mine, suite)
        runs += [rid for rid in (picked if picked is not None else _by_signature(mine, suite)) if rid not in runs]
    return runs
