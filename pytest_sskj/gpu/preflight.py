"""Node pre-flight before an acceptance launch: does every node have enough idle GPUs of the right kind?

Over the launcher (``Launcher.run(node, argv)``), every node answers two ``nvidia-smi`` CSV queries:
``--query-gpu=index,uuid,name,compute_cap,memory.total,memory.used`` and
``--query-compute-apps=gpu_uuid,pid,process_name,used_memory``.  :func:`parse_gpu_csv` and
:func:`parse_apps_csv` are the pure parsers; :func:`preflight` checks the first ``gpus_per_node_needed``
GPUs of each node (the ones a server without ``CUDA_VISIBLE_DEVICES`` takes) for count, architecture,
foreign processes and memory in use by processes this namespace cannot see, and returns a
:class:`PreflightReport` whose :meth:`~PreflightReport.check` refuses with a message naming the node,
the GPU and the processes (and the idle GPUs that would do).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_sskj.engines import get_engine
from pytest_sskj.errors import GpuUnavailable, LauncherError
from pytest_sskj.gpu.inventory import arch_of
from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.spec import ServerSpec

__all__ = [
    "APPS_QUERY",
    "GPU_QUERY",
    "NodeApp",
    "NodeGpu",
    "NodeReport",
    "PreflightReport",
    "gpus_per_node",
    "parse_apps_csv",
    "parse_gpu_csv",
    "preflight",
    "preflight_spec",
]

GPU_QUERY: tuple[str, ...] = (
    "nvidia-smi",
    "--query-gpu=index,uuid,name,compute_cap,memory.total,memory.used",
    "--format=csv,noheader,nounits",
)
APPS_QUERY: tuple[str, ...] = (
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
)
_NA = ("", "[n/a]", "n/a", "[not supported]", "[insufficient permissions]", "[unknown error]")


@dataclass(frozen=True)
class NodeGpu:
    """One GPU of a node as ``nvidia-smi --query-gpu`` lists it."""

    index: int
    uuid: str
    name: str
    capability: tuple[int, int] | None
    memory_total_mib: int | None
    memory_used_mib: int | None

    @property
    def arch(self) -> str | None:
        return arch_of(self.capability) if self.capability else None

    @property
    def label(self) -> str:
        return f"GPU {self.index} {self.name} ({self.arch or 'capability unknown'})"


@dataclass(frozen=True)
class NodeApp:
    """One compute process on a node's GPU (``nvidia-smi --query-compute-apps``)."""

    gpu_uuid: str
    pid: int
    process_name: str
    used_mib: int | None

    def describe(self) -> str:
        mem = f", {self.used_mib} MiB" if self.used_mib is not None else ""
        return f"pid {self.pid} {self.process_name}{mem}"


def _int(text: str) -> int | None:
    t = text.strip()
    if t.lower() in _NA:
        return None
    try:
        return int(float(t))
    except ValueError:
        return None


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(text)) if row and any(c.strip() for c in row)]


def parse_gpu_csv(text: str) -> list[NodeGpu]:
    """Parse ``--query-gpu=index,uuid,name,compute_cap,memory.total,memory.used`` (noheader, nounits).

    Raises ``ValueError`` naming the line when a row has the wrong shape (an old ``nvidia-smi`` without
    ``compute_cap`` answers with an error text instead of rows).
    """
    out: list[NodeGpu] = []
    for row in _rows(text):
        if len(row) != 6 or not row[0].isdigit():
            raise ValueError(
                f"unexpected nvidia-smi --query-gpu line {','.join(row)!r}; expected "
                f"index,uuid,name,compute_cap,memory.total,memory.used (driver >= 510 for compute_cap)"
            )
        cap: tuple[int, int] | None = None
        if row[3].lower() not in _NA:
            major, _, minor = row[3].partition(".")
            try:
                cap = (int(major), int(minor or 0))
            except ValueError:
                cap = None
        out.append(NodeGpu(int(row[0]), row[1], row[2], cap, _int(row[4]), _int(row[5])))
    return out


def parse_apps_csv(text: str) -> list[NodeApp]:
    """Parse ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory`` (noheader, nounits)."""
    out: list[NodeApp] = []
    for row in _rows(text):
        if len(row) == 1 and row[0].lower().startswith("no running"):
            continue
        if len(row) < 4 or not row[1].isdigit():
            raise ValueError(
                f"unexpected nvidia-smi --query-compute-apps line {','.join(row)!r}; expected "
                f"gpu_uuid,pid,process_name,used_memory"
            )
        name = ",".join(row[2:-1])  # a process name may itself contain commas
        out.append(NodeApp(row[0], int(row[1]), name, _int(row[-1])))
    return out


@dataclass
class NodeReport:
    """What one node answered and what is wrong with it."""

    node: str
    gpus: list[NodeGpu] = field(default_factory=list)
    apps: list[NodeApp] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class PreflightReport:
    """Pre-flight outcome of every node; :meth:`check` raises when any node is not ready."""

    nodes: list[NodeReport]
    gpus_per_node_needed: int
    arch: str | None = None

    @property
    def ok(self) -> bool:
        return all(n.ok for n in self.nodes)

    @property
    def problems(self) -> list[str]:
        return [f"node {n.node}: {p}" for n in self.nodes for p in n.problems]

    def message(self) -> str:
        want = f"{self.gpus_per_node_needed} x {self.arch or 'GPU'} per node"
        if self.ok:
            return f"pre-flight passed: {len(self.nodes)} node(s), {want}, all idle"
        return f"refusing to launch: the spec needs {want}\n" + "\n".join(f"  - {p}" for p in self.problems)

    def check(self) -> None:
        """Raise :class:`GpuUnavailable` with :meth:`message` unless every node is ready."""
        if not self.ok:
            raise GpuUnavailable(self.message())

    def facts(self) -> dict[str, object]:
        """For the manifest: per node, the GPUs (name, capability) and any problems."""
        return {
            n.node: {
                "gpus": [
                    {
                        "index": g.index,
                        "uuid": g.uuid,
                        "name": g.name,
                        "arch": g.arch,
                        "memory_total_mib": g.memory_total_mib,
                    }
                    for g in n.gpus
                ],
                "problems": n.problems,
            }
            for n in self.nodes
        }


def check_node(report: NodeReport, needed: int, arch: str | None, max_used_mib: int) -> None:
    """Fill ``report.problems`` from its GPUs and apps (pure; :func:`preflight` calls it per node)."""
    gpus = sorted(report.gpus, key=lambda g: g.index)
    if len(gpus) < needed:
        report.problems.append(f"has {len(gpus)} GPU(s), the spec needs {needed} per node")
    used = gpus[:needed]
    if arch is not None:
        wrong = [g for g in used if g.arch != arch]
        if wrong:
            report.problems.append("wrong architecture: " + ", ".join(g.label for g in wrong) + f"; needs {arch}")
    by_uuid: dict[str, list[NodeApp]] = {}
    for app in report.apps:
        by_uuid.setdefault(app.gpu_uuid, []).append(app)
    busy = _busy(report, used, by_uuid, max_used_mib)
    if busy:
        idle = [
            g.index
            for g in gpus
            if g.index not in busy
            and not by_uuid.get(g.uuid)
            and (g.memory_used_mib is None or g.memory_used_mib <= max_used_mib)
            and (arch is None or g.arch == arch)
        ]
        if len(idle) >= needed:
            report.problems.append(
                f"idle GPUs there: {','.join(map(str, idle))} -- stop the processes, or "
                f"launch with CUDA_VISIBLE_DEVICES={','.join(map(str, idle[:needed]))}"
            )


def _busy(
    report: NodeReport, used: Sequence[NodeGpu], by_uuid: dict[str, list[NodeApp]], max_used_mib: int
) -> set[int]:
    """Indexes of the GPUs the spec would use that are busy (foreign processes, or memory in use), each noted."""
    busy: set[int] = set()
    for g in used:
        apps = by_uuid.get(g.uuid, [])
        if apps:
            busy.add(g.index)
            report.problems.append(
                f"GPU {g.index} ({g.uuid}) runs foreign processes: " + "; ".join(a.describe() for a in apps)
            )
        elif g.memory_used_mib is not None and g.memory_used_mib > max_used_mib:
            busy.add(g.index)
            report.problems.append(
                f"GPU {g.index} ({g.uuid}) has {g.memory_used_mib} MiB in use by processes "
                f"nvidia-smi cannot show here (another container or PID namespace?)"
            )
    return busy


def _query(launcher: Launcher, node: str, argv: Sequence[str], timeout_s: float) -> tuple[str | None, str]:
    try:
        res = launcher.run(node, list(argv), timeout_s=timeout_s)
    except (LauncherError, OSError) as exc:
        return None, f"cannot run {argv[0]} there: {exc}"
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        return None, f"`{' '.join(argv[:2])}` exited {res.returncode}: {' | '.join(tail) or 'no output'}"
    return res.stdout, ""


def preflight(
    launcher: Launcher,
    nodes: Sequence[str],
    gpus_per_node_needed: int,
    arch: str | None = None,
    *,
    max_used_mib: int = 2048,
    timeout_s: float = 30.0,
) -> PreflightReport:
    """Query every node's GPUs and compute apps over ``launcher`` and check them.

    ``arch`` (``"sm120"``) is required of the GPUs used; ``max_used_mib`` is the memory a GPU with no
    visible process may have in use (driver reservations) before it counts as busy.
    """
    reports: list[NodeReport] = []
    for node in nodes:
        rep = NodeReport(node)
        gpu_text, err = _query(launcher, node, GPU_QUERY, timeout_s)
        if gpu_text is None:
            rep.problems.append(err)
            reports.append(rep)
            continue
        apps_text, err = _query(launcher, node, APPS_QUERY, timeout_s)
        try:
            rep.gpus = parse_gpu_csv(gpu_text)
            rep.apps = parse_apps_csv(apps_text) if apps_text is not None else []
        except ValueError as exc:
            rep.problems.append(str(exc))
            reports.append(rep)
            continue
        if apps_text is None:
            rep.problems.append(err)
        check_node(rep, gpus_per_node_needed, arch, max_used_mib)
        reports.append(rep)
    return PreflightReport(nodes=reports, gpus_per_node_needed=gpus_per_node_needed, arch=arch)


def gpus_per_node(spec: ServerSpec) -> int:
    """GPUs the spec takes on each node, as its engine counts them (``Engine.gpus_per_node``): 0 for the CPU
    engine; the world split over the nodes for ``placement="ranks"``, whole on every node for ``"replicas"``."""
    return get_engine(spec.engine).gpus_per_node(spec)


def preflight_spec(
    launcher: Launcher, spec: ServerSpec, arch: str | None = None, *, max_used_mib: int = 2048, timeout_s: float = 30.0
) -> PreflightReport:
    """:func:`preflight` for every node of ``spec`` (``local`` when it names none) with its GPUs per node."""
    nodes = spec.nodes or ("local",)
    needed = gpus_per_node(spec)
    if needed == 0:
        return PreflightReport(nodes=[NodeReport(n) for n in nodes], gpus_per_node_needed=0, arch=arch)
    return preflight(launcher, nodes, needed, arch, max_used_mib=max_used_mib, timeout_s=timeout_s)
