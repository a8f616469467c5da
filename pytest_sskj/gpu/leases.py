"""GPU leases: a per-host JSON ledger guarded by a file lock, shared by xdist workers and pytest sessions.

The ledger (``ledger.json`` beside ``ledger.json.lock`` in ``/tmp/pytest-sskj-gpu-leases``, or
``$SSKJ_GPU_LEDGER_DIR``) maps a device UUID to its lease: holder pid, the pid's start time (against pid
reuse), host, test id and time.  It also lists the live *participants* (pids that took a lease) and the
*residents* (compute-process pids, as NVML numbers them, a holder left on a device at release: its CUDA
context); neither makes a GPU look busy to their peers while the participant lives.
:meth:`LeaseLedger.acquire` picks idle devices (no lease, no foreign compute process, enough free
memory, matching architecture), waits up to ``wait_s`` for busy ones, and raises
:class:`~pytest_sskj.errors.GpuUnavailable` with the reason.  A lease whose holder pid is gone (killed,
``os._exit`` by a timeout) is reclaimed by the next reader; :meth:`Lease.release` and
:meth:`LeaseLedger.release_pid` end leases on teardown and at session end.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.errors import GpuUnavailable
from pytest_sskj.gpu.allocator import busy_reason, choose, hardware_matches, unmet_reason
from pytest_sskj.gpu.inventory import GpuInfo, Inventory
from pytest_sskj.markers import GpuRequest
from pytest_sskj.rundir import atomic_write_bytes

__all__ = ["DEFAULT_LEDGER_DIR", "Holder", "Lease", "LeaseLedger", "ledger_dir", "pid_alive", "process_start_time"]

DEFAULT_LEDGER_DIR = Path("/tmp/pytest-sskj-gpu-leases")
LEDGER_DIR_ENV = "SSKJ_GPU_LEDGER_DIR"
_VERSION = 1


def ledger_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$SSKJ_GPU_LEDGER_DIR`` if set, else ``/tmp/pytest-sskj-gpu-leases`` (local to the host)."""
    env = os.environ if environ is None else environ
    value = env.get(LEDGER_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else DEFAULT_LEDGER_DIR


def process_start_time(pid: int) -> float | None:
    """The start time of ``pid`` (epoch seconds) or ``None`` when it cannot be read."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def pid_alive(pid: int, start_time: float | None = None) -> bool:
    """Whether ``pid`` is a live (not zombie) process, and the same one that started at ``start_time``."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if start_time is not None and abs(proc.create_time() - start_time) > 1.0:
            return False  # the pid was reused by another process
    except psutil.NoSuchProcess:
        return False
    except (psutil.AccessDenied, OSError):
        return True  # exists, owned by someone else
    return True


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a process on a host, for a test (or a server label)."""

    pid: int
    host: str
    test_id: str
    start_time: float | None = None

    @classmethod
    def current(cls, test_id: str) -> Holder:
        pid = os.getpid()
        return cls(pid=pid, host=socket.gethostname(), test_id=test_id, start_time=process_start_time(pid))


@dataclass
class Lease:
    """Devices held in the ledger for one holder; :meth:`release` (or leaving the ``with``) ends it."""

    gpus: tuple[GpuInfo, ...]
    holder: Holder
    ledger: LeaseLedger
    acquired_at: float
    waited_s: float
    released: bool = field(default=False)
    refresh: Callable[[], Inventory] | None = None
    """Re-reads the inventory at release, to record the compute processes this holder leaves behind."""

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(g.visible_id for g in self.gpus)

    def env(self) -> dict[str, str]:
        """Environment that gives a process (this test, a server it launches) exactly the leased devices."""
        return {"CUDA_VISIBLE_DEVICES": self.cuda_visible_devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def release(self) -> None:
        """End the lease (idempotent), recording this holder's processes still on the devices as residents."""
        if self.released:
            return
        residents: dict[str, list[int]] = {}
        if self.refresh is not None:
            try:
                inv = self.refresh()
            except Exception:  # a failed read must not keep the lease: release without residents
                inv = Inventory()
            for u in self.uuids:
                g = inv.by_uuid(u)
                if g is not None and g.processes:
                    residents[u] = [p.pid for p in g.processes]
        self.ledger.release(self.uuids, self.holder.pid, residents=residents)
        self.released = True

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _empty() -> dict[str, Any]:
    return {"version": _VERSION, "leases": {}, "participants": {}, "residents": {}}


class LeaseLedger:
    """The per-host lease ledger in ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path | None = None, *, host: str | None = None, lock_timeout_s: float = 60.0) -> None:
        self.directory = directory if directory is not None else ledger_dir()
        self.path = self.directory / "ledger.json"
        self.lock_path = self.directory / "ledger.json.lock"
        self.host = host or socket.gethostname()
        self.lock_timeout_s = lock_timeout_s

    # --- storage ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """Hold the file lock, yield the ledger (stale entries reclaimed), write it back on success."""
        from filelock import FileLock, Timeout

        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # every user of the host shares the ledger, like /tmp
                os.chmod(self.directory, 0o1777)  # noqa: S103 - shared by every user, sticky like /tmp
        lock = FileLock(str(self.lock_path), timeout=self.lock_timeout_s, mode=0o666)
        try:
            lock.acquire()
        except Timeout:
            raise GpuUnavailable(
                f"the GPU lease ledger lock {self.lock_path} was not free within "
                f"{self.lock_timeout_s:g} s; a process holds it -- see `fuser {self.lock_path}`"
            ) from None
        try:
            data = self._load()
            self._reclaim(data)
            yield data
            self._save(data)
        finally:
            lock.release()

    def _load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return _empty()
        try:
            data = json.loads(text) if text.strip() else _empty()
            if not isinstance(data, dict) or not isinstance(data.get("leases"), dict):
                raise ValueError("not a ledger")
        except ValueError:
            # keep the evidence, start over: leases of live holders are re-taken on their next acquire
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_name(f"ledger.corrupt-{int(time.time())}.json"))
            return _empty()
        data.setdefault("participants", {})
        data.setdefault("residents", {})
        return data

    def _save(self, data: dict[str, Any]) -> None:
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        try:
            atomic_write_bytes(self.path, text.encode("utf-8"), mode=0o666)  # other users' sessions update it too
        except PermissionError:  # another user's file in the sticky dir: rewrite in place (we hold the lock)
            with open(self.path, "r+", encoding="utf-8") as fh:
                fh.write(text)
                fh.truncate()

    def _reclaim(self, data: dict[str, Any]) -> list[str]:
        """Drop leases and participants of dead processes on this host; return the reclaimed UUIDs."""
        gone: list[str] = []
        for uuid, rec in list(data["leases"].items()):
            if rec.get("host") == self.host and not pid_alive(int(rec["pid"]), rec.get("pid_start")):
                del data["leases"][uuid]
                gone.append(uuid)
        for pid, rec in list(data["participants"].items()):
            if rec.get("host") == self.host and not pid_alive(int(pid), rec.get("pid_start")):
                del data["participants"][pid]
        for uuid, by_holder in list(data["residents"].items()):
            for pid in [p for p in by_holder if p not in data["participants"]]:
                del by_holder[pid]  # its holder is gone, and with it the CUDA context it left
            if not by_holder:
                del data["residents"][uuid]
        if gone:
            data.setdefault("reclaimed", []).append({"time": time.time(), "uuids": gone})
            data["reclaimed"] = data["reclaimed"][-20:]
        return gone

    # --- queries ---------------------------------------------------------------------------------
    def leases(self) -> dict[str, dict[str, Any]]:
        """The current leases (after reclaiming stale ones), keyed by UUID."""
        with self._locked() as data:
            return {k: dict(v) for k, v in data["leases"].items()}

    # --- acquire / release -----------------------------------------------------------------------
    def try_acquire(self, request: GpuRequest, inventory: Inventory, holder: Holder) -> tuple[Lease | None, list[str]]:
        """One attempt: a lease, or ``None`` with the reasons each matching device is busy."""
        with self._locked() as data:
            leases: dict[str, Any] = data["leases"]
            own = {int(p) for p, rec in data["participants"].items() if rec.get("host") == self.host}
            own.add(holder.pid)
            idle: list[GpuInfo] = []
            busy: list[str] = []
            for g in hardware_matches(inventory, request):
                rec = leases.get(g.uuid) or (leases.get(g.parent_uuid) if g.parent_uuid else None)
                if rec is not None:
                    busy.append(
                        f"GPU {g.index} ({g.uuid}) leased by pid {rec['pid']} on {rec['host']} for {rec['test_id']}"
                    )
                    continue
                left = data["residents"].get(g.uuid, {})
                why = busy_reason(g, request, own.union(*(set(pids) for pids in left.values())))
                if why:
                    busy.append(why)
                else:
                    idle.append(g)
            picked = choose(idle, request.count)
            if not picked:
                return None, busy
            now = time.time()
            for g in picked:
                leases[g.uuid] = {
                    "pid": holder.pid,
                    "pid_start": holder.start_time,
                    "host": holder.host,
                    "test_id": holder.test_id,
                    "since": now,
                    "visible_id": g.visible_id,
                    "name": g.name,
                }
            data["participants"][str(holder.pid)] = {"host": holder.host, "pid_start": holder.start_time}
        return Lease(gpus=tuple(picked), holder=holder, ledger=self, acquired_at=now, waited_s=0.0), busy

    def acquire(
        self,
        request: GpuRequest,
        inventory: Inventory,
        holder: Holder,
        wait_s: float = 0.0,
        *,
        refresh: Callable[[], Inventory] | None = None,
        poll_s: float = 0.5,
    ) -> Lease:
        """Lease ``request.count`` idle matching devices, waiting up to ``wait_s`` for busy ones.

        ``refresh`` re-reads the inventory between attempts (free memory and processes change).
        Raises :class:`GpuUnavailable`: at once when the hardware cannot meet the request, after
        ``wait_s`` when the matching devices stay busy (the message lists who holds them).
        """
        t0 = time.perf_counter()
        inv = inventory
        while True:
            unmet = unmet_reason(request, inv)
            if unmet is not None:
                raise GpuUnavailable(unmet)
            lease, busy = self.try_acquire(request, inv, holder)
            waited = time.perf_counter() - t0
            if lease is not None:
                lease.waited_s = waited
                lease.refresh = refresh
                return lease
            if waited >= wait_s:
                n = len(hardware_matches(inv, request))
                raise GpuUnavailable(
                    f"needs {request.describe()}, found {n} matching but only {n - len(busy)} idle after "
                    f"waiting {waited:.0f} s: "
                    + "; ".join(busy)
                    + ". Hint: wait for them or raise --sskj-gpu-wait; stale leases of dead processes are "
                    f"reclaimed automatically (ledger {self.path})"
                )
            time.sleep(max(0.0, min(poll_s, wait_s - waited)))
            if refresh is not None:
                inv = refresh()

    def release(
        self, uuids: tuple[str, ...] | list[str], pid: int, *, residents: Mapping[str, list[int]] | None = None
    ) -> list[str]:
        """End the leases of ``uuids`` held by ``pid``; return the UUIDs released.

        ``residents`` maps a UUID to the compute-process pids (as NVML numbers them) still on it: the
        holder's own CUDA context, which outlives the lease.  While ``pid`` lives they are not foreign to
        later leases -- also where NVML's pids are not this namespace's (containers, VMs).
        """
        with self._locked() as data:
            out = [u for u in uuids if u in data["leases"] and int(data["leases"][u]["pid"]) == pid]
            for u in out:
                del data["leases"][u]
                if residents and residents.get(u) and str(pid) in data["participants"]:
                    data["residents"].setdefault(u, {})[str(pid)] = sorted(set(residents[u]))
        return out

    def release_pid(self, pid: int) -> list[str]:
        """End every lease of ``pid`` on this host (session end).

        The pid stays a participant while it lives: an xdist worker that has finished its tests keeps its
        CUDA context (and its NVML process entry) until the controller shuts every worker down, and a
        peer still waiting for the device must not take that leftover context for a foreign process
        (seen on the H200: the peer waited out its whole ``--sskj-gpu-wait``).  :meth:`_reclaim` drops
        the participant and its residents once the process has exited.
        """
        with self._locked() as data:
            out = [u for u, rec in data["leases"].items() if int(rec["pid"]) == pid and rec.get("host") == self.host]
            for u in out:
                del data["leases"][u]
        return out
