"""Release marking: a run becomes release ``<tag>`` only when every required suite is green.

``python -m pytest_sskj release mark --run RUN_ID [--run RUN_ID2] --tag NAME`` reads
``<reports>/<run>/outcomes.json`` of each run (several runs are judged together: CI runs ``acceptance/``
and ``unit/`` as two sessions)
(recorded by the reporter plugin) and the repository's ``release.toml`` (which suites are required,
e.g. ``unit`` and ``acceptance``), and writes ``<reports>/releases/<tag>.json`` — verdict, suites and
counts, the run manifest, the A/B comparison and SLO/search figures, the summary table — only when
the run finished and every required suite ran *in full* with every test passed: no failure, error,
xfail or xpass, and no skip but those the release *scope* accepts.  Otherwise nothing is written and
:class:`ReleaseRefused` lists every reason (``--json`` prints them as JSON too).

"In full" is judged by :mod:`pytest_sskj.report.release_cover` on what each run recorded in ``outcomes.json``
(its selection: args, ``-k``, ``-m``, ``--deselect``, ``--lf``, counts, and its *collection*, every test it
found, deselected ones included): several runs of a suite cover it together when every test of the collection
of the runs that selected the whole suite ran in at least one of them (``pytest unit/`` + ``pytest unit/
--run-slow -m slow`` + ``pytest unit/twin/ --run-slow``, or any other split), and a test that failed in any run
refuses.  Which skip
reasons are acceptable is policy in ``release.toml``: ``[release.scopes.<name>]`` lists the
``accept_skip_reasons`` (regular expressions); the ``cpu`` scope accepts "hardware absent" skips and
lists every one it accepted in the mark, the ``gpu`` scope accepts none, so a GPU release needs the
GPU tests to have run.  ``release list`` and ``release show`` read the marks back.  Every written
value is redacted.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj import names
from pytest_sskj.files import FileRefused, read_json_file, read_text_file
from pytest_sskj.report.outcomes import load_outcomes
from pytest_sskj.report.release_cover import latest_runs as _latest_runs
from pytest_sskj.report.release_cover import suite_reasons
from pytest_sskj.report.release_scope import (
    Scope,
    build_identity,
    build_reasons,
    command_as_typed,
    describe_release,
    parse_scopes,
    typed_reasons,
)
from pytest_sskj.report.results import read_results, read_verdicts
from pytest_sskj.report.scrub import scrub
from pytest_sskj.rundir import atomic_write_text

__all__ = [
    "ReleaseConfig",
    "ReleaseRefused",
    "Scope",
    "describe_release",
    "find_config",
    "judge",
    "judge_tests",
    "latest_runs",
    "list_releases",
    "load_config",
    "mark",
    "rank_reasons",
    "show_release",
]

CONFIG_NAME = "release.toml"
_CONFIG_LIMIT = 1024 * 1024
_NOT_AN_OBJECT = "release mark {path} is not a JSON object (a corrupt mark); mark the release again"


class ReleaseRefused(Exception):
    """The run may not be marked; ``reasons`` says exactly why (one line each, the full list);
    :meth:`ranked` is the short, ranked form the CLI prints (what to fix first, like skips grouped)."""

    def __init__(self, run_id: str, tag: str, reasons: Sequence[str], *, scope: str | None = None) -> None:
        self.reasons = list(reasons)
        self.run_id, self.tag, self.scope = run_id, tag, scope
        super().__init__(
            f"refusing to mark run {run_id} as release {tag!r}:\n" + "\n".join(f"  - {r}" for r in reasons)
        )

    def ranked(self, limit: int = 6) -> str:
        """The refusal in at most ``limit`` reason lines, most fundamental first (run problems, missing
        suites, failures, incomplete selections, skips grouped by reason), then how to see all of them."""
        lines = rank_reasons(self.reasons, scope=self.scope)
        shown = lines[:limit]
        more = len(lines) - len(shown)
        head = f"refusing to mark run {self.run_id} as release {self.tag!r} ({len(self.reasons)} reason(s)):"
        tail = [f"  ... {more} more; every reason: --verbose or --json"] if more > 0 else []
        if len(self.reasons) > len(lines) and not tail:
            tail = ["  (skips grouped by reason; every test: --verbose or --json)"]
        return "\n".join([head, *(f"  {i}. {_short(r, 220)}" for i, r in enumerate(shown, 1)), *tail])


_SKIP_REASON = re.compile(
    r"^(?P<prefix>run [^:]+: )?required test (?P<nodeid>\S+) skipped \(in \w+\)(?::\s*(?P<msg>.*?))?"
    r"(?P<scope> \(not accepted by scope '[^']+'\))?$"
)
_RANKS = (
    (
        re.compile(
            r"did not finish|status is|exit status|does not exist|unreadable|not valid JSON|no run given|"
            r"unknown release scope|already exists|file-name-safe|no 'tests' list|recorded no|different builds"
        ),
        0,
    ),
    (re.compile(r"has no test results|asks for at least"), 1),
    (re.compile(r" (failed|error|xfailed|xpassed|running) \(in "), 2),
    (re.compile(r"did not run in full|did not run as|have no outcome"), 3),
)
_HARDWARE = re.compile(r"GPU|NVIDIA|nvidia|CUDA|cuda|sm1\d0|SM1\d0|flashinfer", re.IGNORECASE)


def rank_reasons(reasons: Sequence[str], *, scope: str | None = None) -> list[str]:
    """``reasons`` ranked and condensed: skips of the same reason become one line with their count and
    an example test; a GPU-scope refusal that is only hardware-absent skips says to use ``--scope cpu``."""
    ranked: list[tuple[int, int, str]] = []
    skips: dict[str, list[str]] = {}
    for i, r in enumerate(reasons):
        m = _SKIP_REASON.match(r)
        if m:
            skips.setdefault((m.group("msg") or "no reason given").strip() + (m.group("scope") or ""), []).append(
                m.group("nodeid")
            )
            continue
        rank = next((k for pat, k in _RANKS if pat.search(r)), 5)
        ranked.append((rank, i, r))
    for j, (msg, nodeids) in enumerate(sorted(skips.items(), key=lambda kv: -len(kv[1]))):
        example = f", e.g. {nodeids[0]}" if nodeids else ""
        ranked.append((4, len(reasons) + j, f"{len(nodeids)} required test(s) skipped: {msg}{example}"))
    lines = [r for _, _, r in sorted(ranked)]
    if (
        skips
        and scope not in (None, "cpu")
        and all(_HARDWARE.search(m.split(" (not accepted by scope")[0]) for m in skips)
    ):
        lines.append("every skip above is hardware absent: on a CPU box mark a CPU-scope release with --scope cpu")
    return lines


@dataclass(frozen=True)
class ReleaseConfig:
    """``[release]`` of ``release.toml``."""

    required_suites: tuple[str, ...]
    min_tests: Mapping[str, int]
    path: Path | None = None
    scopes: Mapping[str, Scope] = field(default_factory=lambda: {"gpu": Scope("gpu")})
    default_scope: str = "gpu"

    def scope(self, name: str | None) -> Scope:
        """The scope ``name`` (default: ``default_scope``); ``ValueError`` lists the configured ones."""
        key = name or self.default_scope
        if key not in self.scopes:
            raise ValueError(
                f"unknown release scope {key!r}; {self.path or CONFIG_NAME} defines: {', '.join(self.scopes)}"
            )
        return self.scopes[key]


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    data: dict[str, Any] = tomllib.loads(text)
    return data


def find_config(start: Path | None = None) -> Path | None:
    """``release.toml`` in ``start`` (default: cwd) or the nearest parent directory."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / CONFIG_NAME).is_file():
            return d / CONFIG_NAME
    return None


def load_config(path: Path) -> ReleaseConfig:
    """Parse ``release.toml``; ``ValueError`` names the key that is wrong and what it must be."""
    try:
        text = read_text_file(path, what="release config", limit=_CONFIG_LIMIT)
    except FileNotFoundError:
        raise ValueError(f"release config {path} does not exist; pass --config PATH to a release.toml") from None
    try:
        data = _toml_loads(text)
    except Exception as exc:  # tomllib.TOMLDecodeError
        raise ValueError(f"{path} is not valid TOML: {exc}") from None
    rel = data.get("release")
    if not isinstance(rel, dict):
        raise ValueError(f'{path} has no [release] table; add:\n[release]\nrequired_suites = ["unit", "acceptance"]')
    suites = rel.get("required_suites")
    if not isinstance(suites, list) or not suites or not all(isinstance(s, str) and s for s in suites):
        raise ValueError(
            f"{path}: release.required_suites must be a non-empty list of suite names "
            f'(top-level test directories), e.g. ["unit", "acceptance"]'
        )
    mins = rel.get("min_tests", {})
    if not isinstance(mins, dict) or not all(isinstance(v, int) and v >= 0 for v in mins.values()):
        raise ValueError(f"{path}: release.min_tests must map suite names to whole numbers, e.g. {{acceptance = 1}}")
    scopes, default = parse_scopes(path, rel)
    return ReleaseConfig(tuple(suites), {str(k): int(v) for k, v in mins.items()}, path, scopes, default)


def _run_reasons(outcomes: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[str]:
    """Why one run is not a complete verdict (crashed, interrupted, still running)."""
    reasons: list[str] = []
    if not outcomes.get("complete"):
        reasons.append("the run did not finish: outcomes.json is not marked complete (crashed or interrupted run)")
    status = manifest.get("status")
    if status != "finished":
        reasons.append(f"manifest.json status is {status!r}, not 'finished'")
    exitstatus = outcomes.get("exitstatus", manifest.get("exitstatus"))
    if exitstatus not in (0, 1, None):
        reasons.append(
            f"pytest exit status {exitstatus} (interrupted, internal or usage error): the run is not a complete verdict"
        )
    return reasons


def _short(message: str, limit: int = 300) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "\u2026"


def _coverage_reasons(
    tests: Sequence[Mapping[str, Any]], selections: Sequence[Mapping[str, Any]], suite: str, scope: Scope | None
) -> list[str]:
    """Why ``suite`` did not run as ``scope`` needs it (its whole collection, or as typed), ending with the
    command(s) that would qualify; empty when it did."""
    if scope is not None and scope.coverage_of(suite) == "as-typed":
        found = typed_reasons(tests, selections, suite)
    else:
        found = suite_reasons(tests, selections, suite)
    if not found or scope is None:
        return found
    return [*found, f"required suite {suite!r} did not run as scope {scope.name!r} needs: {scope.qualifying(suite)}"]


def judge_tests(
    tests: Sequence[Mapping[str, Any]],
    config: ReleaseConfig,
    *,
    scope: Scope | None = None,
    selections: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Per-suite outcome counts and every reason the tests do not make a release (empty: they do).

    ``scope``: which skips are accepted (default: none).  ``selections``: per suite, the recorded
    selection of every run that ran it (``None``: not judged, for callers without outcomes files).
    """
    reasons: list[str] = []
    suites: dict[str, dict[str, int]] = {}
    for t in tests:
        c = suites.setdefault(str(t.get("suite")), {})
        c[str(t.get("outcome"))] = c.get(str(t.get("outcome")), 0) + 1
    for suite in config.required_suites:
        counts = suites.get(suite)
        if not counts:
            reasons.append(
                f"required suite {suite!r} has no test results in this run; run it "
                f"(e.g. pytest {suite}/) in the same session, or name its run with another --run"
            )
            continue
        total = sum(counts.values())
        need = config.min_tests.get(suite, 1)
        if total < need:
            reasons.append(f"required suite {suite!r} ran {total} test(s); release.toml asks for at least {need}")
        if selections is not None:
            reasons += _coverage_reasons(tests, selections.get(suite) or [], suite, scope)
    for t in sorted(tests, key=lambda t: str(t.get("nodeid"))):
        if t.get("suite") not in config.required_suites or t.get("outcome") == "passed":
            continue
        if t.get("outcome") == "skipped" and scope is not None and scope.accepts(t.get("message"), t.get("suite")):
            continue
        msg = f": {_short(str(t['message']))}" if t.get("message") else ""
        where = ""
        if t.get("outcome") == "skipped" and scope is not None and scope.accept_skip_reasons:
            where = f" (not accepted by scope {scope.name!r})"
        reasons.append(f"required test {t.get('nodeid')} {t.get('outcome')} (in {t.get('when')}){msg}{where}")
    return suites, list(dict.fromkeys(reasons))


def accepted_skips(tests: Sequence[Mapping[str, Any]], config: ReleaseConfig, scope: Scope) -> list[dict[str, Any]]:
    """The skips of required suites that ``scope`` accepted (listed in the mark)."""
    return [
        {"nodeid": t.get("nodeid"), "reason": t.get("message")}
        for t in sorted(tests, key=lambda t: str(t.get("nodeid")))
        if t.get("suite") in config.required_suites
        and t.get("outcome") == "skipped"
        and scope.accepts(t.get("message"), t.get("suite"))
    ]


def judge(
    outcomes: Mapping[str, Any], manifest: Mapping[str, Any], config: ReleaseConfig, *, scope: str | None = None
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Per-suite outcome counts and every reason one run is not releasable (empty: releasable)."""
    tests = [t for t in outcomes.get("tests", []) if isinstance(t, Mapping)]
    sel = outcomes.get("selection") or {}
    selections = {s: [sel] for s in config.required_suites}
    suites, reasons = judge_tests(tests, config, scope=config.scope(scope), selections=selections)
    return suites, _run_reasons(outcomes, manifest) + reasons


def _reports(reports_dir: Path | None) -> Path:
    return Path(reports_dir) if reports_dir is not None else Path("reports")


def _release_dir(reports_dir: Path | None) -> Path:
    return _reports(reports_dir) / "releases"


def _figures(run_dir: Path, baseline: str | None) -> dict[str, Any]:
    from pytest_sskj.report.summary import summarize_points

    rows = read_results(run_dir).rows
    verdicts = read_verdicts(run_dir).rows
    points = [
        {
            "chunk": p.chunk,
            "concurrency": p.concurrency,
            "backend": p.backend,
            "input_throughput": p.input_throughput,
            "ttft_p50_ms": p.ttft_p50_ms,
            "ttft_p95_ms": p.ttft_p95_ms,
            "vs_baseline": p.vs_baseline,
            "repeats": p.repeats,
            "passed": p.passed,
        }
        for p in summarize_points(rows, baseline)
    ]
    return {
        "points": points,
        "comparisons": [v for v in verdicts if v.get("kind") == "comparison"],
        "chunk_curves": [v for v in verdicts if v.get("kind") == "chunk_curve"],
        "slo": [v for v in verdicts if v.get("kind") in ("slo", "search")],
    }


def _load_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(outcomes, manifest) of one run; ``ValueError``/``FileNotFoundError`` say what is missing."""
    outcomes = load_outcomes(run_dir)
    try:
        manifest = read_json_file(run_dir / "manifest.json", what="the run's manifest")
    except FileNotFoundError:
        raise ValueError(f"{run_dir / 'manifest.json'} is missing: the run recorded no manifest") from None
    return outcomes, manifest if isinstance(manifest, dict) else {}


def _name_problem(name: str, what: str) -> str | None:
    try:
        names.check_name(name, what)
    except names.NameRefused as exc:
        return str(exc)
    return None


def _check_request(runs: Sequence[str], tag: str, out: Path, force: bool) -> list[str]:
    if not runs:
        return [
            "no run given (--run RUN_ID), and no finished run of a required suite found under the reports dir "
            "(a `pytest unit/` is kept only when its run is named: SSKJ_RUN_ID=unit pytest unit/)"
        ]
    bad = [_name_problem(rid, "run id") for rid in runs] + [_name_problem(tag, "release tag")]
    if any(bad):
        return [b for b in bad if b]
    if out.exists() and not force:
        return [f"release {tag!r} already exists ({out}); pick another tag or --force"]
    return []


@dataclass
class _Runs:
    """The runs of one mark, loaded: their tests (a test run twice must pass both times), per-suite selections."""

    loaded: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    selections: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    runs_by_suite: dict[str, list[str]] = field(default_factory=dict)
    """Per suite the runs that ran tests of it, in the order given."""
    reasons: list[str] = field(default_factory=list)

    def add(self, rid: str, run_dir: Path, prefix: str) -> None:
        if not run_dir.is_dir():
            self.reasons.append(f"{prefix}run directory {run_dir} does not exist (see --reports-dir)")
            return
        try:
            outcomes, manifest = _load_run(run_dir)
        except (FileNotFoundError, ValueError) as exc:
            self.reasons.append(f"{prefix}{exc}")
            return
        self.loaded[rid] = (outcomes, manifest)
        self.reasons += [prefix + r for r in _run_reasons(outcomes, manifest)]
        tests = [t for t in outcomes.get("tests", []) if isinstance(t, dict)]
        selection = dict(outcomes.get("selection") or {})
        for suite in {str(t.get("suite")) for t in tests}:
            self.selections.setdefault(suite, []).append({**selection, "run_id": rid} if selection else {})
            self.runs_by_suite.setdefault(suite, []).append(rid)
        for t in tests:
            prev = self.tests.get(str(t.get("nodeid")))
            if prev is None or prev.get("outcome") == "passed":
                self.tests[str(t.get("nodeid"))] = t


def _provenance(runs: Sequence[str], got: _Runs, config: ReleaseConfig, scope: Scope) -> dict[str, Any]:
    """Which runs stand for which suite, their commands as typed, the one build they came from, how much of each
    suite the scope needed and what its defaults left out."""
    return {
        "runs_by_suite": {suite: got.runs_by_suite.get(suite, []) for suite in config.required_suites},
        "commands": {rid: command_as_typed(got.loaded[rid][1]) for rid in runs},
        "build": build_identity({rid: got.loaded[rid][1] for rid in runs}),
        "coverage": {suite: scope.coverage_of(suite) for suite in config.required_suites},
        "not_required": _not_required(got, config, scope),
    }


def _not_required(got: _Runs, config: ReleaseConfig, scope: Scope) -> dict[str, int]:
    """Per suite the scope needs as typed: how many tests its run's own defaults deselected (not required)."""
    out: dict[str, int] = {}
    for suite in config.required_suites:
        if scope.coverage_of(suite) != "as-typed":
            continue
        counts = [int((sel.get("deselected") or {}).get(suite, 0) or 0) for sel in got.selections.get(suite, [])]
        out[suite] = min(counts) if counts else 0
    return out


def _record(
    runs: Sequence[str], tag: str, got: _Runs, config: ReleaseConfig, scope: Scope, reports_dir: Path | None
) -> dict[str, Any]:
    """The mark's JSON body."""
    tests = list(got.tests.values())
    counts: dict[str, int] = {}
    for t in tests:
        counts[str(t.get("outcome"))] = counts.get(str(t.get("outcome")), 0) + 1
    with_results = [r for r in runs if (_reports(reports_dir) / r / "results.jsonl").is_file()] or list(runs)
    main_run = with_results[0]
    manifest = got.loaded[main_run][1]
    backends = (manifest.get("settings") or {}).get("backends") or []
    suites: dict[str, dict[str, int]] = {}
    for t in tests:
        c = suites.setdefault(str(t.get("suite")), {})
        c[str(t.get("outcome"))] = c.get(str(t.get("outcome")), 0) + 1
    record: dict[str, Any] = {
        "tag": tag,
        "verdict": "release",
        "marked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run_id": runs[0] if len(runs) == 1 else list(runs),
        "required_suites": list(config.required_suites),
        "scope": scope.name,
        "scope_description": scope.description,
        "accepted_skips": accepted_skips(tests, config, scope),
        "not_applicable": {
            nodeid: why
            for rid in runs
            for nodeid, why in ((got.loaded[rid][0].get("selection") or {}).get("not_applicable") or {}).items()
        },
        "selection": {rid: got.loaded[rid][0].get("selection") for rid in runs},
        **_provenance(runs, got, config, scope),
        "suites": suites,
        "counts": counts,
        "manifest": manifest,
        "figures": _figures(_reports(reports_dir) / main_run, str(backends[0]) if backends else None),
    }
    if len(runs) > 1:
        record["manifests"] = {rid: got.loaded[rid][1] for rid in runs}
        record["figures_run"] = main_run
    return record


def mark(
    run_id: str | Sequence[str] | None,
    tag: str,
    *,
    reports_dir: Path | None = None,
    config: ReleaseConfig,
    force: bool = False,
    scope: str | None = None,
) -> Path:
    """Write ``releases/<tag>.json`` for one run (or several runs judged together, e.g. the acceptance and
    the unit session of one CI job) or raise :class:`ReleaseRefused` with every reason.

    ``run_id`` ``None`` (or empty): the latest runs of the required suites (:func:`latest_runs`).
    ``scope`` names a ``[release.scopes.*]`` table of ``release.toml`` (default: its ``default_scope``).
    """
    try:
        the_scope = config.scope(scope)
    except ValueError as exc:
        raise ReleaseRefused("+".join([run_id] if isinstance(run_id, str) else run_id or []), tag, [str(exc)]) from None
    if not run_id:
        runs = latest_runs(_reports(reports_dir), config, scope=the_scope.name)
    else:
        runs = [run_id] if isinstance(run_id, str) else list(run_id)
    shown = "+".join(runs) or "(none)"
    try:
        out = names.inside(_release_dir(reports_dir), tag, ".json", "release tag")
    except names.NameRefused as exc:
        raise ReleaseRefused(shown, tag, [str(exc)], scope=the_scope.name) from None
    problems = _check_request(runs, tag, out, force)
    if problems:
        raise ReleaseRefused(shown, tag, problems, scope=the_scope.name)
    got = _Runs()
    for rid in runs:
        try:
            run_dir = names.inside(_reports(reports_dir), rid, what="run id")
        except names.NameRefused as exc:
            raise ReleaseRefused(shown, tag, [str(exc)], scope=the_scope.name) from None
        got.add(rid, run_dir, f"run {rid}: " if len(runs) > 1 else "")
    _, test_reasons = judge_tests(list(got.tests.values()), config, scope=the_scope, selections=got.selections)
    builds = build_reasons({rid: m for rid, (_, m) in got.loaded.items()})
    reasons = got.reasons + builds + (test_reasons if got.loaded else [])  # with no readable run, its problems are all
    if reasons:
        raise ReleaseRefused(shown, tag, reasons, scope=the_scope.name)
    record = _record(runs, tag, got, config, the_scope, reports_dir)
    atomic_write_text(out, json.dumps(scrub(record), indent=2, sort_keys=True, default=str) + "\n")
    return out


def latest_runs(reports: Path, config: ReleaseConfig, *, scope: str | None = None) -> list[str]:
    """The runs a mark without ``--run`` judges: per required suite, the newest runs that cover its collection
    between them (:func:`pytest_sskj.report.release_cover.latest_runs`), or, for a suite the scope needs as
    typed, its newest run as typed.  An unknown scope judges every suite in full (the mark then refuses it)."""
    try:
        the_scope = config.scope(scope)
    except ValueError:
        return _latest_runs(reports, config.required_suites)
    typed = [s for s in config.required_suites if the_scope.coverage_of(s) == "as-typed"]
    return _latest_runs(reports, config.required_suites, typed)


def list_releases(reports_dir: Path | None = None) -> list[dict[str, Any]]:
    """One line of facts per release mark, oldest first; unreadable files are listed with their error."""
    out: list[dict[str, Any]] = []
    for path in sorted(_release_dir(reports_dir).glob("*.json")):
        try:
            d = read_json_file(path, what="release mark")
            if not isinstance(d, dict):
                raise FileRefused(_NOT_AN_OBJECT.format(path=path))
            runs, counts, suites = d.get("run_id"), d.get("counts", {}), d.get("suites", {})
            entry = {
                "tag": d["tag"] if isinstance(d.get("tag"), str) and d["tag"] else path.stem,
                "run_id": "+".join(map(str, runs)) if isinstance(runs, list) else runs,
                "marked_at": d.get("marked_at"),
                "counts": counts if isinstance(counts, dict) else {},
                "suites": sorted(map(str, suites)) if isinstance(suites, (dict, list)) else [],
            }
            if not isinstance(counts, dict) or not isinstance(suites, (dict, list)):
                entry["error"] = "damaged: its counts or suites are not of the type a mark records"
            out.append(entry)
        except (OSError, ValueError) as exc:
            out.append({"tag": path.stem, "error": f"unreadable: {exc}"})
    return sorted(out, key=lambda d: str(d.get("marked_at") or ""))


def show_release(tag: str, reports_dir: Path | None = None) -> dict[str, Any]:
    """The stored mark of ``tag``; ``FileNotFoundError`` lists the tags there are, :class:`FileRefused` (a
    ``ValueError``) says why a mark that is there cannot be read (not a regular file, corrupt)."""
    path = names.inside(_release_dir(reports_dir), tag, ".json", "release tag")
    try:
        data = read_json_file(path, what="release mark")
    except FileNotFoundError:
        data = None
    if data is None:
        known = ", ".join(p.stem for p in sorted(_release_dir(reports_dir).glob("*.json"))) or "none"
        raise FileNotFoundError(f"no release {tag!r} in {_release_dir(reports_dir)} (known: {known})")
    if not isinstance(data, dict):
        raise FileRefused(_NOT_AN_OBJECT.format(path=path))
    return data
