"""CPU partition of a local launch: the benchmark client keeps one core, the server (its whole tree) the rest.

A server launched on the client's own box takes the client's cores (a vLLM CPU worker's OMP threads spin on every
core), so the client's event loop runs late and its timestamps read the server's load (client-bound points, issue
28).  :func:`plan_partition` splits the cores this process may use: the lowest one for the client, every other one
for the server; with one core nothing is pinned and :attr:`CpuPartition.note` says so.  The client side is pinned
with :func:`pin_this_process` (every thread of this process; threads started later inherit it) and undone with
:func:`restore`; the server side by :func:`spawning_on` around its ``Popen`` (the child inherits the spawning
thread's cores from its first instruction; its threads and children inherit them).  :data:`SERVER_BIND_ENV`
tells engines that bind their own worker threads which cores are theirs.

Priority: once the server cannot run on the client's core, its niceness no longer matters to the client; the
client's own priority is raised where the kernel honours it (:func:`raise_autogroup_priority`): with
``kernel.sched_autogroup_enabled=1`` every session is its own autogroup and a thread's nice ranks only inside it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLIENT_AUTOGROUP_NICE",
    "MODES",
    "SERVER_BIND_ENV",
    "CpuPartition",
    "allowed_cpus",
    "format_cpus",
    "launch_partition",
    "measured_fields",
    "parse_cpus",
    "pin_this_process",
    "pin_tree",
    "plan_partition",
    "raise_autogroup_priority",
    "restore",
    "restore_autogroup",
    "spawning_on",
]

MODES = ("auto", "off")
"""``--sskj-cpu-partition`` values: ``auto`` partitions a local launch where there are >= 2 cores; ``off`` never."""

SERVER_BIND_ENV = ("VLLM_CPU_OMP_THREADS_BIND", "SSKJ_SERVER_CPUS")
"""Environment variables set to the server's cores (unless the command sets them): vLLM's CPU worker binds its OMP
threads itself, and its default ``auto`` would pick cores from the whole box rather than from its affinity alone;
the embedded server sizes its compute threads by ``SSKJ_SERVER_CPUS`` (a server started early runs on more cores
until :func:`pin_tree` moves it: its configuration must not depend on that)."""

CLIENT_AUTOGROUP_NICE = -10
"""Nice value written to this process's autogroup (root / CAP_SYS_NICE) when the cores are partitioned."""


@dataclass(frozen=True)
class CpuPartition:
    """Which cores the client and the locally launched server run on (empty: not pinned)."""

    client: tuple[int, ...]
    server: tuple[int, ...]
    note: str

    @property
    def pinned(self) -> bool:
        return bool(self.client and self.server)

    def describe(self) -> str:
        if not self.pinned:
            return f"cpu partition: none ({self.note})"
        return f"cpu partition: client on cpu {format_cpus(self.client)}, server on cpu {format_cpus(self.server)}"

    def as_dict(self) -> dict[str, object]:
        """Manifest / result-row fields (``None`` when not pinned)."""
        return {
            "client_cpus": format_cpus(self.client) if self.pinned else None,
            "server_cpus": format_cpus(self.server) if self.pinned else None,
            "cpu_partition": self.note if not self.pinned else "client/server",
        }


def allowed_cpus(pid: int = 0) -> tuple[int, ...]:
    """The cores ``pid`` (0: this thread) may run on, sorted; ``()`` where the OS has no affinity call."""
    if not hasattr(os, "sched_getaffinity"):
        return ()
    return tuple(sorted(os.sched_getaffinity(pid)))


def plan_partition(mode: str, available: Sequence[int] | None = None) -> CpuPartition:
    """The partition for ``mode`` over ``available`` cores (default: this process's affinity)."""
    if mode == "off":
        return CpuPartition((), (), "off (--sskj-cpu-partition off)")
    cpus = tuple(sorted(available)) if available is not None else allowed_cpus()
    if not cpus:
        return CpuPartition((), (), "no CPU affinity on this OS")
    if len(cpus) < 2:
        return CpuPartition((), (), f"one core only (cpu {cpus[0]}): client and server share it")
    return CpuPartition((cpus[0],), cpus[1:], "client/server")


def format_cpus(cpus: Iterable[int]) -> str:
    """``(0, 2, 3, 4)`` -> ``"0,2-4"`` (the kernel's list format, as in ``Cpus_allowed_list``)."""
    out: list[str] = []
    ids = sorted(set(cpus))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def parse_cpus(text: str) -> tuple[int, ...]:
    """The kernel's list format back to cores: ``"0,2-4"`` -> ``(0, 2, 3, 4)``."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(out))


def _tids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def pin_this_process(cpus: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Pin every thread of this process to ``cpus``; returns each thread's previous cores (for :func:`restore`)."""
    before: dict[int, tuple[int, ...]] = {}
    for tid in _tids():
        try:
            before[tid] = allowed_cpus(tid)
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            before.pop(tid, None)
    return before


def restore(before: dict[int, tuple[int, ...]]) -> None:
    """Give the threads pinned by :func:`pin_this_process` their cores back; threads started since get the union."""
    if not before:
        return
    union = tuple(sorted({c for cpus in before.values() for c in cpus}))
    for tid in _tids():
        try:
            os.sched_setaffinity(tid, before.get(tid, union))
        except OSError:
            pass


def pin_tree(pids: Sequence[int], cpus: Sequence[int], *, passes: int = 3) -> list[str]:
    """Pin every thread of the processes ``pids`` to ``cpus``; the threads still off them after ``passes``
    (a thread created while its creator was being moved inherits the old cores: the next pass moves it), as
    ``pid/tid: cores`` (empty: every live thread is on ``cpus``)."""
    want = tuple(sorted(set(cpus)))
    off: list[str] = []
    for _ in range(max(1, passes)):
        off = []
        for pid in pids:
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:  # the process ended meanwhile
                continue
            for tid in tids:
                try:
                    os.sched_setaffinity(tid, want)
                    now = allowed_cpus(tid)
                except OSError:  # the thread ended meanwhile
                    continue
                if now != want:
                    off.append(f"{pid}/{tid}: {format_cpus(now)}")
        if not off:
            return []
    return off


@contextlib.contextmanager
def spawning_on(cpus: Sequence[int]) -> Iterator[None]:
    """Run the block (a ``Popen``) with the *calling thread* pinned to ``cpus``, then give its cores back.

    A child inherits the affinity of the thread that forks it, so the process starts on ``cpus`` before its
    first instruction (its threads and children inherit it), without a ``preexec_fn``: one forces a full
    ``fork()`` of this process (~8 ms at 160 MB, the GIL held throughout) where ``Popen`` otherwise uses
    ``vfork()`` (~0.2 ms).  Only this thread moves, for the block's duration; ``()`` pins nothing."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)  # pid 0: the calling thread
    os.sched_setaffinity(0, tuple(cpus))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def raise_autogroup_priority(nice: int = CLIENT_AUTOGROUP_NICE) -> tuple[str, int | None]:
    """Write ``nice`` to this process's autogroup where the kernel groups by session.

    Returns what happened and the previous nice value to give back (``None``: nothing was changed)."""
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    group = Path("/proc/self/autogroup")
    try:
        if enabled.read_text().strip() != "1":
            return "autogroup off (thread nice applies)", None
        before = int(group.read_text().split()[-1])
        if before <= nice:
            return f"autogroup nice {before}", None
        group.write_text(f"{nice}\n")
        return f"autogroup nice {group.read_text().split()[-1]} (was {before})", before
    except (OSError, ValueError, IndexError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return f"autogroup unchanged ({why})", None


def restore_autogroup(nice: int | None) -> None:
    """Give this process's autogroup back the nice value :func:`raise_autogroup_priority` replaced."""
    if nice is None:
        return
    try:
        Path("/proc/self/autogroup").write_text(f"{nice}\n")
    except OSError:
        pass


def launch_partition(mode: str, *, local: bool, run_cpus: Sequence[int] | None = None) -> CpuPartition:
    """The partition a run applies: :func:`plan_partition` over ``run_cpus`` (the run's cores, read before
    anything was pinned; default: this thread's) for a local launch, none for a target or remote one."""
    if not local:
        return CpuPartition((), (), "not a local launch (the server is not on this box)")
    return plan_partition(mode, run_cpus or None)


def measured_fields(mode: str, *, local: bool, run_cpus: Sequence[int] | None = None) -> dict[str, object]:
    """Result-row fields read on the calling (bench) thread: the cores it really runs on, and the server's
    cores where this thread is pinned as the partition says (``None`` otherwise)."""
    part = launch_partition(mode, local=local, run_cpus=run_cpus)
    mine = allowed_cpus()
    pinned = part.pinned and mine == part.client
    return {
        "client_cpus": format_cpus(mine) if mine else None,
        "server_cpus": format_cpus(part.server) if pinned else None,
        "cpu_partition": "client/server" if pinned else part.note,
        "client_autogroup_nice": _autogroup_nice(),
    }


def _autogroup_nice() -> int | None:
    """This process's autogroup nice (``None``: no autogroups here): the priority the scheduler honours."""
    try:
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "1":
            return None
        return int(Path("/proc/self/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
