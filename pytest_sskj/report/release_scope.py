"""Release scopes of ``release.toml`` (``[release.scopes.<name>]``): which skips a scope accepts, how much of each
required suite it needs, and the commands that would qualify -- plus the build a mark's runs came from.

A scope's ``coverage`` says, per required suite, what "ran" means:

- ``full`` (the default): every test of the suite's collection ran, in one run or several that between them
  ran all of it (:func:`pytest_sskj.report.release_cover.suite_reasons`; CI's ``pytest unit/`` + ``pytest unit/
  --run-slow -m slow`` + ``pytest unit/twin/ --run-slow``);
- ``as-typed``: one run of the suite *as typed* -- ``pytest unit/`` with no ``-k``, ``-m``, ``--deselect``,
  ``--lf``, no path below the suite and nothing ``--ignore``-d in it -- in which every test it selected has an
  outcome.  What the suite's own conftest deselects by default (the unit suite's slow checks) is not required;
  the mark counts it.  This is a user's release: ``SSKJ_RUN_ID=unit pytest unit/`` plus their green job
  ``pytest acceptance/ --nodes 601-604 --backend marlin,flashinfer_mxfp4`` (scope ``job``).

``qualify`` names, per suite, the command(s) that would qualify: a refusal for a suite that did not run as the
scope needs ends with them.  The build: every run of one mark must come from one build of pytest-sskj (the
version and git commit each run's manifest recorded); runs of different builds are refused, naming each.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.report.release_cover import typed_selection, whole_suite

__all__ = [
    "COVERAGES",
    "Scope",
    "build_identity",
    "build_reasons",
    "command_as_typed",
    "describe_release",
    "parse_scopes",
    "typed_reasons",
]

COVERAGES = ("full", "as-typed")


@dataclass(frozen=True)
class Scope:
    """One release scope of ``release.toml``."""

    name: str
    accept_skip_reasons: tuple[str, ...] = ()
    description: str = ""
    coverage: Mapping[str, str] = field(default_factory=dict)
    """Per suite ``full`` or ``as-typed``; a suite not named is ``full``."""
    qualify: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per suite the command(s) that would qualify (a refusal shows them); default ``pytest <suite>/``."""

    accept_skips_in: tuple[str, ...] | None = None
    """The suites whose skips ``accept_skip_reasons`` applies to (``None``: every suite)."""

    def accepts(self, message: str | None, suite: Any = None) -> bool:
        if self.accept_skips_in is not None and suite not in self.accept_skips_in:
            return False
        return any(re.search(p, message or "") for p in self.accept_skip_reasons)

    def coverage_of(self, suite: str) -> str:
        return self.coverage.get(suite, "full")

    def qualifying(self, suite: str) -> str:
        """The command(s) that would qualify ``suite`` under this scope, as one line."""
        cmds = " + ".join(f"`{c}`" for c in self.qualify.get(suite) or (f"pytest {suite}/",))
        if self.coverage_of(suite) == "full":
            return f"run {cmds} (its whole collection, in one run or several that leave none of it out)"
        return f"run {cmds} (as typed: no -k, -m, --deselect, --lf or path below {suite}/)"


def _strings(path: Path, where: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{path}: {where} must be a command or a non-empty list of commands, e.g. ['pytest unit/']")
    return tuple(value)


def _coverage(path: Path, name: str, body: Mapping[str, Any]) -> dict[str, str]:
    raw = body.get("coverage", {})
    if not isinstance(raw, dict):
        raise ValueError(f'{path}: release.scopes.{name}.coverage must be a table, e.g. {{ unit = "as-typed" }}')
    for suite, value in raw.items():
        if value not in COVERAGES:
            raise ValueError(
                f"{path}: release.scopes.{name}.coverage.{suite} is {value!r}; accepted: {', '.join(COVERAGES)}"
            )
    return {str(k): str(v) for k, v in raw.items()}


def _scope(path: Path, name: str, body: Any) -> Scope:
    if not isinstance(body, dict):
        raise ValueError(f"{path}: release.scopes.{name} must be a table")
    pats = body.get("accept_skip_reasons", [])
    if not isinstance(pats, list) or not all(isinstance(p, str) for p in pats):
        raise ValueError(f"{path}: release.scopes.{name}.accept_skip_reasons must be a list of regexes")
    for pat in pats:
        try:
            re.compile(pat)
        except re.error as exc:
            raise ValueError(f"{path}: release.scopes.{name}: {pat!r} is not a valid regex ({exc})") from None
    qualify = body.get("qualify", {})
    if not isinstance(qualify, dict):
        raise ValueError(f"{path}: release.scopes.{name}.qualify must be a table, e.g. {{ unit = ['pytest unit/'] }}")
    unknown = sorted(set(body) - {"accept_skip_reasons", "accept_skips_in", "description", "coverage", "qualify"})
    if unknown:
        raise ValueError(
            f"{path}: release.scopes.{name} has unknown key(s) {', '.join(unknown)}; "
            "accepted: description, accept_skip_reasons, accept_skips_in, coverage, qualify"
        )
    within = body.get("accept_skips_in")
    if within is not None and (not isinstance(within, list) or not all(isinstance(s, str) for s in within)):
        raise ValueError(f"{path}: release.scopes.{name}.accept_skips_in must be a list of suite names, e.g. ['unit']")
    return Scope(
        str(name),
        tuple(pats),
        str(body.get("description", "")),
        _coverage(path, name, body),
        {str(s): _strings(path, f"release.scopes.{name}.qualify.{s}", v) for s, v in qualify.items()},
        tuple(within) if within is not None else None,
    )


def parse_scopes(path: Path, rel: Mapping[str, Any]) -> tuple[dict[str, Scope], str]:
    """The ``[release.scopes.*]`` tables and the default scope; ``ValueError`` names the key that is wrong."""
    raw = rel.get("scopes", {"gpu": {}})
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{path}: release.scopes must be a table of scopes, e.g. [release.scopes.gpu]")
    scopes = {str(name): _scope(path, str(name), body) for name, body in raw.items()}
    default = str(rel.get("default_scope", next(iter(scopes))))
    if default not in scopes:
        raise ValueError(f"{path}: release.default_scope {default!r} is not one of {', '.join(scopes)}")
    return scopes, default


# -- a suite as typed -------------------------------------------------------------------------------------------
def _narrowed_by(selection: Mapping[str, Any], suite: str) -> list[str]:
    out = [f"{opt} {selection[key]!r}" for opt, key in (("-k", "keyword"), ("-m", "markexpr")) if selection.get(key)]
    if selection.get("deselect"):
        out.append(f"--deselect {', '.join(map(str, selection['deselect']))}")
    if selection.get("lf"):
        out.append("--lf")
    if not whole_suite(selection, suite):
        below = [str(a) for a in selection.get("paths", selection.get("args")) or []]
        out.append(f"a path below it or an --ignore ({', '.join(below) or 'none recorded'})")
    return out


def typed_reasons(tests: Sequence[Mapping[str, Any]], selections: Sequence[Mapping[str, Any]], suite: str) -> list[str]:
    """Why no run of ``selections`` ran ``suite`` as typed with every test it selected given an outcome (empty:
    one did)."""
    head = f"required suite {suite!r} did not run as typed"
    ran = {str(t.get("nodeid")) for t in tests if t.get("suite") == suite}
    reasons: list[str] = []
    for sel in selections:
        named = f" (run {sel['run_id']})" if sel.get("run_id") else ""
        if not sel:
            reasons.append(f"{head}: the run recorded no selection (outcomes.json predates it); run it again")
            continue
        if not typed_selection(sel, suite):
            reasons.append(f"{head}{named}: narrowed with {'; '.join(_narrowed_by(sel, suite))}")
            continue
        collected = (sel.get("collected") or {}).get(suite)
        if isinstance(collected, int) and len(ran) < collected:
            reasons.append(f"{head}{named}: {collected - len(ran)} of {collected} selected test(s) have no outcome")
            continue
        return []
    return reasons or [f"{head}: no run of it was given"]


# -- the build a mark's runs came from ------------------------------------------------------------------------------
def _build(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    b = manifest.get("pytest_sskj")
    return dict(b) if isinstance(b, Mapping) else None


def _label(build: Mapping[str, Any]) -> str:
    commit = str(build.get("git_commit") or "")
    return f"pytest-sskj {build.get('version') or '?'}" + (f" @ {commit[:12]}" if commit else " (no git commit)")


def build_reasons(manifests: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A reason when the runs were made by different builds of pytest-sskj (a version or a known commit differs)."""
    builds = {rid: b for rid, m in manifests.items() if (b := _build(m)) is not None}
    if len(builds) < 2:
        return []
    versions = {b.get("version") for b in builds.values()}
    commits = {b.get("git_commit") for b in builds.values() if b.get("git_commit")}
    if len(versions) <= 1 and len(commits) <= 1:
        return []
    each = ", ".join(f"{rid} ({_label(b)})" for rid, b in builds.items())
    return [f"the runs were made by different builds: {each}; run every suite of a release from one checkout"]


def build_identity(manifests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The one build every run came from (``version``, ``git_commit``), or ``None`` when none was recorded."""
    for m in manifests.values():
        b = _build(m)
        if b is not None:
            return {"version": b.get("version"), "git_commit": b.get("git_commit")}
    return None


def command_as_typed(manifest: Mapping[str, Any]) -> str | None:
    """The run's command line as the user typed it (``pytest unit/``), from the manifest's ``argv``."""
    argv = manifest.get("argv")
    if not isinstance(argv, list) or not argv:
        return None
    return shlex.join(["pytest", *(str(a) for a in argv[1:])])


# -- a stored mark, for a person -------------------------------------------------------------------------------------
_MAPS = ("runs_by_suite", "commands", "coverage", "not_required", "counts", "figures", "build")
_LISTS = ("required_suites", "accepted_skips")


def _map(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = data.get(key)
    return v if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def _suite_line(data: Mapping[str, Any], suite: str) -> str:
    runs = _list(_map(data, "runs_by_suite").get(suite))
    commands = _map(data, "commands")
    shown = ", ".join(f"{rid} ({commands[rid]})" if commands.get(rid) else str(rid) for rid in runs) or "(none)"
    coverage = _map(data, "coverage").get(suite, "full")
    how = "its whole collection" if coverage == "full" else "as typed"
    skipped = _map(data, "not_required").get(suite)
    tail = f"; {skipped} test(s) its defaults deselect not required" if skipped else ""
    return f"  {suite}: {how}, run(s) {shown}{tail}"


def _damaged(data: Mapping[str, Any]) -> list[str]:
    """The mark's fields that are there but not of the type a mark records (a hand-edited or damaged file)."""
    bad = [k for k in _MAPS if data.get(k) is not None and not isinstance(data.get(k), Mapping)]
    return bad + [k for k in _LISTS if data.get(k) is not None and not isinstance(data.get(k), list)]


def describe_release(data: Mapping[str, Any]) -> str:
    """A stored mark as a person reads it: tag, scope, build, each suite's runs with their commands, counts,
    accepted skips and the A/B verdicts (``release show TAG``; ``--json`` gives the whole mark).  A field of the
    wrong type (a damaged mark) is shown as missing and named on a last line, never a traceback."""
    build = data.get("build")
    lines = [
        f"release {data.get('tag')}: {data.get('verdict')}, scope {data.get('scope')}"
        + (f" ({data['scope_description']})" if data.get("scope_description") else ""),
        f"  marked {data.get('marked_at')}, build {_label(build) if isinstance(build, Mapping) else 'not recorded'}",
    ]
    lines += [_suite_line(data, str(s)) for s in _list(data.get("required_suites"))]
    counts = ", ".join(f"{k} {v}" for k, v in sorted(_map(data, "counts").items(), key=lambda kv: str(kv[0])))
    accepted = len(_list(data.get("accepted_skips")))
    lines.append(f"  tests: {counts or 'none'}" + (f" ({accepted} skip(s) accepted by the scope)" if accepted else ""))
    for v in _list(_map(data, "figures").get("comparisons")):
        if not isinstance(v, Mapping) or not v.get("candidate"):
            continue
        lines.append(
            f"  {v.get('candidate')} vs {v.get('baseline')} at chunk {v.get('chunk')} C={v.get('concurrency')}: "
            f"{v.get('outcome')}"
        )
    bad = _damaged(data)
    if bad:
        lines.append(f"  damaged: field(s) {', '.join(bad)} of the mark are not of the type a mark records")
    return "\n".join(lines)
