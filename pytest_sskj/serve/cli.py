"""``python -m pytest_sskj serve start|status|stop``: the command line of :mod:`pytest_sskj.serve`.

Every pytest-sskj option of a run is accepted after the action (``--profile``, ``--nodes``, ``--backend``,
``--launcher``, ``--sskj-ssh-*``, ``--sskj-reports-dir``...), with the same ini file and ``SSKJ_*`` variables,
resolved by pytest itself, so a bad value is the same usage error as in a run (exit 4).  Exit status: 0 done
(``status``: every rank alive and every URL healthy), 1 refused, failed, unhealthy or not running, 4 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import pytest

from pytest_sskj.names import NameRefused
from pytest_sskj.options import Option
from pytest_sskj.serve.control import DeploymentStatus, ServeError, load, start, status, stop
from pytest_sskj.serve.state import check_name, known_names

__all__ = ["main", "parser"]

USAGE = 4


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pytest_sskj serve",
        description="Deployments that outlive a session: start a profile's servers and leave them running, show "
        "their health, stop them on every node. Any pytest-sskj run option may follow (--profile, --nodes, "
        "--backend, --launcher, --sskj-ssh-*, --sskj-reports-dir); benchmark one with "
        "`pytest acceptance/ --sskj-deployment NAME`.",
    )
    p.add_argument("action", choices=("start", "status", "stop"))
    p.add_argument("name", nargs="?", default=None, help="deployment name (default: 'default'; status: every one)")
    p.add_argument("--name", dest="name_opt", default=None, help="deployment name (same as the positional)")
    p.add_argument("--json", action="store_true", help="status/start: print JSON")
    p.add_argument("--stop-timeout", type=float, default=15.0, help="stop: seconds of SIGTERM grace per rank")
    return p


def _config(args: Sequence[str], *, records: bool) -> pytest.Config:
    """The run options resolved by pytest; ``records=False`` (status, stop) writes nothing: no run directory (a
    ``--collect-only`` session applies every check and leaves no run behind)."""
    from _pytest.config import _prepareconfig

    config = _prepareconfig(["-p", "no:cacheprovider", *([] if records else ["--collect-only"]), *args], None)
    config._do_configure()
    return config


# pytest's own options that choose where the run's configuration comes from (each takes a value)
_CONFIG_FLAGS = ("-c", "--config-file", "--rootdir", "-o", "--override-ini")


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1 and not arg[1:2].isdigit()


def check_run_options(rest: Sequence[str], action: str, options: Sequence[Option]) -> None:
    """Refuse what follows the action unless it is a run option of ``options`` (the option table) or
    -c/--rootdir/-o: pytest's own flags (``-rf``, ``-x``, ``-p``) mean nothing to a deployment, and a second name
    is not a name."""
    takes = {f for o in options if o.kind != "bool" for f in o.flags} | set(_CONFIG_FLAGS)
    flags = {f for o in options if o.kind == "bool" for f in o.flags}
    i = 0
    while i < len(rest):
        arg = rest[i]
        flag = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if flag in takes and (flag != arg or (i + 1 < len(rest) and not _is_flag(rest[i + 1]))):
            i += 1 if flag != arg else 2
            continue
        if flag in flags and flag == arg:
            i += 1
            continue
        what = (
            "needs a value"
            if flag in takes
            else ("is not a pytest-sskj run option" if arg.startswith("-") else "is a second name")
        )
        raise pytest.UsageError(
            f"{arg!r} {what}\n"
            f"  accepted after `serve {action} [NAME]`: the run options of `pytest --help` group sskj (--profile, "
            "--nodes, --backend, --launcher, --sskj-*, --reports-dir...) and -c/--rootdir/-o\n"
            "  Hint: a deployment name is letters, digits, '_', '.', '+', '-' starting with a letter, digit or '_'"
        )


Say = Callable[[str], None]


def _start(ns: argparse.Namespace, config: pytest.Config, reports: Path, name: str, out: Say) -> int:
    st = start(config, name, say=out)
    if ns.json:
        out(json.dumps(st.as_dict(), indent=2))
        return 0
    out(
        f"deployment {st.name} started: {st.engine} {st.label} at {', '.join(st.urls)} ({len(st.ranks)} rank(s); "
        f"state {reports / 'deployments' / (st.name + '.json')}); benchmark it with "
        f"`pytest acceptance/ --sskj-deployment {st.name}"
        f"{' --profile ' + st.profile if st.topology and st.profile else ''}`"
    )
    return 0


def _status_json(results: Sequence[DeploymentStatus]) -> str:
    return json.dumps(
        [
            {
                "name": r.state.name,
                "healthy": r.healthy,
                "alive": r.alive,
                "urls": list(r.state.urls),
                "ranks": [
                    {
                        "node": x.rank.node,
                        "rank": x.rank.rank,
                        "group": x.rank.group,
                        "pids": list(x.pids),
                        "detail": x.detail,
                    }
                    for x in r.ranks
                ],
                "health": [list(h) for h in r.health],
            }
            for r in results
        ],
        indent=2,
    )


def _status(ns: argparse.Namespace, reports: Path, name: str | None, identity: Path | None, out: Say) -> int:
    names = [name] if name else known_names(reports)
    if not names:
        out(f"no deployments under {reports / 'deployments'}")
        return 1
    results = [status(load(reports, n), ssh_identity=identity) for n in names]
    if ns.json:
        out(_status_json(results))
    for line in [] if ns.json else [x for r in results for x in r.lines()]:
        out(line)
    return 0 if all(r.healthy for r in results) else 1


def _stop(ns: argparse.Namespace, reports: Path, name: str, identity: Path | None, out: Say, err: Say) -> int:
    rep = stop(load(reports, name), reports, ssh_identity=identity, timeout_s=ns.stop_timeout)
    for r, ok, detail in rep.results:
        (out if ok else err)(f"  {r.node} rank {r.rank}: {detail}")
    if not rep.clean:
        err(f"deployment {name}: NOT every process is gone; the state file is kept (run stop again)")
        return 1
    if not rep.was_alive:
        err(f"deployment {name} was not running (every rank was already gone); its state file was removed")
        return 1
    out(f"deployment {name} stopped on every node; state removed")
    return 0


def _run(ns: argparse.Namespace, config: pytest.Config, out: Say, err: Say) -> int:
    from pytest_sskj.stash import SETTINGS_KEY

    settings = config.stash[SETTINGS_KEY]
    name = ns.name_opt or ns.name
    if ns.action == "start":
        return _start(ns, config, settings.reports_dir, name or "default", out)
    if ns.action == "status":
        return _status(ns, settings.reports_dir, name, settings.ssh_identity, out)
    if not name:
        err("serve stop needs the deployment name (`python -m pytest_sskj serve status` lists them)")
        return USAGE
    return _stop(ns, settings.reports_dir, name, settings.ssh_identity, out, err)


def _write(stream: TextIO) -> Say:
    def say(text: str) -> None:
        stream.write(text + "\n")

    return say


def main(argv: Sequence[str], options: Sequence[Option]) -> int:
    """``serve ACTION [NAME] [run options]``; ``options`` is the option table (``subsystems.OPTIONS``) whose flags
    may follow."""
    ns, rest = parser().parse_known_args(list(argv))
    out, err = _write(sys.stdout), _write(sys.stderr)
    name = ns.name_opt or ns.name
    try:
        if name is not None:  # refused before anything is resolved, launched or written
            check_name(name)
        check_run_options(rest, ns.action, options)
        config = _config(rest, records=ns.action == "start")
    except (pytest.UsageError, NameRefused) as exc:
        err(f"ERROR: serve {ns.action}: {exc}")
        return USAGE
    try:
        return _run(ns, config, out, err)
    except NameRefused as exc:  # a deployment's state file that a symlink leads out of the deployments dir
        err(f"serve {ns.action}: {exc}")
        return USAGE
    except ServeError as exc:
        err(f"serve {ns.action}: {exc}")
        return 1
    finally:
        config._ensure_unconfigure()
