"""``python -m pytest_sskj``: release marking, report rendering and profiles outside a pytest run.

``release mark --run RUN_ID [--run RUN_ID2] --tag NAME`` / ``release list`` / ``release show TAG`` (see
:mod:`pytest_sskj.report.release`); ``report html --alluredir DIR --out FILE [--check]`` (see
:mod:`pytest_sskj.report.html`); ``report summary --run RUN_ID`` regenerates ``summary.md`` and the plots
of a (possibly crashed) run; ``profiles [list]`` lists the shipped profiles and ``profiles show NAME`` prints
one resolved (every value with the layer file it came from, its layouts and deployment groups);
``serve start|status|stop [NAME] [run options]`` (see :mod:`pytest_sskj.serve`);
``db import RUN_DIR...``, ``history``, ``compare A B`` and ``export --run RUN_ID`` (see :mod:`pytest_sskj.history.cli`).
Exit status: 0 done, 1 refused or check failed, 2 bad input or missing tool.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sskj.report.release import ReleaseConfig

__all__ = ["main"]


def _reports_default() -> Path:
    return Path(os.environ.get("SSKJ_REPORTS_DIR") or "reports")


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")


def _name(what: str) -> Callable[[str], str]:
    """An argparse ``type``: a run id, release tag or baseline that names a folder or file (pytest_sskj/names.py);
    a bad one is refused at parse time (exit 2) saying what is accepted."""

    def check(text: str) -> str:
        from pytest_sskj.names import NameRefused, check_name

        try:
            return check_name(text, what)
        except NameRefused as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pytest_sskj", description="pytest-sskj release marks and reports")
    sub = p.add_subparsers(dest="command", required=True)

    rel = sub.add_parser("release", help="mark a green run as a release; list and show marks")
    rsub = rel.add_subparsers(dest="action", required=True)
    mark = rsub.add_parser(
        "mark",
        help="write reports/releases/<tag>.json if every required suite passed",
        description="Mark a release when every suite release.toml requires ran in full and passed. Several runs "
        "of a suite cover it together when every test of its collection (each run records what it found, deselected "
        "tests included) ran in at least one of them and none failed in any: how the suite was split (-m, -k, a "
        "path below it) does not matter, as long as one of the runs collected the whole suite. Without --run it "
        "judges the newest runs that cover each required suite: the newest `pytest acceptance/`; for unit/ the "
        "newest whole-suite runs (`pytest unit/`, `pytest unit/ --run-slow -m slow`), then, for what they left out, "
        "the newest runs of a path below it (`pytest unit/twin/ --run-slow`); -k and --lf runs only with --run. On "
        "a CPU box use --scope cpu (hardware-absent skips are accepted and listed in the mark). A refusal lists its "
        "reasons ranked, at most 6 lines; --verbose or --json gives every one.",
    )
    mark.add_argument(
        "--run",
        action="append",
        default=None,
        type=_name("run id"),
        help="run id (the folder under --reports-dir); repeat it to judge several sessions together "
        "(default: the newest runs that cover each required suite's collection between them)",
    )
    mark.add_argument(
        "--tag", required=True, type=_name("release tag"), help="release name, e.g. v0.3.0 or kimi3-sm120-2026-11-29"
    )
    mark.add_argument("--config", type=Path, default=None, help="release.toml (default: nearest one from cwd)")
    mark.add_argument("--force", action="store_true", help="replace an existing mark of the same tag")
    mark.add_argument(
        "--scope",
        default=None,
        help="release scope of release.toml (default: its default_scope): gpu, cpu, or job (a user's release: "
        "`pytest unit/` as typed plus their green acceptance job); release.toml documents each",
    )
    mark.add_argument("--json", action="store_true", help="print the outcome (mark or refusal) as JSON")
    mark.add_argument(
        "--verbose", "-v", action="store_true", help="on a refusal, print every reason, not the ranked six"
    )
    lst = rsub.add_parser("list", help="list release marks")
    lst.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show = rsub.add_parser("show", help="print one release mark: scope, build, runs and their commands, counts")
    show.add_argument("tag", type=_name("release tag"))
    show.add_argument("--json", action="store_true", help="print the whole mark as JSON")
    for sp in (mark, lst, show):
        sp.add_argument(
            "--reports-dir", type=Path, default=None, help="reports root (default: $SSKJ_REPORTS_DIR or reports/)"
        )

    rep = sub.add_parser("report", help="render reports")
    psub = rep.add_subparsers(dest="action", required=True)
    html = psub.add_parser("html", help="render Allure results into one self-contained HTML file (Allure 3)")
    html.add_argument("--alluredir", type=Path, required=True, help="the --alluredir of the pytest run")
    html.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    html.add_argument("--name", default="pytest-sskj", help="report title")
    html.add_argument(
        "--npm-prefix",
        type=Path,
        default=None,
        help="where allure was installed with "
        "`npm install --prefix DIR allure@3.18.0` (default: node_modules/ here or in the checkout)",
    )
    html.add_argument(
        "--check",
        action="store_true",
        help="then open it in headless Chromium and assert it shows the tests, a metric attachment and a plot",
    )
    html.add_argument(
        "--screenshot", type=Path, default=None, help="with --check: PNG screenshot path (default: next to --out)"
    )
    html.add_argument(
        "--history",
        type=Path,
        default=None,
        help="Allure 3 history file shared across runs: the report shows every test's earlier runs and the "
        "metrics trend, and this run is appended (default: <reports dir>/allure-history.jsonl)",
    )
    html.add_argument("--no-history", action="store_true", help="render without cross-run history")
    html.add_argument(
        "--check-history",
        action="store_true",
        help="with --check: also assert a test's History tab lists an earlier run",
    )
    summ = psub.add_parser("summary", help="regenerate summary.md and plots of a run from its files")
    summ.add_argument("--run", required=True, type=_name("run id"))
    summ.add_argument("--reports-dir", type=Path, default=None)

    prof = sub.add_parser("profiles", help="list the profiles, or show one resolved")
    prsub = prof.add_subparsers(dest="action")
    prsub.add_parser("list", help="every deployment profile (name, description)")
    pshow = prsub.add_parser("show", help="one profile resolved: values, their layer files, layouts, groups")
    pshow.add_argument("name", help="a profile name (pro6000/kimi3-sglang-pd) or a file")
    sub.add_parser(
        "serve",
        help="start|status|stop a named deployment that outlives the session (`serve --help`)",
        add_help=False,
    )
    from pytest_sskj.history import cli as history_cli

    history_cli.add_parsers(sub)
    return p


def _release(args: argparse.Namespace) -> int:
    reports = args.reports_dir or _reports_default()
    if args.action == "mark":
        return _release_mark(args, reports)
    if args.action == "list":
        return _release_list(args, reports)
    return _release_show(args, reports)


def _release_config(args: argparse.Namespace) -> ReleaseConfig | None:
    """The release.toml named by ``--config`` or found upwards from cwd; ``None`` (error printed) when absent or bad."""
    from pytest_sskj.report import release

    cfg_path = args.config or release.find_config()
    if cfg_path is None:
        _err(f"no {release.CONFIG_NAME} found from {Path.cwd()} upwards; pass --config PATH")
        return None
    try:
        return release.load_config(cfg_path)
    except ValueError as exc:
        _err(str(exc))
        return None


def _release_mark(args: argparse.Namespace, reports: Path) -> int:
    from pytest_sskj.report import release

    cfg = _release_config(args)
    if cfg is None:
        return 2
    picked = args.run or release.latest_runs(reports, cfg, scope=args.scope)
    runs = "+".join(picked)
    if not args.run and not args.json:
        _out(f"judging the latest runs: {runs or '(none found)'} (name others with --run)")
    try:
        out = release.mark(picked, args.tag, reports_dir=reports, config=cfg, force=args.force, scope=args.scope)
    except release.ReleaseRefused as exc:
        if args.json:
            _out(json.dumps({"verdict": "refused", "tag": args.tag, "run_id": runs, "reasons": exc.reasons}))
        _err(str(exc) if args.verbose else exc.ranked())
        return 1
    if args.json:
        _out(json.dumps({"verdict": "release", "tag": args.tag, "run_id": runs, "path": str(out)}))
    else:
        _print_marked(out, runs, args.tag, args.scope or cfg.default_scope)
    from pytest_sskj.history.cli import record_release

    note = record_release(reports, args.tag)
    if note and not args.json:
        _out(note)
    return 0


def _print_marked(out: Path, runs: str, tag: str, scope: str) -> None:
    from pytest_sskj.report.release import describe_release

    _out(f"marked run {runs} as release {tag}: {out}")
    data = json.loads(out.read_text(encoding="utf-8"))
    accepted = data.get("accepted_skips") or []
    if accepted:
        _out(f"  scope {scope}: {len(accepted)} skip(s) accepted, each listed in the mark")
    _out("\n".join(line for line in describe_release(data).splitlines()[1:] if not line.startswith("  tests: ")))


def _release_list(args: argparse.Namespace, reports: Path) -> int:
    from pytest_sskj.report import release

    marks = release.list_releases(reports)
    if args.json:
        _out(json.dumps(marks, indent=2))
        return 0
    if not marks:
        _out(f"no release marks in {reports / 'releases'}")
    for m in marks:
        counts = ", ".join(f"{k} {v}" for k, v in sorted((m.get("counts") or {}).items()))
        _out(f"{m['tag']}\trun {m.get('run_id')}\t{m.get('marked_at')}\t{counts or m.get('error', '')}")
    return 0


def _release_show(args: argparse.Namespace, reports: Path) -> int:
    from pytest_sskj.report import release

    try:
        data = release.show_release(args.tag, reports)
    except (FileNotFoundError, ValueError) as exc:
        _err(str(exc))
        return 2
    _out(json.dumps(data, indent=2, sort_keys=True) if args.json else release.describe_release(data))
    return 0


def _report(args: argparse.Namespace) -> int:
    if args.action == "summary":
        from pytest_sskj.names import NameRefused, inside
        from pytest_sskj.report.plugin import regenerate

        try:
            run_dir = inside(args.reports_dir or _reports_default(), args.run, what="run id")
        except NameRefused as exc:
            _err(str(exc))
            return 2
        from pytest_sskj.rundir import not_a_run

        problem = not_a_run(run_dir)
        if problem:
            _err(f"{problem} (see --reports-dir)")
            return 2
        facts = regenerate(run_dir, plots=True)
        _out(
            f"{run_dir / 'summary.md'}: {facts['rows']} row(s), {facts['verdicts']} verdict(s), "
            f"{len(facts['plots'])} plot(s)"
        )
        for p in facts["problems"]:
            _out(f"  recovered: {p}")
        return 0
    from pytest_sskj.report import html

    allure = None
    if args.npm_prefix is not None:
        allure = html.find_allure(npm_prefix=args.npm_prefix)
        if allure is None:
            _err(
                f"no allure in {args.npm_prefix / 'node_modules' / '.bin'}; run "
                f"`npm install --no-audit --no-fund --prefix {args.npm_prefix} allure@{html.ALLURE_VERSION}`"
            )
            return 2
    try:
        hist = None if args.no_history else (args.history or _reports_default() / "allure-history.jsonl")
        out = html.render_html(
            args.alluredir, args.out, name=args.name, allure=allure, history=hist, defer_history=args.check
        )
    except (html.HtmlToolMissing, FileNotFoundError, RuntimeError) as exc:
        _err(str(exc))
        return 2
    _out(f"wrote {out} ({out.stat().st_size} bytes)")
    if not args.check:
        return 0
    shot = args.screenshot or out.with_suffix(".png")
    try:
        res = html.check_html(out, args.alluredir, screenshot=shot, history=args.check_history)
    except html.HtmlToolMissing as exc:
        _err(str(exc))
        return 2
    except (html.HtmlCheckError, RuntimeError, TimeoutError) as exc:
        html.pending_history(out).unlink(missing_ok=True)  # a render whose check failed is no history entry
        _err(f"HTML check failed: {exc}")
        return 1
    if hist is not None:
        html.commit_history(hist, out)
    _out(
        f"check passed: {len(res.tests)} test page(s) rendered; {res.test_checked!r} shows metric attachment "
        f"{res.metric_attachment!r} ({res.metric_text_seen!r} visible) and plot {res.plot_attachment!r} "
        f"({res.plot_size_px[0]}x{res.plot_size_px[1]} px); screenshot {res.screenshot} ({res.screenshot_bytes} bytes)"
    )
    if res.history_test:
        _out(f"history: {res.history_test!r} lists {res.history_items} earlier run(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # its options are pytest's own (run options), parsed by pytest
        from pytest_sskj.serve import main as serve_main
        from pytest_sskj.subsystems import OPTIONS

        return serve_main(argv[1:], OPTIONS)
    args = _parser().parse_args(argv)
    if args.command == "release":
        return _release(args)
    if args.command == "profiles":
        from pytest_sskj.deploy.show import profiles_command
        from pytest_sskj.profile import profile_keys
        from pytest_sskj.subsystems import OPTIONS

        keys = profile_keys(OPTIONS)
        return profiles_command(args.action or "list", getattr(args, "name", None), _out, _err, keys)
    if args.command == "report":
        return _report(args)
    from pytest_sskj.history import cli as history_cli

    return history_cli.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
