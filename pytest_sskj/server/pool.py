"""The server pool: one running deployment per distinct :class:`ServerSpec` per pytest session.

:class:`ServerPool` owns every server process of a session (one pool per xdist worker).  ``get(spec)``
returns the running server for ``spec`` or starts it: any server of another spec is stopped first (they
would compete for the same GPUs), the per-node commands come from the ``pytest_sskj_server_commands``
hook or :func:`node_commands`, each rank starts through the launcher with its log under
``<run dir>/logs/<node>/``, rank-0 health is awaited (:mod:`~pytest_sskj.server.health`) and, for
engines that verify it (``Engine.verifies_config_at_start``), the effective config is checked against
the spec.  A spec that failed to start
is not retried in the same session.  ``close()`` stops everything and then verifies that every launched
PID on every node is gone; :class:`~pytest_sskj.server.running.RunningServer` is what tests see (URLs,
commands, logs, the log oracle window, liveness).  With ``--target-url`` the pool launches nothing and
returns an external server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pytest_sskj.engines import get_engine, node_commands
from pytest_sskj.errors import ServerConfigMismatch, ServerError, ServerLaunchError
from pytest_sskj.nodes import is_local_node, node_url
from pytest_sskj.redact import is_secret_name, secret_arg_values, url_without_userinfo
from pytest_sskj.server.health import address_from_log, wait_healthy
from pytest_sskj.server.launcher import Launcher, ProcessHandle, StartsEarly
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.running import CloseReport, RunningServer, rank_key
from pytest_sskj.server.serving import Serving
from pytest_sskj.server.spec import NodeCommand, ServerSpec

__all__ = ["CloseReport", "Prelaunch", "RunningServer", "ServerPool", "free_port"]

_log = logging.getLogger(__name__)

Prelaunch = Callable[[ServerSpec, Launcher], tuple[Sequence[tuple[str, str]], "Callable[[], None] | None"]]
"""``(spec, launcher) -> (extra env for every rank, release callback or None)``; raises to refuse a launch."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for engines that cannot bind port 0 themselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


CommandsFor = Callable[[ServerSpec], "list[NodeCommand] | None"]


class ServerPool:
    """Starts, shares and stops the servers of one session (one pool per xdist worker)."""

    def __init__(
        self,
        *,
        log_dir: Path,
        launcher: Launcher | Callable[[], Launcher] | None = None,
        health_timeout_s: float = 60.0,
        stop_timeout_s: float = 15.0,
        target_url: str | None = None,
        model_cache_dir: Path | None = None,
        commands_for: CommandsFor | None = None,
        verify_server_info: bool = True,
        name_tag: str = "",
        prelaunch: Prelaunch | None = None,
        on_started: Callable[[RunningServer], None] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self._launcher_arg = launcher
        self._launcher: Launcher | None = None
        self.health_timeout_s = health_timeout_s
        self.stop_timeout_s = stop_timeout_s
        # userinfo is sent by nothing (the client never authenticates with it): dropped, so no record holds it
        self.target_url = url_without_userinfo(target_url).rstrip("/") if target_url else None
        self.model_cache_dir = model_cache_dir or log_dir / ".models"
        self.commands_for = commands_for
        self.verify = verify_server_info
        self.name_tag = name_tag
        self.prelaunch = prelaunch
        """Called with (spec, launcher) before a spec's first rank starts: GPU pre-flight and leases.  It
        returns extra environment for every rank (``CUDA_VISIBLE_DEVICES``) and a release callback, or
        raises to refuse the launch."""
        self.on_started = on_started
        """Part of every log file name (the xdist worker id), so workers never share a log."""
        self.running: dict[ServerSpec, RunningServer] = {}
        self.failed: dict[ServerSpec, ServerError] = {}
        self.launched: list[ProcessHandle] = []
        self.starts: dict[str, int] = {}
        self.closed = False
        self.close_report: CloseReport | None = None
        self._addresses: dict[str, str] = {}
        self._pending: dict[ServerSpec, Future[RunningServer]] = {}
        """Servers :meth:`prepare` is starting (or warming) in the background, by spec."""
        self._unreported: set[ServerSpec] = set()
        """Specs whose prepared start failed and whose :meth:`get` has not raised that error yet."""
        self.spares: dict[ServerSpec, RunningServer] = {}
        """Healthy servers started ahead of their turn, on the server's cores and idle (no CPU) until a
        :meth:`prepare` warms one or a :meth:`get` takes it; not in :attr:`running`."""
        self._executor: ThreadPoolExecutor | None = None

    # -- launcher ------------------------------------------------------------------------------------
    @property
    def launcher(self) -> Launcher:
        if self._launcher is None:
            arg = self._launcher_arg
            if arg is None:
                from pytest_sskj.server.local import LocalLauncher

                self._launcher = LocalLauncher()
            elif isinstance(arg, type) or not isinstance(arg, Launcher):
                self._launcher = arg()  # a factory (class or function)
            else:
                self._launcher = arg
        return self._launcher

    # -- the public API ------------------------------------------------------------------------------
    def get(self, spec: ServerSpec) -> RunningServer:
        """The running server for ``spec``: reused, prepared (:meth:`prepare`), or started (stopping any other
        spec's server first).  Whatever :meth:`prepare` has in flight ends first: nothing starts or warms up
        while the returned server is in use."""
        if self.closed:
            raise ServerLaunchError("the server pool is closed (session teardown or SIGTERM); nothing is launched")
        if self.target_url is not None:
            return self._external(spec)
        if spec in self._pending and spec not in self.running:
            self._replace_with_prepared(spec)
        self._settle_pending(keep=spec)
        if spec in self.spares and spec not in self.running:
            self.running[spec] = self.spares.pop(spec)  # started ahead, never warmed: its bench sends the warmup
        running = self.running.get(spec)
        if running is not None:
            broken = []
            if running.oracle is not None:
                running.oracle.scan()
                broken = running.oracle.fatal()
            if running.alive() and not broken:
                self._stop_others(spec)
                self._settle(running)
                return running
            self.stop(spec)  # it died, or logged a fatal signature, between tests: start a fresh one
        if spec in self.failed:
            err = self.failed[spec]
            if spec in self._unreported:  # its prepared start failed: the launch's own error, once
                self._unreported.discard(spec)
                raise err
            raise type(err)(f"{err}\n  (this spec already failed to start earlier in this session; not retried)")
        self._stop_others(spec)
        try:
            server = self._start(spec)
        except ServerError as exc:
            self.failed[spec] = exc
            raise
        self.running[spec] = server
        return server

    def _stop_others(self, spec: ServerSpec) -> None:
        for other in [s for s in self.running if s != spec]:
            self.stop(other)

    def prepare(
        self,
        spec: ServerSpec,
        then: Callable[[Serving], None] | None = None,
        *,
        ahead: ServerSpec | None = None,
    ) -> None:
        """Start ``spec``'s server in the background while the current one still runs, so that the next
        :meth:`get` of ``spec`` finds it healthy (or raises what its start raised).

        Only for engines whose servers may share the machine for a moment (``Engine.restart_cost ==
        "cheap"``: the embedded CPU engine; two GPU servers would compete for the same GPUs), and only when
        nothing is measured meanwhile: the acceptance runner asks after a point's bench, while the point's
        post-bench phases (log scan, records, config re-check, agreement probes) run, and every :meth:`get`
        waits for what is in flight before it hands a server out.  A no-op for an external, running, failed
        or already prepared spec.  ``then``: called with the healthy server on the preparing thread (the
        runner sends the next point's warmup); what it raises is logged and dropped.

        ``ahead``: the spec asked for after ``spec``.  Its server is started too, beside ``spec``'s warmup
        (the two use both cores while nothing is measured), moved onto the server's cores and left idle as a
        spare (an idle server takes no CPU) through ``spec``'s bench; the next ``prepare`` of it only warms
        it, so a transition waits for one warmup instead of a start and a warmup.  A spare that the next
        ``prepare`` names neither as ``spec`` nor as ``ahead`` is stopped there (its start counted, a
        redundant one); :meth:`close` stops every spare."""
        if self.closed or self.target_url is not None:
            return
        if get_engine(spec.engine).restart_cost != "cheap":
            return
        for spare in [s for s in self.spares if s not in (spec, ahead)]:
            self._stop_server(self.spares.pop(spare))
        for server in self.running.values():  # its bench is over: its probes may use the client's core too
            self._spread(server)
        if spec not in self.running and spec not in self.failed and spec not in self._pending:
            spare_server = self.spares.pop(spec, None)
            if spare_server is not None:
                self._pending[spec] = self._submit(self._warm, spec, spare_server, then)
            else:
                self._pending[spec] = self._submit(self._start_then, spec, then)
        if ahead is not None and ahead != spec and get_engine(ahead.engine).restart_cost == "cheap":
            # (a running server of the same spec is not it: ``spec``'s get stops that one, a fresh one follows)
            if not any(ahead in d for d in (self.failed, self._pending, self.spares)):
                self._pending[ahead] = self._submit(self._start_then, ahead, None)

    def _submit(self, fn: Callable[..., RunningServer], *args: Any) -> Future[RunningServer]:
        if self._executor is None:  # two: the next server's warmup beside the start of the one after it
            self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sskj-prepare")
        return self._executor.submit(fn, *args)

    def _warm(self, spec: ServerSpec, server: RunningServer, then: Callable[[Serving], None] | None) -> RunningServer:
        """A spare's turn is next: ``then`` (its warmup) on the preparing thread, on the client's cores too
        (the previous server's probes take the server's), then back onto the server's cores."""
        self._spread(server)
        self._then(spec, server, then)
        return server

    def _spread(self, server: RunningServer) -> None:
        if isinstance(self.launcher, StartsEarly) and not server.external:
            server.spread = True
            self.launcher.spread(server.handles)

    def _settle(self, server: RunningServer) -> None:
        if server.spread and isinstance(self.launcher, StartsEarly):
            self.launcher.settle(server.handles)
        server.spread = False

    def _start_then(self, spec: ServerSpec, then: Callable[[Serving], None] | None) -> RunningServer:
        """The prepared start: on the client's cores too where the launcher allows (:class:`StartsEarly`;
        the previous server still computes its probes on the server's), then ``then``, then every thread
        of the tree onto the server's cores: nothing measures it before :meth:`get` returns it."""
        early = self.launcher if isinstance(self.launcher, StartsEarly) else None
        with early.early() if early is not None else contextlib.nullcontext():
            server = self._start(spec)
        server.spread = early is not None  # spawned on the client's cores too
        self._then(spec, server, then)
        return server

    def _then(self, spec: ServerSpec, server: RunningServer, then: Callable[[Serving], None] | None) -> None:
        """``then(server)``, then the server back onto the server's cores (:meth:`_settle`)."""
        try:
            if then is not None:
                try:
                    then(server)
                except Exception as exc:  # the prepared server is fine; what ``then`` did is its caller's to redo
                    _log.warning(
                        "pytest-sskj: after the early start of %s: %s: %s", spec.label, type(exc).__name__, exc
                    )
            self._settle(server)
        except BaseException:
            self._terminate(server.handles)
            raise

    def _settle_pending(self, keep: ServerSpec | None = None) -> None:
        """Wait for everything :meth:`prepare` has in flight: ``keep``'s server joins :attr:`running` (or
        :attr:`failed`), the others become spares (a start ahead, or a warmed server whose turn comes later)."""
        for spec, fut in list(self._pending.items()):
            del self._pending[spec]
            try:
                server = fut.result()
            except ServerError as exc:
                self.failed[spec] = exc
                self._unreported.add(spec)
                continue
            if spec == keep and spec not in self.running:
                self.running[spec] = server
            else:  # (a fresh server of the running spec follows the running one: a spare too)
                self.spares[spec] = server

    def stop(self, spec: ServerSpec) -> None:
        """Stop the server of ``spec`` (every rank's whole process tree); a no-op when it is not running."""
        if spec in self._pending:
            self._settle_pending(keep=spec)
        server = self.running.pop(spec, None) or self.spares.pop(spec, None)
        if server is not None:
            self._stop_server(server)

    def _stop_server(self, server: RunningServer) -> None:
        release, server.release = server.release, None
        try:
            self._terminate(server.handles)
        finally:
            if release is not None:
                release()
        if server.oracle is not None:
            server.oracle.scan(final=True)

    def _replace_with_prepared(self, spec: ServerSpec) -> None:
        """The other running servers stop while ``spec``'s prepared start (a cheap engine, :meth:`prepare`)
        finishes: their trees' exits (20-40 ms each here) overlap that wait instead of following it, and all
        are gone before :meth:`get` returns, so nothing of them overlaps the next measured phase."""
        others = [self.running.pop(o) for o in list(self.running) if o != spec]
        if not others:
            return
        with ThreadPoolExecutor(max_workers=len(others), thread_name_prefix="sskj-stop") as ex:
            stops = [ex.submit(self._stop_server, server) for server in others]
            self._settle_pending(keep=spec)  # (a failed start lands in self.failed: get() raises it)
            for fut in stops:
                fut.result()

    def close(self) -> CloseReport:
        """Stop every server, close the launcher and verify that every launched PID on every node is gone."""
        if self.close_report is not None:
            return self.close_report
        self.closed = True
        t0 = time.perf_counter()
        # every server's every rank at once (an interrupted run with a PD deployment or several pools waits for
        # the slowest stop, not their sum), anything left from a failed start and a prepared start still waiting
        # for health included (it then fails fast); then each spec's release and final log scan
        self._terminate(self.launched)
        with contextlib.suppress(Exception):  # a prepared start that raised: its processes are in self.launched
            self._settle_pending()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        for spec in [*self.running, *self.spares]:
            self.stop(spec)
        leftover = {rank_key(h.node, h.rank): pids for h in self.launched if (pids := h.pids())}
        if self._launcher is not None:
            self._launcher.close()
        self.close_report = CloseReport(len(self.launched), leftover, time.perf_counter() - t0)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            name = f"pool-teardown-{self.name_tag}.json" if self.name_tag else "pool-teardown.json"
            (self.log_dir / name).write_text(
                json.dumps(
                    {
                        "launched": self.close_report.launched,
                        "leftover": leftover,
                        "clean": self.close_report.clean,
                        "elapsed_s": round(self.close_report.elapsed_s, 3),
                    },
                    indent=2,
                )
            )
        except OSError:
            pass
        return self.close_report

    # -- internals -----------------------------------------------------------------------------------
    def _external(self, spec: ServerSpec) -> RunningServer:
        running = self.running.get(spec)
        if running is None:
            assert self.target_url is not None
            running = RunningServer(
                spec=spec,
                urls=[self.target_url],
                external=True,
                notes=[f"external server {self.target_url} (--target-url): nothing launched"],
            )
            self.running[spec] = running
        return running

    def _spawn(self, items: list[tuple[NodeCommand, Path]], server: RunningServer) -> list[ProcessHandle]:
        """Start every rank (``Launcher.start_many``: ssh opens its connections in parallel)."""
        handles = [self.launcher.start(*items[0])] if len(items) == 1 else list(self.launcher.start_many(items))
        self.launched.extend(handles)
        server.handles.extend(handles)
        return handles

    def _terminate(self, handles: Sequence[ProcessHandle]) -> None:
        """Stop every rank's tree, all ranks at once (a remote terminate is a round trip per rank)."""
        todo = [h for h in handles if h.poll() is None or h.pids()]
        if len(todo) <= 1:
            for h in todo:
                h.terminate(self.stop_timeout_s)
            return
        with ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="sskj-stop") as ex:
            for fut in [ex.submit(h.terminate, self.stop_timeout_s) for h in todo]:
                fut.result()

    def _address(self, node: str) -> str:
        """The host the launcher reaches ``node`` at (ssh ``HostName``), cached per node."""
        if node not in self._addresses:
            self._addresses[node] = self.launcher.address(node)
        return self._addresses[node]

    def _effective(self, spec: ServerSpec) -> ServerSpec:
        engine = get_engine(spec.engine)
        spec = engine.prepare_spec(spec, self.model_cache_dir)
        if not engine.binds_port_zero and spec.port == 0 and not spec.nodes:
            spec = spec.with_(port=free_port())
        if spec.nnodes > 1 and spec.placement == "ranks" and spec.dist_init_host is None:
            spec = spec.with_(dist_init_host=self._address(spec.nodes[0]))
        return spec

    def _commands(self, spec: ServerSpec) -> list[NodeCommand]:
        cmds = self.commands_for(spec) if self.commands_for is not None else None
        return list(cmds) if cmds else node_commands(spec)

    def _url(self, cmd: NodeCommand, log_path: Path, offset: int) -> str | Callable[[], str | None]:
        if cmd.port == 0:  # the server bound a free port and printed its address

            def printed() -> str | None:
                url = address_from_log(log_path, offset)
                if url is None or is_local_node(cmd.node):
                    return url
                port = url.rsplit(":", 1)[1]
                return node_url(cmd.node, int(port), self._address)  # a remote server prints its bind address

            return printed
        return node_url(cmd.node, cmd.port, self._address)

    def _start(self, spec: ServerSpec) -> RunningServer:
        eff = self._effective(spec)
        release: Callable[[], None] | None = None
        if self.prelaunch is not None:
            try:
                extra_env, release = self.prelaunch(eff, self.launcher)
            except ServerError:
                raise
            except Exception as exc:  # GpuUnavailable and launcher errors refuse the launch, with the reason
                msg = f"{eff.engine} server {spec.label}: pre-flight refused the launch:\n{exc}"
                raise ServerLaunchError(msg) from exc
            if extra_env:
                eff = eff.with_(env=(*tuple(extra_env), *eff.env))
        try:
            server = self._start_ranks(spec, eff)
        except BaseException:
            if release is not None:
                release()
            raise
        server.release = release
        if self.on_started is not None:
            self.on_started(server)
        return server

    def _start_ranks(self, spec: ServerSpec, eff: ServerSpec) -> RunningServer:
        cmds = self._commands(eff)
        n = self.starts[spec.key()] = self.starts.get(spec.key(), 0) + 1
        secrets = (
            *(v for k, v in eff.env if is_secret_name(k) and v),
            *secret_arg_values(a for c in cmds for a in c.argv),
        )
        oracle = LogOracle(eff.engine, secrets=secrets)
        server = RunningServer(spec=spec, urls=[], commands=cmds, oracle=oracle)
        urls: list[str | Callable[[], str | None]] = []
        t0 = time.perf_counter()
        tag = f"-{self.name_tag}" if self.name_tag else ""
        items = [
            (
                cmd,
                self.log_dir / cmd.node / f"{eff.engine}-{spec.label}-{spec.key()}{tag}-rank{cmd.rank}"
                f"{f'-{n}' if n > 1 else ''}.log",
            )
            for cmd in cmds
        ]
        try:
            for cmd, handle in zip(cmds, self._spawn(items, server), strict=True):
                server.log_paths[rank_key(cmd.node, cmd.rank)] = handle.log_path
                offset = handle.log_offset
                oracle.add(handle.log_path, cmd.node, cmd.rank, offset=offset)
                if cmd.serves_http:
                    urls.append(self._url(cmd, handle.log_path, offset))
            report = wait_healthy(
                eff.engine,
                server.handles,
                urls,
                timeout_s=self.health_timeout_s,
                oracle=oracle,
                label=f"{eff.engine} server {spec.label}",
            )
            server.urls = list(report.urls)
            server.startup_s = time.perf_counter() - t0
            engine = get_engine(eff.engine)
            missing = oracle.missing_markers()
            if missing and engine.notes_missing_markers:
                server.notes.append(f"healthy-start markers not seen yet: {missing}")
            if self.verify and engine.verifies_config_at_start:
                self._verify_info(eff, server)
        except BaseException:
            self._terminate(server.handles)
            raise
        return server

    def _verify_info(self, spec: ServerSpec, server: RunningServer) -> None:
        info = server.server_info()
        if info is None:
            raise ServerConfigMismatch(
                f"{spec.label}: {server.urls[0]}/server_info returned nothing; cannot "
                "verify the effective backend, chunk size and parallel sizes"
            )
        problems = get_engine(spec.engine).verify_config(spec, info)
        if problems:
            raise ServerConfigMismatch(
                f"{spec.label}: the running server's /server_info disagrees with the spec that was launched:\n"
                + "\n".join(f"  - {p}" for p in problems)
                + "\n  Hint: check --sskj-server-arg / the profile for flags that override the spec"
            )
