"""CPU partition of a local launch (pytest_sskj.server.cpus): the server's whole tree runs away from the client."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.server import cpus
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.spec import NodeCommand

needs_two = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs >= 2 cores"
)

# a server-like tree: a main thread, a worker thread and a child process with its own thread
_TREE = r"""
import subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, "-c",
    "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
    "open(sys.argv[1], 'w').close(); time.sleep(60)".replace("sys.argv[1]", repr(sys.argv[1] + ".child"))])
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
open(sys.argv[1], "w").close()
child.wait()
"""


def _allowed(pid: int, tid: int | None = None) -> tuple[int, ...]:
    path = Path(f"/proc/{pid}/task/{tid}/status") if tid is not None else Path(f"/proc/{pid}/status")
    for line in path.read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return cpus.parse_cpus(line.split(":", 1)[1])
    raise AssertionError(f"no Cpus_allowed_list in {path}")


def _threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def _wait_tree(ready: Path, handle: Any, log: Path, timeout_s: float = 90.0) -> None:
    """Until ``_TREE`` and its child have both written their ready files (the launch failing says why)."""
    deadline = time.monotonic() + timeout_s
    while not (ready.exists() and Path(f"{ready}.child").exists()):
        assert handle.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"the server tree did not start within {timeout_s:g} s"
        time.sleep(0.1)


def test_partition_keeps_one_core_for_the_client_and_gives_the_server_the_rest() -> None:
    assert cpus.plan_partition("auto", [0, 1]) == cpus.CpuPartition((0,), (1,), "client/server")
    four = cpus.plan_partition("auto", [3, 0, 2, 1])
    assert (four.client, four.server) == ((0,), (1, 2, 3)), four
    assert "client on cpu 0, server on cpu 1-3" in four.describe()
    one = cpus.plan_partition("auto", [5])
    assert not one.pinned and "one core only" in one.describe(), one.describe()
    off = cpus.plan_partition("off", [0, 1])
    assert not off.pinned and "off" in off.describe()
    assert off.as_dict() == {"client_cpus": None, "server_cpus": None, "cpu_partition": off.note}
    assert not cpus.launch_partition("auto", local=False).pinned


def test_cpu_lists_read_and_write_the_kernel_format() -> None:
    assert cpus.format_cpus((0, 2, 3, 4, 7)) == "0,2-4,7"
    assert cpus.parse_cpus("0,2-4,7\n") == (0, 2, 3, 4, 7)
    assert cpus.parse_cpus(cpus.format_cpus(range(1, 16))) == tuple(range(1, 16))


@needs_two
@pytest.mark.timeout(120)
def test_local_server_tree_runs_on_the_server_cores_and_the_client_on_its_own(tmp_path: Path) -> None:
    original = cpus.allowed_cpus()
    part = cpus.plan_partition("auto", original)
    launcher = LocalLauncher(partition=part)
    ready = tmp_path / "ready"
    handle = launcher.start(NodeCommand("local", 0, (sys.executable, "-c", _TREE, str(ready))), tmp_path / "tree.log")
    try:
        _wait_tree(ready, handle, tmp_path / "tree.log")
        pids = handle.pids()
        assert len(pids) >= 2, f"expected the server and its child, saw pids {pids}"
        seen = {(pid, tid): _allowed(pid, tid) for pid in pids for tid in _threads(pid)}
        assert len(seen) >= 4, f"expected >= 2 threads in each of 2 processes, saw {sorted(seen)}"
        wrong = {k: v for k, v in seen.items() if v != part.server}
        assert not wrong, f"server threads off the server cores {part.server}: {wrong}"
        environ = Path(f"/proc/{handle.pid}/environ").read_bytes().split(b"\0")
        if "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
            bind = f"VLLM_CPU_OMP_THREADS_BIND={cpus.format_cpus(part.server)}".encode()
            assert bind in environ, "the server was not told its cores for vLLM's OMP binding"
        client = {tid: _allowed(os.getpid(), tid) for tid in _threads(os.getpid())}
        assert all(v == part.client for v in client.values()), f"client threads not on {part.client}: {client}"
        assert "autogroup" in launcher.client_priority, launcher.client_priority
    finally:
        handle.terminate(10.0)
        launcher.close()
    assert cpus.allowed_cpus() == original, "close() did not give the client its cores back"


@needs_two
def test_partition_off_pins_nothing(tmp_path: Path) -> None:
    original = cpus.allowed_cpus()
    launcher = LocalLauncher(partition=cpus.plan_partition("off"))
    handle = launcher.start(
        NodeCommand("local", 0, (sys.executable, "-c", "import time; time.sleep(30)")), tmp_path / "l"
    )
    try:
        assert _allowed(handle.pid) == original
        assert cpus.allowed_cpus() == original
    finally:
        handle.terminate(10.0)
        launcher.close()


def test_bench_thread_records_the_cores_it_really_runs_on() -> None:
    fields = cpus.measured_fields("off", local=True)
    assert fields["client_cpus"] == cpus.format_cpus(cpus.allowed_cpus())
    assert fields["server_cpus"] is None and "off" in str(fields["cpu_partition"])


def test_header_prints_the_partition_and_a_bad_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    res = pytester.runpytest("--collect-only", "--sskj-cpu-partition", "off")
    res.stdout.fnmatch_lines(["sskj: cpu partition: none (off (--sskj-cpu-partition off))"])
    res = pytester.runpytest("--collect-only")
    want = cpus.launch_partition("auto", local=True).describe()
    res.stdout.fnmatch_lines([f"sskj: {want}"])
    bad = pytester.runpytest("--collect-only", "--sskj-cpu-partition", "half")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR, bad.stderr.str()
    bad.stderr.fnmatch_lines(["*--sskj-cpu-partition*"])


@needs_two
def test_a_second_launcher_of_the_run_plans_over_the_run_cores_not_the_pinned_client(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    from pytest_sskj.stash import SETTINGS_KEY

    settings = pytester.parseconfigure().stash[SETTINGS_KEY]
    first = LocalLauncher.from_settings(settings)
    handle = first.start(NodeCommand("local", 0, (sys.executable, "-c", "import time; time.sleep(30)")), tmp_path / "a")
    try:
        assert cpus.allowed_cpus() == first.partition.client if first.partition else False
        second = LocalLauncher.from_settings(settings)
        assert second.partition == first.partition and second.partition is not None and second.partition.pinned
        fields = cpus.measured_fields("auto", local=True, run_cpus=settings.run_cpus)
        assert fields["server_cpus"] == cpus.format_cpus(first.partition.server), fields
        if first.client_priority.startswith("autogroup nice"):  # root / CAP_SYS_NICE with autogroups on
            assert fields["client_autogroup_nice"] == cpus.CLIENT_AUTOGROUP_NICE, fields
    finally:
        handle.terminate(10.0)
        first.close()


@needs_two
def test_a_child_spawned_on_the_server_cores_starts_there_and_the_spawning_thread_gets_its_cores_back() -> None:
    """``spawning_on`` pins only the calling thread around the ``Popen`` (a child inherits the forking thread's
    cores; no ``preexec_fn``, whose full fork cost ~8 ms with the GIL held): the child's first instruction
    already runs on the server cores, and the thread is back on its own cores afterwards."""
    import subprocess

    before = os.sched_getaffinity(0)
    server = (max(before),)
    with cpus.spawning_on(server):
        p = subprocess.Popen(
            [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
            stdout=subprocess.PIPE,
            text=True,
        )
    out, _ = p.communicate(timeout=60)
    assert out.strip() == str(list(server)), f"expected the child on {list(server)} from its start, saw {out!r}"
    assert os.sched_getaffinity(0) == before, f"the spawning thread kept {os.sched_getaffinity(0)}, not {before}"
    with cpus.spawning_on(()):
        assert os.sched_getaffinity(0) == before, "an empty core list must pin nothing"


@needs_two
def test_an_early_start_uses_the_client_core_too_until_settle_moves_its_whole_tree_onto_the_server_cores(
    tmp_path: Path,
) -> None:
    """The pool's prepared start (nothing measured meanwhile) runs on every core of the partition, so it does
    not queue behind the previous server's last work on the server core; ``settle`` then moves every thread
    of every process of the tree onto the server cores, before anything measures it."""
    original = cpus.allowed_cpus()
    part = cpus.plan_partition("auto", original)
    launcher = LocalLauncher(partition=part)
    ready = tmp_path / "ready"
    with launcher.early():
        handle = launcher.start(NodeCommand("local", 0, (sys.executable, "-c", _TREE, str(ready))), tmp_path / "t.log")
    try:
        _wait_tree(ready, handle, tmp_path / "t.log")
        every = tuple(sorted({*part.server, *part.client}))
        assert _allowed(handle.pid) == every, f"expected the early start on {every}, saw {_allowed(handle.pid)}"
        env = Path(f"/proc/{handle.pid}/environ").read_bytes().split(b"\0")
        assert f"SSKJ_SERVER_CPUS={cpus.format_cpus(part.server)}".encode() in env, "the server was not told its cores"
        launcher.settle([handle])
        seen = {(pid, tid): _allowed(pid, tid) for pid in handle.pids() for tid in _threads(pid)}
        assert len(seen) >= 4, f"expected >= 2 threads in each of 2 processes, saw {sorted(seen)}"
        wrong = {k: v for k, v in seen.items() if v != part.server}
        assert not wrong, f"threads left off the server cores {part.server} after settle: {wrong}"
        with launcher.early():
            pass
        late = launcher.start(
            NodeCommand("local", 1, (sys.executable, "-c", "import time; time.sleep(60)")), tmp_path / "l.log"
        )
        assert _allowed(late.pid) == part.server, (
            f"a start outside early() is on {_allowed(late.pid)}, not the server's"
        )
        late.terminate(10.0)
    finally:
        handle.terminate(10.0)
        launcher.close()
    assert cpus.allowed_cpus() == original, "close() did not give the client its cores back"
