"""Subcommands of ``python -m pytest_sskj``: ``db import``, ``history``, ``compare`` and ``export``.

The database is ``--db URL``, else ``$SSKJ_DB``, else ``<reports dir>/results.sqlite``; the reports dir is
``--reports-dir``, else ``$SSKJ_REPORTS_DIR``, else ``reports/``.  Exit status: 0 done, 1 refused
(incomparable runs), 2 bad input or an unreachable database.  URLs are printed with the password redacted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_sskj.names import NameRefused, check_name, inside

__all__ = ["add_parsers", "run"]

COMMANDS = ("db", "history", "compare", "export")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", default=None, help="database URL or SQLite path (default: $SSKJ_DB or <reports>/results.sqlite)"
    )
    p.add_argument(
        "--reports-dir", type=Path, default=None, help="reports root (default: $SSKJ_REPORTS_DIR or reports/)"
    )


def _fmt(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", dest="fmt", action="store_const", const="json", default="text", help="print JSON")
    g.add_argument("--csv", dest="fmt", action="store_const", const="csv", help="print CSV")


def _name(what: str) -> Callable[[str], str]:
    """An argparse ``type`` for a run id or release tag (pytest_sskj/names.py): refused at parse time (exit 2)."""

    def check(text: str) -> str:
        try:
            return check_name(text, what)
        except NameRefused as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def add_parsers(sub: Any) -> None:
    """Add the history subcommands to ``python -m pytest_sskj``'s subparsers."""
    db = sub.add_parser("db", help="the results database")
    dsub = db.add_subparsers(dest="action", required=True)
    imp = dsub.add_parser("import", help="write run directories into the database (back-fill or retry; idempotent)")
    imp.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR")
    _common(imp)
    hist = sub.add_parser("history", help="every stored point across runs, filtered")
    for name in ("platform", "model", "engine", "backend", "layout", "tag", "run"):
        hist.add_argument(f"--{name}", default=None)
    hist.add_argument("--shape", default=None, help="ISL512/OSL16 or 512/16")
    hist.add_argument("--since", default=None, help="runs started on or after this date (YYYY-MM-DD)")
    hist.add_argument("--until", default=None, help="runs started on or before this date (YYYY-MM-DD)")
    _fmt(hist)
    _common(hist)
    cmp_ = sub.add_parser("compare", help="point-by-point deltas of run B against run A (run ids or release tags)")
    cmp_.add_argument("a", type=_name("baseline"), help="baseline: run id, release tag or last-release")
    cmp_.add_argument("b", type=_name("candidate"), help="candidate: run id or release tag")
    cmp_.add_argument("--allow-incomparable", action="store_true", help="compare anyway, marking every point")
    cmp_.add_argument(
        "--margin", type=_margin, default=0.0, help="percent B must beat A by to count as better (0-1000, default 0)"
    )
    cmp_.add_argument(
        "--fail-on",
        choices=("worse", "never"),
        default="never",
        help="exit 1 when a row is worse beyond the between-run noise (default never: report only)",
    )
    cmp_.add_argument("--json", dest="fmt", action="store_const", const="json", default="text")
    _common(cmp_)
    exp = sub.add_parser("export", help="the users' JSONL shapes of a run (adaptive_points/shapes, run_manifest)")
    exp.add_argument("--run", required=True, type=_name("run id"), help="run id (folder under the reports dir)")
    exp.add_argument("--out", type=Path, default=None, help="output folder (default: <run dir>/export)")
    exp.add_argument("--reports-dir", type=Path, default=None)


def _margin(text: str) -> float:
    """``--margin``: a finite percentage 0-1000 (NaN, inf and negative margins judge nothing)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a percentage 0-1000, e.g. 2") from None
    if not math.isfinite(value) or not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage 0-1000 (finite, not negative); e.g. 2")
    return value


def _reports(args: argparse.Namespace) -> Path:
    return Path(args.reports_dir or os.environ.get("SSKJ_REPORTS_DIR") or "reports")


def _open(args: argparse.Namespace) -> Any:
    from pytest_sskj.history.db import ResultsDB, display_url, resolve_url

    try:
        url = resolve_url(args.db or os.environ.get("SSKJ_DB"), _reports(args))
    except ValueError as exc:
        raise SystemExit(
            _fail(f"--db: {exc}; accepted: postgresql://user:pass@host/db, sqlite:///path, a path")
        ) from None
    if url is None:
        raise SystemExit(_fail("--db none: no database to use"))
    if url.startswith("sqlite:///") and args.command != "db" and not Path(url.split(":///", 1)[1]).is_file():
        raise SystemExit(_fail(f"no results database at {display_url(url)}; write one with `db import RUN_DIR`"))
    try:
        return ResultsDB(url)
    except Exception as exc:
        from pytest_sskj.redact import redact_text

        raise SystemExit(_fail(f"results database {display_url(url)} unreachable: {redact_text(str(exc))}")) from None


def _fail(text: str, code: int = 2) -> int:
    sys.stderr.write(text + "\n")
    return code


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _import(args: argparse.Namespace) -> int:
    from pytest_sskj.history.importer import import_run
    from pytest_sskj.rundir import not_a_run

    bad = [p for d in args.run_dirs if (p := not_a_run(d))]
    if bad:  # before the database is opened (or created): nothing is written for a wrong folder
        return _fail("; ".join(bad))
    db = _open(args)
    for d in args.run_dirs:
        got = import_run(db, d)
        tags = f", tags {', '.join(got.tags)}" if got.tags else ""
        _out(f"imported {got.run_id}: {got.points} point(s), {got.verdicts} verdict(s){tags} -> {db.display}")
        for p in got.problems:
            _out(f"  note: {p}")
    return 0


def _history(args: argparse.Namespace) -> int:
    from pytest_sskj.history.query import HISTORY_COLUMNS, Filters, history_rows, render_rows

    keys = ("platform", "model", "engine", "backend", "layout", "shape", "since", "until", "tag", "run")
    rows = history_rows(_open(args), Filters(**{k: getattr(args, k) for k in keys}))
    if not rows:  # say so, and exit 1: a script must not read an empty answer as a match
        given = " ".join(f"--{k} {getattr(args, k)}" for k in keys if getattr(args, k) not in (None, "", []))
        sys.stderr.write(f"no stored point matches {given or 'anything (the database is empty)'}\n")
        return 1
    _out(render_rows(rows, HISTORY_COLUMNS, args.fmt))
    return 0


def _stored_runs(args: argparse.Namespace, db: Any, skip: set[str], like: Any) -> list[Any]:
    """The other stored runs of the same code as ``like`` (for the between-run noise), newest 20."""
    from pytest_sskj.history.gate import BaselineError, resolve_baseline, same_code

    reports = _reports(args)
    ids = sorted((p.parent.name for p in reports.glob("*/manifest.json")), reverse=True)
    out = []
    for rid in ids[:40]:
        if rid in skip:
            continue
        try:
            run = resolve_baseline(rid, reports, db, prefer_db=True)
        except BaselineError:
            continue
        if same_code(like, run) and run.rows:
            out.append(run)
        if len(out) >= 20:
            break
    return out


def _summary(c: Any, pairs: int) -> tuple[str, int]:
    """``compare A -> B: 12 row(s): 0 better, 1 worse, ...`` and the number of worse rows."""
    counts: dict[str, int] = {}
    for p in c.points:
        counts[str(p.get("outcome"))] = counts.get(str(p.get("outcome")), 0) + 1
    order = ("better", "worse", "equivalent", "inconclusive", "incomparable", "unmatched")
    parts = ", ".join(f"{counts.get(k, 0)} {k}" for k in order if counts.get(k) or k in ("better", "worse"))
    noise = f"between-run noise from {pairs} stored A/A run pair(s)" if pairs else "no between-run noise known yet"
    head = f"compare {c.a.run_id} -> {c.b.run_id}: {len(c.points)} configuration(s): {parts} ({noise})"
    return head, counts.get("worse", 0)


def _compare(args: argparse.Namespace) -> int:
    from pytest_sskj.history.gate import BaselineError, between_run_noise, resolve_baseline
    from pytest_sskj.history.query import compare_runs, render_compare

    db = _open(args)
    try:
        a = resolve_baseline(args.a, _reports(args), db, prefer_db=True)
        b = resolve_baseline(args.b, _reports(args), db, prefer_db=True)
    except BaselineError as exc:
        return _fail(str(exc).replace("--sskj-baseline ", ""))
    if a.run_id == b.run_id:
        return _fail(
            f"refused: {args.a} and {args.b} are both run {a.run_id}; a comparison needs two runs "
            "(a baseline and a candidate)"
        )
    noise, pairs = between_run_noise(_stored_runs(args, db, {a.run_id, b.run_id}, a))
    c = compare_runs(a, b, allow_incomparable=args.allow_incomparable, margin_pct=args.margin, noise=noise)
    _out(render_compare(c, args.fmt))
    head, worse = _summary(c, pairs)
    if args.fmt == "text":
        _out(head)
    if c.problems and not args.allow_incomparable:
        return _fail("refused: the runs are not comparable (--allow-incomparable compares and marks them)", 1)
    matched = [p for p in c.points if p.get("outcome") != "unmatched"]
    if not matched:
        return _fail(f"refused: {a.run_id} and {b.run_id} have no configuration in common (unrelated runs)", 1)
    if args.fail_on == "worse" and worse:
        return _fail(f"FAIL: {worse} configuration(s) worse beyond the between-run noise (--fail-on worse)", 1)
    return 0


def _export(args: argparse.Namespace) -> int:
    from pytest_sskj.files import folder_problem
    from pytest_sskj.history.export import export_run
    from pytest_sskj.rundir import not_a_run

    try:
        run_dir = inside(_reports(args), args.run, what="run id")
    except NameRefused as exc:
        return _fail(str(exc))
    problem = not_a_run(run_dir)
    if problem:
        return _fail(f"{problem} (see --reports-dir)")
    unusable = folder_problem(args.out) if args.out is not None else None
    if unusable:
        return _fail(f"export --out {args.out}: {unusable[1]}; give a folder (it is created when missing)")
    try:
        paths = export_run(run_dir, args.out)
    except (OSError, ValueError) as exc:  # a read-only or full file system, a value JSON cannot hold
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return _fail(f"export of {run_dir.name} not written: {what}")
    for path in paths:
        _out(f"wrote {path}")
    return 0


def record_release(reports: Path, tag: str) -> str:
    """After ``release mark``: the tag into the results database (``$SSKJ_DB`` or the default file), so
    ``history --tag`` and ``--sskj-baseline TAG`` find it from any machine; a note, never a failure."""
    from pytest_sskj.history.db import ResultsDB, display_url, resolve_url
    from pytest_sskj.history.importer import release_marks
    from pytest_sskj.redact import redact_text

    mark = next((m for m in release_marks(reports) if m["tag"] == tag), None)
    url = resolve_url(os.environ.get("SSKJ_DB"), reports) if mark else None
    if mark is None or url is None:
        return ""
    try:
        db = ResultsDB(url)
        for rid in mark["run_ids"]:
            db.put_tag(tag, rid, mark.get("marked_at"))
        db.close()
    except Exception as exc:  # the mark file is the record; the database is a copy
        return f"note: tag not written to {display_url(url)} ({redact_text(str(exc)).splitlines()[0][:200]})"
    return f"tag {tag} recorded in {display_url(url)}"


def run(args: argparse.Namespace) -> int:
    """Dispatch one parsed history subcommand."""
    handler = {"db": _import, "history": _history, "compare": _compare, "export": _export}[args.command]
    return handler(args)
