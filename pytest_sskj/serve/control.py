"""``serve start | status | stop``: a named deployment that outlives the process that started it.

:func:`start` takes a configured pytest config (the run's own options, ini, env and ``--profile``: the same
:class:`~pytest_sskj.settings.Settings` a run resolves), starts the deployment's servers through the
existing :class:`~pytest_sskj.server.pool.ServerPool` (the session's launcher kind -- local, ssh or
container -- built without a reaper watchdog, since the servers must outlive this process), with the
identity pre-launch (every node probed, a mixed build refused) and the GPU pre-flight, waits for health and
the effective-config check, writes the :class:`~pytest_sskj.serve.state.DeploymentState` and detaches: the
local log stream of an ssh rank ends, the remote rank keeps running in its own session.  :func:`status` asks
every rank's node whether its tree still runs and probes each URL's health path; :func:`stop` stops every
tree on every node (and removes the containers), verifies nothing is left and removes the state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.errors import ServerError
from pytest_sskj.serve.state import DeploymentState, RankState, known_names, read_state, recorded_spec, state_path
from pytest_sskj.serve.trees import RankLiveness, liveness, stop_rank
from pytest_sskj.server.launcher import Launcher, ProcessHandle, on_each

if TYPE_CHECKING:
    import pytest

    from pytest_sskj.identity import NodeIdentity
    from pytest_sskj.server.pool import RunningServer, ServerPool
    from pytest_sskj.server.spec import ServerSpec
    from pytest_sskj.server.ssh import SshLauncher
    from pytest_sskj.settings import Settings

Record = Callable[["ServerSpec", Sequence["NodeIdentity"]], object]
"""What the identity pre-launch hands the nodes' identities to."""

__all__ = ["DeploymentStatus", "ServeError", "StopReport", "load", "start", "status", "stop"]


class ServeError(Exception):
    """A serve command refused or failed; the message says why and what to do."""


@dataclass(frozen=True)
class DeploymentStatus:
    state: DeploymentState
    ranks: tuple[RankLiveness, ...]
    health: tuple[tuple[str, int | None, str], ...]
    """``(url, HTTP status or None, detail)`` of every URL's health path."""

    @property
    def alive(self) -> bool:
        return any(r.alive for r in self.ranks)

    @property
    def healthy(self) -> bool:
        return all(r.alive for r in self.ranks) and all(code == 200 for _, code, _ in self.health)

    def lines(self) -> list[str]:
        s = self.state
        word = "healthy" if self.healthy else ("UNHEALTHY" if self.alive else "DEAD")
        out = [f"deployment {s.name}: {word} — {s.engine} {s.label}, started {s.started_at}, {', '.join(s.urls)}"]
        out += [f"  {url}{s.health_path}: {code if code is not None else 'no answer'} {detail[:80]}".rstrip()
                for url, code, detail in self.health]  # fmt: skip
        out += [f"  {r.rank.group + ' ' if r.rank.group else ''}{r.rank.node} rank {r.rank.rank} ({r.rank.kind}): "
                f"{r.detail}" for r in self.ranks]  # fmt: skip
        return out


@dataclass(frozen=True)
class StopReport:
    state: DeploymentState
    was_alive: bool
    results: tuple[tuple[RankState, bool, str], ...]

    @property
    def clean(self) -> bool:
        return all(ok for _, ok, _ in self.results)


def load(reports_dir: Path, name: str) -> DeploymentState:
    """The state of deployment ``name``; :class:`ServeError` naming the known ones when there is none."""
    try:
        path = state_path(reports_dir, name)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    try:
        return read_state(path)
    except FileNotFoundError:
        known = known_names(reports_dir)
        raise ServeError(
            f"no deployment named {name!r}: {path} does not exist (known under {path.parent}: "
            f"{', '.join(known) or 'none'})\n  Hint: `python -m pytest_sskj serve status` lists them; "
            "give the same --reports-dir as `serve start`"
        ) from None
    except ValueError as exc:
        raise ServeError(str(exc)) from None


@contextmanager
def _ssh(state: DeploymentState, identity: Path | None) -> Iterator[SshLauncher | None]:
    """The launcher that reaches the deployment's ssh ranks (``None``: it has none), its shared connections
    ended when the block is left: ``serve status``/``stop`` leave nothing connected to the nodes."""
    if not any(r.kind.endswith("ssh") for r in state.ranks):
        yield None
        return
    from pytest_sskj.server.ssh import SshLauncher, SshOptions

    o = state.ssh
    opts = SshOptions(
        user=o.get("user"),
        port=o.get("port"),
        identity=identity,
        options=tuple(o.get("options") or ()),
        config_file=Path(o["config_file"]) if o.get("config_file") else None,
    )
    launcher = SshLauncher(ssh=opts)
    try:
        yield launcher
    finally:
        launcher.end_shared_connections()


def status(state: DeploymentState, *, ssh_identity: Path | None = None, timeout_s: float = 10.0) -> DeploymentStatus:
    """Every rank's tree and every URL's health, asked now."""
    from pytest_sskj.server.health import probe

    with _ssh(state, ssh_identity) as ssh:
        ranks = tuple(on_each(lambda r: liveness(r, ssh), state.ranks))
    health = tuple((u, *probe(u, state.health_path, timeout_s)) for u in state.urls)
    return DeploymentStatus(state, ranks, health)


def stop(
    state: DeploymentState, reports_dir: Path, *, ssh_identity: Path | None = None, timeout_s: float = 15.0
) -> StopReport:
    """Stop every rank's tree on its node; the state file is removed once nothing is left."""
    with _ssh(state, ssh_identity) as ssh:
        before = on_each(lambda r: liveness(r, ssh), state.ranks)
        results = tuple(on_each(lambda r: (r, *stop_rank(r, ssh, timeout_s)), state.ranks))
    report = StopReport(state, any(b.alive for b in before), results)
    if report.clean:
        state_path(reports_dir, state.name).unlink(missing_ok=True)
    return report


# -- start -----------------------------------------------------------------------------------------------
def _launcher(settings: Settings, name: str) -> Launcher:
    """The run's launcher kind, without a reaper (the servers outlive this process) or CPU pinning."""
    from pytest_sskj.nodes import is_local_node
    from pytest_sskj.server.launcher import launcher_class
    from pytest_sskj.server.local import LocalLauncher

    kind = settings.launcher
    remote = any(not is_local_node(n) for n in settings.nodes)
    inner: Launcher = (
        LocalLauncher(detached_pump=True) if kind == "local" or (kind == "container" and not remote)
        else launcher_class("ssh").from_settings(settings, worker="serve")
    )  # fmt: skip
    if kind != "container":
        return inner
    from pytest_sskj.server.container import ContainerLauncher

    assert settings.container is not None  # resolved at parse time for --launcher container
    return ContainerLauncher(inner=inner, config=settings.container, tag=f"serve-{name}")


def _rank_state(h: ProcessHandle, serves: set[tuple[str, int]], group: str | None = None) -> RankState:
    from pytest_sskj.server.container import ContainerProcess
    from pytest_sskj.server.local import LocalProcess
    from pytest_sskj.server.ssh import SshProcess

    container = runtime = None
    inner: ProcessHandle = h
    if isinstance(h, ContainerProcess):
        container, runtime, inner = h.name, h.launcher.config.runtime, h.inner
    common: dict[str, Any] = {"node": h.node, "rank": h.rank, "log": str(h.log_path), "container": container,
                              "runtime": runtime, "serves_http": (h.node, h.rank) in serves,
                              "group": group}  # fmt: skip
    prefix = "container+" if container else ""
    if isinstance(inner, SshProcess):
        return RankState(kind=prefix + "ssh", pid=inner.remote_pid, state_dir=inner.state_dir, **common)
    if not isinstance(inner, LocalProcess):
        raise ServeError(f"rank {h.node}/{h.rank}: a {type(inner).__name__} cannot outlive this process")
    import psutil

    pid = int(inner.pid)
    return RankState(kind=prefix + "local", pid=pid, create_time=psutil.Process(pid).create_time(), **common)


def _ssh_facts(settings: Settings) -> dict[str, Any]:
    return {
        "user": settings.ssh_user,
        "port": settings.ssh_port if settings.sources.get("ssh_port") not in (None, "default") else None,
        "options": list(settings.ssh_options),
        "config_file": str(settings.ssh_config) if settings.ssh_config else None,
    }


def _state(
    name: str, settings: Settings, server: RunningServer, identity: dict[str, Any], log_dir: Path
) -> DeploymentState:
    from pytest_sskj.engines import get_engine

    spec = recorded_spec(server.spec)
    serves = {(c.node, c.rank) for c in server.commands if c.serves_http}
    return DeploymentState(
        name=name,
        engine=server.spec.engine,
        label=server.spec.label,
        urls=tuple(server.urls),
        ranks=tuple(_rank_state(h, serves) for h in server.handles),
        spec=spec,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        launcher=settings.launcher,
        health_path=get_engine(server.spec.engine).health_path,
        identity=identity,
        ssh=_ssh_facts(settings),
        profile=str(settings.profile) if settings.profile else None,
        log_dir=str(log_dir),
        startup_s=round(server.startup_s, 3) if server.startup_s is not None else None,
        notes=tuple(server.notes),
    )


def _detach(handles: Sequence[ProcessHandle]) -> None:
    """End this process's hold on every rank (ssh: the local log stream), leaving the ranks running."""
    from pytest_sskj.server.container import ContainerProcess
    from pytest_sskj.server.ssh import SshProcess

    by_launcher: dict[int, list[SshProcess]] = {}
    for h in handles:
        inner = h.inner if isinstance(h, ContainerProcess) else h
        if isinstance(inner, SshProcess):  # a local rank is a session leader of its own: nothing here holds it
            by_launcher.setdefault(id(inner.launcher), []).append(inner)
    for procs in by_launcher.values():
        # the shared connections first: a rank's log stream rides its node's master, and only the master's exit
        # ends the remote session (killing the local client alone leaves it, and its pipes, open)
        procs[0].launcher.end_shared_connections()
        for p in procs:
            p.detach()


def _refuse_live(settings: Settings, name: str, say: Callable[[str], None]) -> None:
    path = state_path(settings.reports_dir, name)
    if not path.exists():
        return
    old = load(settings.reports_dir, name)
    st = status(old, ssh_identity=settings.ssh_identity)
    if st.alive:
        raise ServeError(
            f"deployment {name!r} is already running ({', '.join(old.urls)}, started {old.started_at}); "
            f"nothing was started\n  Hint: `python -m pytest_sskj serve stop {name}` first, or pick another --name"
        )
    say(f"deployment {name}: the state of a dead deployment (started {old.started_at}) is replaced")


def start(config: pytest.Config, name: str, *, say: Callable[[str], None] = lambda _: None) -> DeploymentState:
    """Start deployment ``name`` from the configured session's settings; return its written state."""
    from pytest_sskj.identity import build_facts
    from pytest_sskj.server.spec import spec_from_settings
    from pytest_sskj.stash import SETTINGS_KEY

    settings = config.stash[SETTINGS_KEY]
    if settings.target_url:
        raise ServeError("--target-url names a server that already runs; `serve start` launches one: drop it")
    try:  # a name, or a state file that links out of the deployments dir, is refused before anything launches
        path = state_path(settings.reports_dir, name)
    except ValueError as exc:
        raise ServeError(str(exc)) from None
    _refuse_live(settings, name, say)
    log_dir = settings.reports_dir / "deployments" / name / time.strftime("%Y%m%d-%H%M%S")
    if settings.deployment is not None:
        return _start_groups(config, settings, name, log_dir, say)
    chunk = settings.chunks[0] if settings.chunks else None
    if len(settings.backends) > 1 or len(settings.chunks) > 1:
        say(f"deployment {name}: one server: backend {settings.baseline}, chunk {chunk} (the first of each)")
    from pytest_sskj.server.speculative import arm_override
    from pytest_sskj.speculative import split_arm

    base = settings.baseline
    spec = spec_from_settings(settings, backend=split_arm(base)[0], chunk=chunk, override=arm_override(settings, base))
    identity: dict[str, Any] = {}

    def record(_spec: Any, ids: Sequence[Any]) -> None:
        identity.update({"nodes": [i.as_dict() for i in ids], **build_facts(ids)})

    pool = _pool(config, settings, name, log_dir, record)
    try:
        server = pool.get(spec)
    except ServerError as exc:
        pool.close()
        raise ServeError(f"deployment {name} did not start; nothing is left running:\n{exc}") from None
    state = _state(name, settings, server, identity, log_dir)
    try:
        state.write(path)
    except OSError as exc:
        pool.close()
        raise ServeError(f"could not write the state of deployment {name}: {exc}; the servers were stopped") from None
    _detach(server.handles)
    return state


def _pool(config: pytest.Config, settings: Settings, tag: str, log_dir: Path, record: Record) -> ServerPool:
    """A server pool of ``serve start`` (one server group): serve's launcher for ``tag``, the identity pre-launch
    (``record`` gets the nodes' identities) before the GPU pre-flight, logs under ``log_dir/logs``."""
    from pytest_sskj.gpu.serving import server_prelaunch
    from pytest_sskj.identity import identity_prelaunch
    from pytest_sskj.server.pool import ServerPool

    return ServerPool(
        log_dir=log_dir / "logs",
        launcher=_launcher(settings, tag),
        health_timeout_s=settings.health_timeout_s,
        model_cache_dir=settings.reports_dir / ".cache" / "models",
        commands_for=lambda sp: config.hook.pytest_sskj_server_commands(config=config, spec=sp),
        name_tag=tag,
        prelaunch=identity_prelaunch(server_prelaunch(config), allow_mixed=settings.allow_mixed_builds, record=record),
    )


def _start_groups(
    config: pytest.Config, settings: Settings, name: str, log_dir: Path, say: Callable[[str], None]
) -> DeploymentState:
    """A profile's ``[deployment]`` (PD: prefill and decode groups behind the router): :mod:`.groups`."""
    from pytest_sskj.serve.groups import deployment_ranks, deployment_state, start_deployment

    try:
        dep, identity, close = start_deployment(
            settings, name, log_dir, pool_for=lambda tag, record: _pool(config, settings, tag, log_dir, record), say=say
        )
    except ServerError as exc:
        raise ServeError(f"deployment {name} did not start; nothing is left running:\n{exc}") from None
    try:
        common = {"ssh": _ssh_facts(settings), "profile": str(settings.profile) if settings.profile else None}
        state = deployment_state(name, settings, dep, identity, log_dir, deployment_ranks(dep, _rank_state), common)
        state.write(state_path(settings.reports_dir, name))
    except (OSError, ServeError) as exc:
        close()
        raise ServeError(f"could not record deployment {name}: {exc}; its servers were stopped") from None
    _detach(dep.handles)
    return state
