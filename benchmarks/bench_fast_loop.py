"""The fast loop's four figures (issue 50), for this checkout and a reference commit, side by side.

    python benchmarks/bench_fast_loop.py [--ref HEAD~1] [--ci-log NEW.log [--ref-ci-log OLD.log]] [--skip-unit]

1. ``.ci/run`` cold: read from a fresh-clone CI log of each side (``--ci-log`` / ``--ref-ci-log``: the ``[ci +Ns]``
   stamps; a whole CI run takes 25-40 minutes here, so the script does not start one itself);
2. Ctrl-C under load: the main job (``pytest acceptance/``) with both cores kept busy by two spinning processes,
   SIGINT to its process group (what a terminal's Ctrl-C sends) once its first point is written; seconds until it
   exits, and whether the manifest says ``interrupted`` with the finished points kept;
3. the main job's overhead on the quiet box: the ratio on its terminal's ``overhead:`` line (session wall time over
   the measured benchmark time);
4. ``pytest unit/`` as typed: wall seconds.

The reference side runs from a temporary ``git worktree`` of ``--ref`` with the same interpreter.  A benchmark,
not a test: it prints figures and asserts nothing (the goals are CI <= 1200 s, Ctrl-C <= 5 s, overhead <= 1.10x,
unit <= 60 s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOALS = {"ci_s": 1200.0, "ctrl_c_s": 5.0, "overhead_x": 1.10, "unit_s": 60.0}


def ci_seconds(log: Path | None) -> float | None:
    """The last ``[ci +Ns]`` stamp of a finished CI log (``None``: no log, or the run did not end with rc=0)."""
    if log is None or not log.is_file():
        return None
    text = log.read_text(errors="replace")
    stamps = [int(m) for m in re.findall(r"^\[ci \+(\d+)s\]", text, flags=re.M)]
    return float(max(stamps)) if stamps and "rc=0" in text else None


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes spinning on the CPU (a ``stress --cpu n`` without the package)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main_job(root: Path, reports: Path, run_id: str) -> list[str]:
    return [sys.executable, "-m", "pytest", str(root / "acceptance"), "-p", "no:cacheprovider", "-p", "no:randomly",
            "--reports-dir", str(reports), "--run-id", run_id]  # fmt: skip


def ctrl_c(root: Path, tmp: Path, load: int = 2, timeout_s: float = 300.0) -> dict[str, object]:
    """Seconds from SIGINT to exit of the main job under ``load`` spinning processes, and what it kept."""
    reports = tmp / "ctrlc"
    with busy_cores(load):
        proc = subprocess.Popen(
            main_job(root, reports, "ctrlc"), cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not list((reports / "ctrlc" / "points").glob("*/result-r*.json")) and proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                return {"ctrl_c_s": None, "why": "no point finished in time"}
            time.sleep(0.2)
        t0 = time.perf_counter()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        took = time.perf_counter() - t0
    manifest = reports / "ctrlc" / "manifest.json"
    status = json.loads(manifest.read_text()).get("status") if manifest.is_file() else None
    kept = len(list((reports / "ctrlc" / "points").glob("*/result-r*.json")))
    return {"ctrl_c_s": round(took, 2), "manifest_status": status, "points_kept": kept}


def overhead(root: Path, tmp: Path) -> float | None:
    """The main job's overhead ratio from its terminal's ``overhead:`` line (quiet box)."""
    out = subprocess.run(main_job(root, tmp / "main", "main"), cwd=root, capture_output=True, text=True, check=False)
    m = re.search(r"^overhead:.*\(([0-9.]+)x\)", out.stdout, flags=re.M)
    return float(m.group(1)) if m else None


def unit(root: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "unit/", "-q", "-p", "no:cacheprovider"], cwd=root,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # fmt: skip
    return round(time.perf_counter() - t0, 1)


def measure(root: Path, ci_log: Path | None, *, skip_unit: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="sskj-fastloop-") as d:
        tmp = Path(d)
        out: dict[str, object] = {"ci_s": ci_seconds(ci_log)}
        out["overhead_x"] = overhead(root, tmp)
        out.update(ctrl_c(root, tmp))
        out["unit_s"] = None if skip_unit else unit(root)
    return out


@contextlib.contextmanager
def worktree(ref: str) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="sskj-ref-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(d), ref], cwd=REPO, check=True, capture_output=True)
    try:
        yield d
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(d)], cwd=REPO, check=False, capture_output=True)


def table(rows: dict[str, dict[str, object]]) -> str:
    names = list(rows)
    lines = ["| figure | goal | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for key, label in (("ci_s", ".ci/run cold (s)"), ("ctrl_c_s", "Ctrl-C under load (s)"),
                       ("overhead_x", "main job overhead (x)"), ("unit_s", "pytest unit/ (s)")):  # fmt: skip
        cells = ["-" if rows[n].get(key) is None else f"{rows[n][key]}" for n in names]
        lines.append(f"| {label} | <= {GOALS[key]:g} | " + " | ".join(cells) + " |")
    kept = [
        f"{n}: manifest {rows[n].get('manifest_status')}, {rows[n].get('points_kept')} point(s) kept" for n in names
    ]
    return "\n".join(lines) + "\nafter Ctrl-C: " + "; ".join(kept)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    ap.add_argument("--ci-log", type=Path, help="a fresh-clone CI log of this checkout")
    ap.add_argument("--ref-ci-log", type=Path, help="a fresh-clone CI log of --ref")
    ap.add_argument("--skip-unit", action="store_true", help="do not time pytest unit/ (about a minute per side)")
    a = ap.parse_args(argv)
    git = ["git", "rev-parse", "--short", "HEAD"]
    head = subprocess.run(git, cwd=REPO, capture_output=True, text=True, check=False).stdout
    rows = {f"this checkout ({head.strip()})": measure(REPO, a.ci_log, skip_unit=a.skip_unit)}
    with worktree(a.ref) as ref_root:
        rows[a.ref] = measure(ref_root, a.ref_ci_log, skip_unit=a.skip_unit)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
