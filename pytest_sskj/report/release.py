"""Release marking: a run becomes release ``<tag>`` only when every required suite is green.

``python -m pytest_sskj release mark --run RUN_ID --tag NAME`` reads ``<reports>/<run>/outcomes.json``
(recorded by the reporter plugin) and the repository's ``release.toml`` (which suites are required,
e.g. ``unit`` and ``acceptance``), and writes ``<reports>/releases/<tag>.json`` — verdict, suites and
counts, the run manifest, the A/B comparison and SLO/search figures, the summary table — only when
the run finished and every required suite ran with every test passed: no failure, error, skip, xfail
or xpass.  Otherwise nothing is written and :class:`ReleaseRefused` lists every reason.  ``release
list`` and ``release show`` read the marks back.  Every written value is redacted.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sskj.report.manifest import atomic_write_text
from pytest_sskj.report.outcomes import load_outcomes
from pytest_sskj.report.results import read_results, read_verdicts
from pytest_sskj.report.scrub import scrub

__all__ = [
    "ReleaseConfig",
    "ReleaseRefused",
    "find_config",
    "judge",
    "list_releases",
    "load_config",
    "mark",
    "show_release",
]

CONFIG_NAME = "release.toml"
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


class ReleaseRefused(Exception):
    """The run may not be marked; ``reasons`` says exactly why (one line each)."""

    def __init__(self, run_id: str, tag: str, reasons: Sequence[str]) -> None:
        self.reasons = list(reasons)
        super().__init__(
            f"refusing to mark run {run_id} as release {tag!r}:\n" + "\n".join(f"  - {r}" for r in reasons)
        )


@dataclass(frozen=True)
class ReleaseConfig:
    """``[release]`` of ``release.toml``."""

    required_suites: tuple[str, ...]
    min_tests: Mapping[str, int]
    path: Path | None = None


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
        data = _toml_loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
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
    return ReleaseConfig(tuple(suites), {str(k): int(v) for k, v in mins.items()}, path)


def judge(
    outcomes: Mapping[str, Any], manifest: Mapping[str, Any], config: ReleaseConfig
) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Per-suite outcome counts and every reason the run is not releasable (empty: releasable)."""
    reasons: list[str] = []
    tests = [t for t in outcomes.get("tests", []) if isinstance(t, Mapping)]
    suites: dict[str, dict[str, int]] = {}
    for t in tests:
        c = suites.setdefault(str(t.get("suite")), {})
        c[str(t.get("outcome"))] = c.get(str(t.get("outcome")), 0) + 1
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
    for suite in config.required_suites:
        counts = suites.get(suite)
        if not counts:
            reasons.append(
                f"required suite {suite!r} has no test results in this run; run it "
                f"(e.g. pytest {suite}/) in the same session"
            )
            continue
        total = sum(counts.values())
        need = config.min_tests.get(suite, 1)
        if total < need:
            reasons.append(f"required suite {suite!r} ran {total} test(s); release.toml asks for at least {need}")
    for t in sorted(tests, key=lambda t: str(t.get("nodeid"))):
        if t.get("suite") in config.required_suites and t.get("outcome") != "passed":
            msg = f": {t['message']}" if t.get("message") else ""
            reasons.append(f"required test {t.get('nodeid')} {t.get('outcome')} (in {t.get('when')}){msg}")
    return suites, reasons


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


def mark(run_id: str, tag: str, *, reports_dir: Path | None = None, config: ReleaseConfig, force: bool = False) -> Path:
    """Write ``releases/<tag>.json`` for ``run_id`` or raise :class:`ReleaseRefused` with every reason."""
    if not _TAG.match(tag):
        raise ReleaseRefused(
            run_id,
            tag,
            [f"tag {tag!r} is not a file-name-safe name (letters, digits, . _ + -; starting with a letter or digit)"],
        )
    run_dir = _reports(reports_dir) / run_id
    if not run_dir.is_dir():
        raise ReleaseRefused(run_id, tag, [f"run directory {run_dir} does not exist (see --reports-dir)"])
    out = _release_dir(reports_dir) / f"{tag}.json"
    if out.exists() and not force:
        raise ReleaseRefused(run_id, tag, [f"release {tag!r} already exists ({out}); pick another tag or --force"])
    try:
        outcomes = load_outcomes(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise ReleaseRefused(run_id, tag, [str(exc)]) from None
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ReleaseRefused(run_id, tag, [f"{run_dir / 'manifest.json'} is missing or unreadable: {exc}"]) from None
    suites, reasons = judge(outcomes, manifest, config)
    if reasons:
        raise ReleaseRefused(run_id, tag, reasons)
    settings = manifest.get("settings") or {}
    backends = settings.get("backends") or []
    record = {
        "tag": tag,
        "verdict": "release",
        "marked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run_id": run_id,
        "required_suites": list(config.required_suites),
        "suites": suites,
        "counts": outcomes.get("counts", {}),
        "manifest": manifest,
        "figures": _figures(run_dir, str(backends[0]) if backends else None),
    }
    atomic_write_text(out, json.dumps(scrub(record), indent=2, sort_keys=True, default=str) + "\n")
    return out


def list_releases(reports_dir: Path | None = None) -> list[dict[str, Any]]:
    """One line of facts per release mark, oldest first; unreadable files are listed with their error."""
    out: list[dict[str, Any]] = []
    for path in sorted(_release_dir(reports_dir).glob("*.json")):
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            out.append(
                {
                    "tag": d.get("tag", path.stem),
                    "run_id": d.get("run_id"),
                    "marked_at": d.get("marked_at"),
                    "counts": d.get("counts", {}),
                    "suites": sorted(d.get("suites", {})),
                }
            )
        except (OSError, json.JSONDecodeError) as exc:
            out.append({"tag": path.stem, "error": f"unreadable: {exc}"})
    return sorted(out, key=lambda d: str(d.get("marked_at") or ""))


def show_release(tag: str, reports_dir: Path | None = None) -> dict[str, Any]:
    """The stored mark of ``tag``; ``FileNotFoundError`` lists the tags there are."""
    path = _release_dir(reports_dir) / f"{tag}.json"
    if not _TAG.match(tag) or not path.is_file():
        known = ", ".join(p.stem for p in sorted(_release_dir(reports_dir).glob("*.json"))) or "none"
        raise FileNotFoundError(f"no release {tag!r} in {_release_dir(reports_dir)} (known: {known})")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
