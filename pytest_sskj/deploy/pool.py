"""Run a whole deployment: every group's server, then the router; health, checks, the log oracle, teardown.

:class:`DeploymentPool` stands in for the session's :class:`~pytest_sskj.server.pool.ServerPool` when the
run has a ``[deployment]``: ``get(spec)`` starts the topology once (the point's spec only names the
point) and returns a :class:`RunningDeployment` that the point runner uses like a server.  Launch order:
prefill groups, decode groups, plain groups — one :class:`ServerPool` per group, each waiting for its
rank 0 to be healthy and checking ``/server_info`` where the engine has it — then the real router
(``sglang_router``) in its own session with its log under ``logs/<node>/``, until its ``/health`` is 200.
A PD deployment's groups must report the same ``page_size`` and the declared transfer backend.  Every
rank of every group and the router are watched; a crash names its group and node.  ``close()`` stops
the router first, then the groups in reverse launch order, and reports every PID left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.deploy.deployment import group_spec, launch_order, router_command
from pytest_sskj.deploy.topology import Group, Topology
from pytest_sskj.errors import HealthTimeout, ServerConfigMismatch, ServerCrashed, ServerLaunchError
from pytest_sskj.nodes import node_url
from pytest_sskj.redact import redact_text
from pytest_sskj.server.launcher import Launcher, ProcessHandle
from pytest_sskj.server.logscan import Finding, LogMark, LogOracle
from pytest_sskj.server.pool import CloseReport, RunningServer, ServerPool, free_port
from pytest_sskj.server.process import describe_exit, tail_lines
from pytest_sskj.server.serving import Serving
from pytest_sskj.server.spec import NodeCommand, ServerSpec
from pytest_sskj.settings import Settings

__all__ = ["DeploymentPool", "RunningDeployment", "pd_problems"]


def pd_problems(topo: Topology, infos: dict[str, dict[str, Any] | None]) -> list[str]:
    """What the groups' ``/server_info`` says against the PD contract: each group's disaggregation mode is its
    role, one page size, the transfer backend."""
    known = {name: info for name, info in infos.items() if info}
    return [*_mode_problems(topo, known), *_page_problems(topo, known), *_transfer_problems(topo, known)]


def _mode_problems(topo: Topology, infos: dict[str, dict[str, Any]]) -> list[str]:
    roles = {g.name: g.role for g in topo.groups}
    return [
        f"group {name} ({roles[name]}) runs disaggregation_mode={mode!r}, expected {roles[name]!r}"
        for name, info in infos.items()
        if (mode := info.get("disaggregation_mode")) is not None and name in roles and mode != roles[name]
    ]


def _page_problems(topo: Topology, infos: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    pages = {name: info.get("page_size") for name, info in infos.items() if "page_size" in info}
    if len(set(map(str, pages.values()))) > 1:
        out.append("page_size differs between groups: " + ", ".join(f"{k}={v}" for k, v in pages.items()))
    if topo.page_size is not None:
        out += [
            f"group {k} runs page_size={v}, declared {topo.page_size}" for k, v in pages.items() if v != topo.page_size
        ]
    return out


def _transfer_problems(topo: Topology, infos: dict[str, dict[str, Any]]) -> list[str]:
    if topo.transfer_backend is None:
        return []
    return [
        f"group {name} uses transfer backend {got!r}, declared {topo.transfer_backend!r}"
        for name, info in infos.items()
        if (got := info.get("disaggregation_transfer_backend")) is not None and got != topo.transfer_backend
    ]


@dataclass(repr=False)
class RunningDeployment:
    """A healthy deployment: its groups' servers and the router; the client's URL is the router's."""

    spec: ServerSpec
    topology: Topology
    groups: dict[str, RunningServer]
    router: ProcessHandle | None
    urls: list[str]
    router_oracle: LogOracle | None = None
    commands: list[NodeCommand] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    startup_s: float | None = None
    external: bool = False

    @property
    def log_paths(self) -> dict[str, Path]:
        out = {f"{g}:{k}": p for g, s in self.groups.items() for k, p in s.log_paths.items()}
        if self.router is not None:
            out["router"] = self.router.log_path
        return out

    @property
    def handles(self) -> list[ProcessHandle]:
        return [h for s in self.groups.values() for h in s.handles] + ([self.router] if self.router else [])

    def mark(self) -> dict[str, LogMark]:
        marks = {g: s.mark() for g, s in self.groups.items()}
        if self.router_oracle is not None:
            marks["router"] = self.router_oracle.mark()
        return marks

    def findings_since(self, mark: dict[str, LogMark] | None = None) -> list[Finding]:
        out: list[Finding] = []
        for g, s in self.groups.items():
            out += s.findings_since((mark or {}).get(g))
        if self.router_oracle is not None:
            out += self.router_oracle.findings_since((mark or {}).get("router"))
        return out

    def log_tail(self, n: int = 30) -> dict[str, list[str]]:
        """The last ``n`` lines of every group rank's log (``group:node/rank``) and the router's, redacted."""
        out = {f"{g}:{k}": lines for g, s in self.groups.items() for k, lines in s.log_tail(n).items()}
        if self.router is not None:
            secrets = self.router_oracle.secrets if self.router_oracle else ()
            out["router"] = [redact_text(line, secrets) for line in tail_lines(self.router.log_path, n)]
        return out

    def check_alive(self) -> None:
        """Raise :class:`ServerCrashed` naming the group and node when any rank or the router has died."""
        for name, server in self.groups.items():
            try:
                server.check_alive()
            except ServerCrashed as exc:
                g = next(x for x in self.topology.groups if x.name == name)
                raise ServerCrashed(f"deployment group {name} ({g.role}, nodes {','.join(g.nodes)}): {exc}") from None
        if self.router is not None and (code := self.router.poll()) is not None:
            raise ServerCrashed(describe_exit(f"router on {self.router.node}", code, self.router.log_path))

    def alive(self) -> bool:
        return all(h.poll() is None for h in self.handles)

    def pids(self) -> dict[str, list[int]]:
        """Every group rank's live PIDs by ``node/rank`` (groups never share a node) and the router's."""
        out = {k: v for s in self.groups.values() for k, v in s.pids().items()}
        if self.router is not None:
            out[f"{self.router.node}/router"] = self.router.pids()
        return out

    def server_info(self) -> dict[str, Any] | None:
        return None

    def config_problems(self) -> list[str]:
        """Every group's effective configuration against its spec, and the PD contract between groups."""
        from pytest_sskj.engines import get_engine

        infos = {name: s.server_info() for name, s in self.groups.items()}
        out = [
            f"group {n}: {p}"
            for n, s in self.groups.items()
            if s.urls
            for p in get_engine(s.spec.engine).live_config_problems(s.spec, s.urls[0])
        ]
        return out + (pd_problems(self.topology, infos) if self.topology.kind == "pd" else [])

    def describe(self) -> dict[str, Any]:
        return {
            "topology": self.topology.as_dict(),
            "urls": list(self.urls),
            "groups": {g: s.describe() for g, s in self.groups.items()},
            "router": None if self.router is None else {"node": self.router.node, "log": str(self.router.log_path)},
            "notes": list(self.notes),
        }


class DeploymentPool:
    """The session's servers when the run declares a deployment: the whole topology, started once."""

    def __init__(
        self,
        settings: Settings,
        *,
        make_pool: Callable[[Group], ServerPool],
        router_launcher: Launcher,
        log_dir: Path,
        router_timeout_s: float = 120.0,
    ) -> None:
        assert settings.deployment is not None
        self.settings = settings
        self.topology = settings.deployment
        self.make_pool = make_pool
        self.router_launcher = router_launcher
        self.log_dir = log_dir
        self.router_timeout_s = router_timeout_s
        self.pools: dict[str, ServerPool] = {}
        self.running: dict[ServerSpec, RunningDeployment] = {}
        self.current: RunningDeployment | None = None
        self.router: ProcessHandle | None = None
        self.closed = False

    @property
    def launcher(self) -> Launcher | None:
        """The first started group's launcher (every group reaches the same nodes' kind of launcher)."""
        return next((p.launcher for p in self.pools.values()), None)

    def get(self, spec: ServerSpec) -> RunningDeployment:
        if self.closed:
            raise ServerLaunchError("the deployment pool is closed (session teardown); nothing is launched")
        cur = self.current
        if cur is not None and cur.alive():
            self.running.setdefault(spec, cur)
            return cur
        if cur is not None:
            self.stop(spec)
        self.current = self._start(spec)
        self.running[spec] = self.current
        return self.current

    def _start(self, spec: ServerSpec) -> RunningDeployment:
        t0 = time.perf_counter()
        groups: dict[str, RunningServer] = {}
        try:
            for g in launch_order(self.topology):
                pool = self.pools.get(g.name) or self.make_pool(g)
                self.pools[g.name] = pool
                try:
                    groups[g.name] = pool.get(group_spec(self.settings, self.topology, g))
                except (ServerLaunchError, HealthTimeout, ServerConfigMismatch, ServerCrashed) as exc:
                    raise type(exc)(f"deployment group {g.name} ({g.role}, nodes {','.join(g.nodes)}): {exc}") from None
            dep = RunningDeployment(spec, self.topology, groups, None, [], notes=[])
            dep.commands = [c for s in groups.values() for c in s.commands]
            if self.topology.kind == "pd":
                bad = dep.config_problems()
                if bad:
                    raise ServerConfigMismatch("PD groups disagree:\n" + "\n".join(f"  - {p}" for p in bad))
            if self.topology.router is not None:
                self._start_router(dep, groups)
            else:
                dep.urls = [u for s in groups.values() for u in s.urls]
            dep.startup_s = time.perf_counter() - t0
            return dep
        except BaseException:
            self._stop_all()
            raise

    def _start_router(self, dep: RunningDeployment, groups: dict[str, RunningServer]) -> None:
        r = self.topology.router
        assert r is not None
        port = r.port or free_port()
        topo = self.topology
        if port != r.port:
            from dataclasses import replace

            # a router whose port we chose gets a free Prometheus port too: sglang-router binds 29000 by default,
            # and a second router on the host (another deployment, a parallel run) then panics at start
            # ("failed to install Prometheus metrics exporter: ... Address already in use")
            given = any(a.split("=")[0] == "--prometheus-port" for a in r.server_args)
            extra = r.server_args if given else (*r.server_args, "--prometheus-port", str(free_port()))
            topo = replace(topo, router=replace(r, port=port, server_args=tuple(extra)))
        cmd = router_command(self.settings, topo, {n: s.urls for n, s in groups.items()})
        log = self.log_dir / cmd.node / f"router-{int(time.time())}.log"
        self.router = self.router_launcher.start(cmd, log)
        oracle = LogOracle(self.settings.engine)  # the shared generic signatures plus the groups engine's
        oracle.add(self.router.log_path, cmd.node, 0, offset=self.router.log_offset)
        dep.router, dep.router_oracle = self.router, oracle
        dep.commands.append(cmd)
        url = node_url(cmd.node, port)
        _wait_router(url, self.router, self.router_timeout_s)
        dep.urls = [url]

    def stop(self, spec: ServerSpec) -> None:
        self._stop_all()

    def prepare(
        self, spec: ServerSpec, then: Callable[[Serving], None] | None = None, *, ahead: ServerSpec | None = None
    ) -> None:
        """A deployment's groups hold every GPU of its nodes: nothing starts early (the seam's no-op)."""

    def _stop_all(self) -> None:
        if self.router is not None:
            self.router.terminate(15.0)
            self.router = None
        for g in reversed(launch_order(self.topology)):
            pool = self.pools.get(g.name)
            if pool is not None:
                for s in list(pool.running):
                    pool.stop(s)
        self.current = None
        self.running.clear()

    def close(self) -> CloseReport:
        self.closed = True
        t0 = time.perf_counter()
        router = self.router
        self._stop_all()
        reports = [p.close() for p in self.pools.values()]
        self.router_launcher.close()
        leftover: dict[str, list[int]] = {}
        for rep in reports:
            leftover.update(rep.leftover)
        if router is not None and router.pids():
            leftover["router"] = router.pids()
        return CloseReport(sum(r.launched for r in reports) + (1 if router else 0), leftover, time.perf_counter() - t0)


def _wait_router(url: str, handle: ProcessHandle, timeout_s: float) -> None:
    from pytest_sskj.server.health import probe

    deadline = time.perf_counter() + timeout_s
    last = ""
    while time.perf_counter() < deadline:
        code = handle.poll()
        if code is not None:
            raise ServerLaunchError(describe_exit("router", code, handle.log_path) + "\n  it exited before /health")
        status, detail = probe(url, "/health", timeout_s=5.0)
        if status == 200:
            return
        last = f"{status}: {detail}"
        time.sleep(0.25)
    handle.terminate(10.0)
    raise HealthTimeout(f"router at {url} not healthy within {timeout_s:.0f} s (last /health: {last})")


def names(groups: Sequence[Group]) -> list[str]:
    return [g.name for g in groups]
