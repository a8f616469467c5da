"""The run directory: its layout and the one atomic write every file of a run (and of the tool) goes through.

``<reports dir>/<run id>/`` holds, per :class:`RunLayout`:

- ``manifest.json`` — what ran (settings without secrets, versions, engine facts, status);
- ``points/<point id>/{result.json,samples.json,requests.jsonl}`` — each point as it finishes (the
  resume store: :class:`pytest_sskj.acceptance.store.PointStore`);
- ``results.jsonl`` (journal) -> ``results.json`` / ``results.csv`` — one row per point and repeat;
- ``verdicts.jsonl`` (journal) -> ``verdicts.json`` — comparisons, curves, searches, SLO and baseline gates;
- ``medians.csv`` / ``medians.json`` and ``summary.md`` — renderings of the users' medians table;
- ``search/<config>/steps.jsonl`` — adaptive search steps; ``plots/*.png``; ``logs/<node>/``;
- ``export/`` — the users' JSONL shapes (``python -m pytest_sskj export``).

:func:`atomic_write_bytes` (and its text/JSON forms) writes a sibling temporary file and renames it over the
target, so a reader never sees half a file and a crash leaves the previous version.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "RunIdInUse",
    "RunLayout",
    "RunLock",
    "RunWriteError",
    "acquire_run_lock",
    "atomic_target",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "jsonable",
    "not_a_run",
    "write_failure",
]


class RunWriteError(OSError):
    """A file of the run could not be written (disk full, read-only, I/O error); ``str()`` is one line."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = Path(path)
        self.reason = f"could not write {path}: {cause.strerror or cause}"

    def __str__(self) -> str:
        return self.reason


def write_failure(exc: BaseException | None) -> str | None:
    """The one-line reason when ``exc`` (or what caused it) is a failed write of run data, else ``None``."""
    import errno

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, RunWriteError):
            return exc.reason
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO):
            where = f" {exc.filename}" if exc.filename else ""
            return f"could not write{where}: {exc.strerror or exc}"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


@contextlib.contextmanager
def atomic_target(path: Path, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary path next to ``path`` to write to; renamed over ``path`` when the block succeeds, removed
    when it raises (readers never see half a file; a crash leaves the previous version).

    ``mode``: permission bits of the new file (e.g. ``0o666`` for a ledger other users update too)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise RunWriteError(path, exc) from exc
    os.close(fd)
    tmp = Path(name)
    try:
        try:
            yield tmp
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, path)
        except RunWriteError:
            raise
        except OSError as exc:
            if write_failure(exc) is None:
                raise
            raise RunWriteError(path, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_target`)."""
    with atomic_target(path, mode=mode) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: Path, text: str) -> Path:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def jsonable(value: Any) -> Any:
    """``value`` with NaN/inf floats as ``None`` and tuples/sets/paths as JSON types."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def atomic_write_json(path: Path, obj: Any, *, indent: int | None = 1) -> Path:
    """``obj`` (through :func:`jsonable`) as sorted, strict JSON with a final newline, atomically."""
    text = json.dumps(jsonable(obj), indent=indent, sort_keys=True, allow_nan=False, default=str)
    return atomic_write_text(path, text + "\n")


@dataclass(frozen=True)
class RunLayout:
    """Every path of one run directory; nothing else in the code spells these names."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def points(self) -> Path:
        return self.root / "points"

    def point(self, point_id: str) -> Path:
        return self.points / point_id

    def point_result(self, point_id: str) -> Path:
        return self.point(point_id) / "result.json"

    def point_samples(self, point_id: str) -> Path:
        return self.point(point_id) / "samples.json"

    def request_file(self, point_id: str) -> Path:
        """The per-request JSONL the bench client writes for ``point_id``."""
        return self.point(point_id) / "requests.jsonl"

    @property
    def results_journal(self) -> Path:
        return self.root / "results.jsonl"

    @property
    def results_json(self) -> Path:
        return self.root / "results.json"

    @property
    def results_csv(self) -> Path:
        return self.root / "results.csv"

    @property
    def verdicts_journal(self) -> Path:
        return self.root / "verdicts.jsonl"

    @property
    def verdicts_json(self) -> Path:
        return self.root / "verdicts.json"

    @property
    def medians_csv(self) -> Path:
        return self.root / "medians.csv"

    @property
    def medians_json(self) -> Path:
        return self.root / "medians.json"

    @property
    def summary_md(self) -> Path:
        return self.root / "summary.md"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    def search_steps(self, config_id: str) -> Path:
        return self.root / "search" / config_id / "steps.jsonl"

    @property
    def export(self) -> Path:
        return self.root / "export"


class RunIdInUse(RuntimeError):
    """Another live run holds this run id (its run directory's lock)."""


@dataclass
class RunLock:
    """Ownership of one run directory: ``<run dir>/.lock`` holds the owner's pid, host and start time.

    :func:`acquire_run_lock` creates it atomically (a complete file linked into place, so a second run
    never reads half of it); a lock left by a dead process of this host is taken over and
    :attr:`took_over` says whose it was; a live owner -- or one on another host, which cannot be checked
    from here -- is refused with :class:`RunIdInUse`."""

    path: Path
    took_over: str | None = None

    def release(self) -> None:
        """Remove the lock if it is still ours."""
        try:
            owner = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if owner.get("pid") == os.getpid() and owner.get("host") == _host():
            self.path.unlink(missing_ok=True)


def _host() -> str:
    import socket

    return socket.gethostname()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(owner: Mapping[str, Any]) -> str:
    return f"pid {owner.get('pid')} on host {owner.get('host')}, started {owner.get('started', '?')}"


def acquire_run_lock(run_dir: Path) -> RunLock:
    """Own ``run_dir`` (created if missing) for this process, or raise :class:`RunIdInUse`."""
    import time

    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / ".lock"
    me = {"pid": os.getpid(), "host": _host(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    took_over: str | None = None
    for _ in range(3):
        with atomic_target(run_dir / ".lock.new") as tmp:
            tmp.write_text(json.dumps(me))
            try:
                os.link(tmp, path)
                return RunLock(path, took_over)
            except FileExistsError:
                pass
        try:
            owner = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            owner = {}
        pid = owner.get("pid")
        if owner.get("host") == _host() and isinstance(pid, int) and (pid == os.getpid() or not _pid_alive(pid)):
            took_over = f"took over the lock of a run that is gone ({_describe(owner)})"
            path.unlink(missing_ok=True)
            continue
        if not owner:
            raise RunIdInUse(f"{path} exists but is unreadable; remove it if no run uses {run_dir.name}")
        where = "" if owner.get("host") == _host() else " (another host: remove the lock if that run is gone)"
        raise RunIdInUse(f"run {run_dir.name} is being written by a live run ({_describe(owner)}){where}")
    raise RunIdInUse(f"could not take the lock {path}: it changed hands repeatedly")


def not_a_run(run_dir: Path) -> str | None:
    """Why ``run_dir`` is not a run's folder (missing, not a folder, or holding neither a manifest nor results),
    or ``None``: what ``export``, ``db import`` and ``report summary`` refuse before reading or writing."""
    if not run_dir.is_dir():
        return f"{run_dir} is not a run directory: {'it is not a folder' if run_dir.exists() else 'it does not exist'}"
    lay = RunLayout(run_dir)
    if not any(p.is_file() for p in (lay.manifest, lay.results_journal, lay.results_json, lay.results_csv)):
        return (
            f"{run_dir} is not a run directory: it holds no manifest.json and no results "
            "(results.jsonl, results.json or results.csv)"
        )
    return None
