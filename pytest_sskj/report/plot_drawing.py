"""The plots of a run drawn in child processes, on the cores a finished session leaves idle.

:func:`draw_plots` starts one child that plans the run's :class:`~pytest_sskj.report.plots.PlotTask` list again
from the run's files (and refuses when its plan differs from the session's), imports matplotlib once and forks
into one process per core, each drawing a share of about equal cost; :meth:`PlotDrawing.wait` collects what
they report and draws in this process whatever they did not (the child could not start, failed or timed out:
the same exception as :func:`~pytest_sskj.report.plots.render_all` then surfaces here).  The pytest process
never imports matplotlib (0.35-0.45 s to import, and its objects slow the interpreter's exit).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pytest_sskj.report.plots import PlotTask, plot_tasks

__all__ = ["MAX_DRAWING_PROCESSES", "PlotDrawing", "draw_main", "draw_plots", "exit_now"]

_log = logging.getLogger(__name__)
MAX_DRAWING_PROCESSES = 4
"""Child processes :func:`draw_plots` starts at most (each pays ~0.4 s to start Python and import matplotlib)."""


def _shares(weights: Sequence[int], n: int) -> list[list[int]]:
    """Task indices split into at most ``n`` shares of about equal weight (heaviest first onto the lightest share)."""
    loads = [0] * n
    shares: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(weights)), key=lambda i: -weights[i]):
        k = loads.index(min(loads))
        shares[k].append(i)
        loads[k] += weights[i]
    return [sorted(s) for s in shares if s]


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _child_env() -> dict[str, str]:
    """This environment, with the directory this package was imported from first on ``PYTHONPATH`` and one
    BLAS thread (nothing drawn needs more; a process without threads forks cleanly)."""
    root = str(Path(__file__).resolve().parents[2])
    path = [root, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    one = dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    return {**os.environ, **one, "PYTHONPATH": os.pathsep.join(path)}


def _plan_digest(tasks: Sequence[PlotTask]) -> str:
    """What the child checks it planned the same tasks by: a digest of their names, in order."""
    import hashlib

    return hashlib.sha256("\n".join(t.name for t in tasks).encode()).hexdigest()


_CHILD = (
    "import sys; from pytest_sskj.report.plot_drawing import draw_main, exit_now; exit_now(draw_main(sys.argv[1:]))"
)


def exit_now(code: int) -> NoReturn:
    """End the drawing child without the interpreter's teardown of matplotlib (0.1 s of the session's wait):
    its files are written and closed, nothing else is left to clean."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class PlotDrawing:
    """The plots of a run being drawn by a child process (:func:`draw_plots`); :meth:`wait` returns what
    :func:`render_all` would, drawing in this process every task the child did not report done (it could not
    start, failed or timed out: the same exception as :func:`render_all` then surfaces here)."""

    def __init__(self, run_dir: Path, tasks: list[PlotTask], slo: Sequence[str], workers: int) -> None:
        self.run_dir = run_dir
        self.tasks = tasks
        self.child: subprocess.Popen[str] | None = None
        self.deadline = time.monotonic() + 60.0 + 10.0 * len(tasks)
        if workers < 1 or not tasks:
            return
        shares = _shares([t.weight for t in tasks], workers)
        spec = json.dumps({"run_dir": str(run_dir), "slo": list(slo), "plan": _plan_digest(tasks), "shares": shares})
        try:
            self.child = subprocess.Popen(
                [sys.executable, "-c", _CHILD, spec],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                env=_child_env(),
                start_new_session=True,  # its forks too: stopped as one group (_stop)
            )
        except OSError as exc:
            _log.warning("pytest-sskj: could not start the plot-drawing process (%s); drawing here", exc)

    def _collect(self, child: subprocess.Popen[str]) -> dict[int, Path | None]:
        """What the child reported done: task index -> file (``None``: nothing to draw)."""
        try:
            out, err = child.communicate(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(child)
            out, err = child.communicate()  # what it reported before
            err += "\nno answer in time: stopped"
        done: dict[int, Path | None] = {}
        for line in out.splitlines():
            try:
                rec = json.loads(line)
                i, name = int(rec["task"]), rec["file"]
            except (ValueError, KeyError, TypeError):
                continue
            if 0 <= i < len(self.tasks):
                done[i] = None if name is None else self.run_dir / "plots" / str(name)
        if child.returncode != 0 or len(done) < len(self.tasks):
            last = (err.strip().splitlines() or ["no error output"])[-1][:300]
            _log.warning(
                "pytest-sskj: the plot-drawing process ended with %s (%s); drawing %d plot(s) here",
                child.returncode,
                last,
                len(self.tasks) - len(done),
            )
        return done

    def wait(self) -> list[Path]:
        """The files written, in task order, once the child is done."""
        child, self.child = self.child, None
        done: dict[int, Path | None] = {}
        if child is not None:
            try:
                done = self._collect(child)
            finally:
                _stop(child)
        drawn = [done[i] if i in done else task.draw() for i, task in enumerate(self.tasks)]
        return [p for p in drawn if p is not None]

    def close(self) -> None:
        """Stop the child if it is still drawing (a session that ends without waiting for its plots)."""
        child, self.child = self.child, None
        if child is not None:
            _stop(child)


def _kill(child: subprocess.Popen[str]) -> None:
    """SIGKILL the child and its forks (the process group ``start_new_session`` made)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
    child.kill()


def _stop(child: subprocess.Popen[str]) -> None:
    """Kill and reap the child unless it was collected already (an interrupted wait, a session that ended
    first)."""
    if child.returncode is None:
        _kill(child)
        child.communicate()


def draw_plots(
    run_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]],
    slo: Sequence[str] = (),
    *,
    workers: int | None = None,
) -> PlotDrawing:
    """Start drawing every plot of the run (:func:`plot_tasks`) in a child process and return at once; ``rows``
    and ``verdicts`` must be what ``run_dir``'s files hold (the child reads them again).  The child imports
    matplotlib once, then forks into ``workers`` processes, each drawing a share of about equal cost (default:
    one per usable core, at most :data:`MAX_DRAWING_PROCESSES`).  ``workers=0``, or no matplotlib to import,
    draws everything in this process at :meth:`PlotDrawing.wait`."""
    from importlib.util import find_spec

    tasks = plot_tasks(run_dir, rows, verdicts, slo)
    n = min(MAX_DRAWING_PROCESSES, _usable_cores()) if workers is None else workers
    if not (rows or verdicts) or find_spec("matplotlib") is None:
        n = 0  # nothing to draw, or the ImportError render_all raises should surface in this process
    return PlotDrawing(run_dir, tasks, slo, n)


def _draw_share(tasks: Sequence[PlotTask], share: Sequence[int]) -> None:
    """Draw ``share`` of ``tasks``, one JSON line on stdout per task done (one write each: lines of the forks
    sharing the pipe never interleave)."""
    for i in share:
        path = tasks[i].draw()
        sys.stdout.write(json.dumps({"task": i, "file": None if path is None else path.name}) + "\n")
        sys.stdout.flush()


def _fork_share(tasks: Sequence[PlotTask], share: Sequence[int]) -> int:
    """Draw ``share`` in a fork of this process; returns its pid.  The fork never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _draw_share(tasks, share)
        code = 0
    except BaseException:  # its tasks stay unreported: the session draws them itself
        import traceback

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def draw_main(argv: Sequence[str]) -> int:
    """The drawing child (:class:`PlotDrawing`): ``argv[0]`` is JSON ``{run_dir, slo, plan, shares}``.  Plans
    the run's tasks from its files, imports matplotlib, forks one process per share after the first (which it
    draws itself; no fork where the platform is not Linux: it draws every share) and writes one JSON line per
    task done, ``{"task": i, "file": name or null}``.  Exit 3: the plan differs from the session's (``plan``,
    :func:`_plan_digest`: the files changed); 1: a share failed."""
    from pytest_sskj.report.results import read_results, read_verdicts

    spec = json.loads(argv[0])
    run_dir = Path(spec["run_dir"])
    rows, verdicts = read_results(run_dir).rows, read_verdicts(run_dir).rows
    tasks = plot_tasks(run_dir, rows, verdicts, [str(g) for g in spec["slo"]])
    if _plan_digest(tasks) != spec["plan"]:
        sys.stderr.write(f"the plots planned from {run_dir} are not the ones asked for: {[t.name for t in tasks]}\n")
        return 3
    import matplotlib.figure  # noqa: F401  (once, before the forks: 0.4 s each would pay)
    from matplotlib.backends import backend_agg  # noqa: F401

    shares: list[list[int]] = [[int(i) for i in s] for s in spec["shares"]]
    forked = sys.platform == "linux" and hasattr(os, "fork")
    pids = [_fork_share(tasks, s) for s in shares[1:]] if forked else []
    for share in shares[:1] if forked else shares:  # the first share here, or every share without forks
        _draw_share(tasks, share)
    failed = [pid for pid in pids if os.waitpid(pid, 0)[1] != 0]
    return 1 if failed else 0
