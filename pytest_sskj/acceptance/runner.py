"""Run one serving point end to end and turn it into a result row.

``pool.get(spec)`` -> ``server.mark()`` -> ``run_bench`` (in a worker thread while this thread watches the
server with ``check_alive``) -> log findings since the mark -> ``check_alive`` -> the server still reports
the spec'd configuration -> the contract's result row, written to the point store and announced with
``pytest_sskj_point_finished``.  A crash, hang, OOM or launch failure fails that point with its category
and a log excerpt, tears the server down, and every later point of the same server spec is reported
``not run: server crashed at <point>`` at once instead of hanging.  The runner keeps per-session state
(outcomes, broken specs) on its own object, which lives in ``config.stash``.

``PointRunner._measure`` is the point as the sequence of its phases (each a method named after it); the
watched bench phase itself (thread, liveness polling, client priority) is :mod:`pytest_sskj.acceptance.watch`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sskj.acceptance import matrix
from pytest_sskj.acceptance.attachments import attach_commands, attach_file, attach_result, attach_text, step
from pytest_sskj.acceptance.matrix import Point
from pytest_sskj.acceptance.store import PointStore
from pytest_sskj.acceptance.warmup import Warmups
from pytest_sskj.acceptance.watch import raise_client_priority, run_watched
from pytest_sskj.bench.result import BenchFn, BenchOutcome
from pytest_sskj.bench.saturation import speculative_bursts
from pytest_sskj.engines import cache_resets, get_engine
from pytest_sskj.errors import (
    EnvironmentMismatch,
    HealthTimeout,
    LauncherError,
    ServerConfigMismatch,
    ServerCrashed,
    ServerError,
    ServerLaunchError,
)
from pytest_sskj.records import IDENTITY_FIELDS, new_row
from pytest_sskj.report import categories as cat
from pytest_sskj.server.cpus import measured_fields
from pytest_sskj.server.logscan import Finding
from pytest_sskj.server.serving import Serving, ServingPool
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.server.speculative import uncounted
from pytest_sskj.settings import Settings
from pytest_sskj.telemetry import point_telemetry
from pytest_sskj.telemetry.summary import THROUGHPUT_TOLERANCE_PCT

if TYPE_CHECKING:
    from pytest_sskj.bench.client import BenchTimeouts
    from pytest_sskj.bench.workload import Workload

__all__ = [
    "BrokenSpec",
    "PointOutcome",
    "PointRunner",
    "config_mismatches",
    "current_config_problems",
    "finding_tag",
    "raise_client_priority",
]

_SAMPLE_KEYS = ("ttft", "e2e_latency", "tpot")


ProgressFn = Callable[[Point, int, int], None]


@dataclass
class BrokenSpec:
    """A server spec that crashed, hung or could not start: later points of it are not run."""

    point_id: str
    what: str
    """``crashed``, ``hung``, ``failed to start`` or ``launch failed``."""


@dataclass
class PointOutcome:
    """The outcome of one point: its row, per-request samples, and the failure message when it failed."""

    point: Point
    row: dict[str, Any]
    samples: dict[str, list[float]] = field(default_factory=dict)
    resumed: bool = False
    message: str = ""
    """Tagged failure message (``[crash] ...``), or the ``not run: ...`` reason."""

    @property
    def status(self) -> str:
        return str(self.row.get("status"))

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def finding_tag(category: str) -> str:
    """The report category tag for a log-finding category."""
    return {"oom": cat.OOM, "nccl": cat.NCCL, "watchdog": cat.TIMEOUT}.get(category, cat.CRASH)


def current_config_problems(server: Serving, spec: ServerSpec) -> list[str]:
    """Ask the running server *now* what it runs and compare with its spec (external servers: not checked).

    The engine decides how (``Engine.live_config_problems``): SGLang a fresh ``/server_info`` (a server that
    stops answering it is a problem); embedded: llama.cpp's ``/props`` slot count and ``n_batch``; a
    deployment checks each of its groups and the PD contract between them.
    """
    return list(server.config_problems())


def config_mismatches(spec: ServerSpec, info: Mapping[str, Any] | None) -> list[str]:
    """What ``/server_info`` (or the engine's equivalent) reports differently from ``spec``; [] if it agrees.

    Only keys the engine reports are compared (``Engine.config_mismatches``): SGLang's ``moe_runner_backend``,
    ``chunked_prefill_size``, ``tp_size``, ``ep_size``, ``disable_radix_cache``; the embedded engine's slot
    count (``total_slots``) and ``n_batch``.
    """
    return get_engine(spec.engine).config_mismatches(spec, info)


def _excerpt(text: str, limit: int = 1500) -> str:
    """``text`` shortened to about ``limit`` characters: its first lines (the cause) and its last (the log tail)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = limit // 4
    return text[:head].rstrip() + "\n  …\n" + text[-(limit - head) :].lstrip("\n")


def _samples_of(result: BenchOutcome) -> dict[str, list[float]]:
    return {f"{name}_ms": [float(v) for v in result.samples(name)] for name in _SAMPLE_KEYS}


class PointRunner:
    """Runs serving points for one session; remembers outcomes and broken server specs."""

    def __init__(
        self, config: pytest.Config, settings: Settings, store: PointStore, *, progress: ProgressFn | None = None
    ) -> None:
        self.config = config
        self.settings = settings
        self.store = store
        self.progress = progress
        self.outcomes: dict[str, PointOutcome] = {}
        self.broken: dict[str, BrokenSpec] = {}
        self.warmups = Warmups()
        self._client_priority = ""
        self._cpus: dict[str, Any] = {}

    # -- helpers ---------------------------------------------------------------------------------------
    def spec_for(self, point: Point) -> ServerSpec:
        return matrix.spec_for(self.settings, point)

    def shape_of(self, point: Point) -> tuple[int, int]:
        """The point's (ISL, OSL): its own shape, else the run's ``--isl``/``--osl``."""
        return point.shape or (self.settings.isl, self.settings.osl)

    def requests_for(self, point: Point) -> int:
        if point.kind == "search":
            return max(self.settings.requests, 2 * point.concurrency)
        return self.settings.requests

    def workload(self, point: Point) -> Workload:
        from pytest_sskj.bench.workload import Workload

        s = self.settings
        isl, osl = self.shape_of(point)
        return Workload(
            isl=isl,
            osl=osl,
            requests=self.requests_for(point),
            concurrency=point.concurrency,
            warmup=s.warmup,
            # prompts depend on (seed, C, repeat), never on the backend: A and B get identical prompts, while
            # a server reused across concurrencies never sees a prompt twice (no prefix-cache hits)
            seed=s.seed + 100_003 * point.concurrency,
            request_rate=s.request_rate,
            endpoint=s.endpoint,
            model=s.model_name if get_engine(s.engine).sends_model_name else None,
            token_ids=get_engine(s.engine).stream_token_ids and s.endpoint == "completions",
        )

    def timeouts(self, point: Point) -> BenchTimeouts:
        """The bench's hang bounds: ``--sskj-stall-timeout`` and a per-request deadline from the shape."""
        from pytest_sskj.bench.client import BenchTimeouts

        return BenchTimeouts.for_shape(self.settings.stall_timeout_s, self.settings.osl, point.concurrency)

    def base_row(self, point: Point, test_id: str, spec: ServerSpec) -> dict[str, Any]:
        s = self.settings
        shape = self.shape_of(point)
        return new_row(
            run_id=s.run_id,
            test_id=test_id,
            engine=s.engine,
            backend=point.backend,
            chunk=point.chunk,
            concurrency=point.concurrency,
            repeat=point.repeat,
            isl=shape[0],
            osl=shape[1],
            layout=point.layout,
            deployment=s.deployment.label() if s.deployment is not None else None,
            requests=self.requests_for(point),
            point_id=point.id,
            kind=point.kind,
            spec_key=spec.key(),
        )

    def _finish(self, outcome: PointOutcome) -> PointOutcome:
        self.store.complete(outcome.row, self.settings.slo)
        self.store.write(outcome.point.id, outcome.row, outcome.samples)
        self.outcomes[outcome.point.id] = outcome
        self.config.hook.pytest_sskj_point_finished(config=self.config, result=dict(outcome.row))
        return outcome

    def _fail(self, outcome: PointOutcome, category: str, message: str) -> PointOutcome:
        outcome.row["status"] = "failed"
        outcome.row["category"] = category
        outcome.row["reasons"] = [message, *outcome.row["reasons"]]  # the categorized cause first
        outcome.message = "\n".join(outcome.row["reasons"])
        return outcome

    # -- the point -------------------------------------------------------------------------------------
    def run(
        self,
        point: Point,
        pool: ServingPool,
        bench: BenchFn,
        *,
        test_id: str = "",
        then: Point | None = None,
        after: Point | None = None,
    ) -> PointOutcome:
        """Run ``point`` (or return its outcome from this session, or from disk on ``--resume``); ``then``: the
        point that runs next, whose server (when it is another one) the pool may start and warm once this
        point's bench is over (``ServingPool.prepare``); ``after``: the point after ``then``, whose server the
        pool may start then too and keep idle (``prepare``'s ``ahead``)."""
        if point.id in self.outcomes:
            return self.outcomes[point.id]
        if self.settings.resume:
            found = self.store.finished(point.id)
            if found is not None:
                row, samples = found
                reasons = row.get("reasons") or []
                out = PointOutcome(point, row, samples, resumed=True, message="\n".join(map(str, reasons)))
                self.outcomes[point.id] = out
                return out
        spec = self.spec_for(point)
        outcome = PointOutcome(point, self.base_row(point, test_id, spec))
        broken = self.broken.get(spec.key())
        if broken is not None:
            reason = (
                f"not run: launch failed at {broken.point_id}"
                if broken.what == "launch failed"
                else f"not run: server {broken.what} at {broken.point_id}"
            )
            outcome.row["reasons"] = [reason]
            outcome.message = reason
            return self._finish(outcome)
        self.store.reset(point.id)  # a re-measured point replaces an aborted attempt's records
        t0 = time.perf_counter()
        server: Serving | None = None
        try:
            server = self._measure(point, spec, pool, bench, outcome, (then, after))
        except BaseException as exc:  # pytest-timeout (signal method), Ctrl-C or SIGTERM in the middle of the point
            outcome.row["wall_s"] = round(time.perf_counter() - t0, 3)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                from pytest_sskj.interrupts import Terminated

                how = (
                    "SIGTERM"
                    if isinstance(exc, Terminated)
                    else "Ctrl-C (SIGINT)"
                    if isinstance(exc, KeyboardInterrupt)
                    else f"{type(exc).__name__}: {exc}"
                )
                self._fail(
                    outcome,
                    "interrupted",
                    f"interrupted: {point.id} was stopped by {how} after {outcome.row['wall_s']:.1f} s",
                )
            else:
                self._fail(
                    outcome,
                    "timeout",
                    f"{cat.TIMEOUT} server {spec.label} hung during {point.id} after "
                    f"{outcome.row['wall_s']:.1f} s: {type(exc).__name__}: "
                    f"{_excerpt(str(exc), 300)}",
                )
            self._finish(outcome)
            raise
        outcome.row["wall_s"] = round(time.perf_counter() - t0, 3)
        self._finish(outcome)
        if outcome.passed and server is not None:
            from pytest_sskj.acceptance.probes import after_point

            model = self.workload(point).model
            after_point(self.settings, point, server.urls[0], self.store.point_dir(point.id), model)
        return outcome

    def _break(self, pool: ServingPool, spec: ServerSpec, point: Point, what: str) -> None:
        self.broken[spec.key()] = BrokenSpec(point.id, what)
        try:
            pool.stop(spec)
        except (ServerError, OSError) as exc:  # best effort here; the pool's close() retries at session end
            self.broken[spec.key()].what += f" (teardown failed: {exc})"

    def _measure(
        self,
        point: Point,
        spec: ServerSpec,
        pool: ServingPool,
        bench: BenchFn,
        outcome: PointOutcome,
        upcoming: tuple[Point | None, Point | None] = (None, None),
    ) -> Serving | None:
        """The point's phases, in order: 1 launch, 2 bench (watched, with telemetry), then the next points'
        servers starting early (:meth:`_prepare_next`), 3 log scan, 4 the bench's metrics and telemetry summary,
        5 the liveness verdict, 6 the config re-check, 7 the oracle, 8 client-boundness.  A phase that fails
        the point ends it.  Returns the point's server (``None``: it did not launch or did not survive)."""
        server = self._launch(point, spec, pool, outcome)
        if server is None:
            return None
        attach_commands(server)
        mark = server.mark()
        out_dir = self.store.point_dir(point.id)
        with point_telemetry(server, pool.launcher, out_dir) as telemetry:
            result, crash = self._bench_watched(point, spec, pool, bench, server, out_dir)
        if crash is None:
            self._prepare_next(pool, spec, *upcoming)
        findings = self._scan(server, mark, outcome)
        if result is not None:
            self._record(point, result, out_dir, outcome)
            outcome.row.update(telemetry.summary(outcome.row, tolerance_pct=THROUGHPUT_TOLERANCE_PCT))
            if outcome.row.get("telemetry_plot"):
                attach_file(out_dir / str(outcome.row["telemetry_plot"]), f"telemetry {out_dir.name}")
        crash = crash or self._after_bench(point, spec, server, result, findings)
        if crash is not None:
            self._crashed(pool, spec, point, outcome, crash)
            return None
        self._judge(server, spec, outcome)
        return server

    def _prepare_next(self, pool: ServingPool, spec: ServerSpec, then: Point | None, after: Point | None) -> None:
        """After the bench, nothing of this point is measured any more: the pool may start the next point's
        server now (``ServingPool.prepare``), beside this one, whose post-bench phases still use it, and warm
        it; and start the server of the point after it (``ahead``), to be warmed at the next transition."""
        nxt = self._upcoming(then)
        later = self._upcoming(after) if nxt is not None else None
        if nxt is None or nxt == spec:  # this server serves the next point too: only the one after it starts
            if later is not None and later != spec:
                pool.prepare(later)
            return
        # (``after`` on this point's spec: a fresh server of it, since ``then``'s get stops this one)
        ahead = later if later != nxt else None
        assert then is not None
        warm = self.warmups.hook(then.id, self.workload(then), then.repeat, self.timeouts(then))
        pool.prepare(nxt, then=warm, ahead=ahead)

    def _upcoming(self, point: Point | None) -> ServerSpec | None:
        """``point``'s server spec, when it is still to be measured by a server that did not fail."""
        if point is None or point.id in self.outcomes:
            return None
        spec = self.spec_for(point)
        if spec.key() in self.broken:
            return None
        if self.settings.resume and self.store.finished(point.id) is not None:
            return None
        return spec

    def _crashed(
        self, pool: ServingPool, spec: ServerSpec, point: Point, outcome: PointOutcome, crash: tuple[str, str]
    ) -> None:
        """Phase 5 failed: the server is torn down and its spec broken; the point fails with the excerpt."""
        self._break(pool, spec, point, "hung" if crash[0] in ("timeout", "hang") else "crashed")
        attach_text(f"log excerpt {point.id}", crash[1])
        self._fail(outcome, crash[0], crash[1])

    def _judge(self, server: Serving, spec: ServerSpec, outcome: PointOutcome) -> None:
        """Phases 6-8: the server still runs its spec, the oracle's reasons, client-boundness -> passed."""
        with step("server still reports the spec'd configuration"):
            bad = current_config_problems(server, spec)
        if bad:
            self._fail(outcome, "config", f"server no longer reports the spec'd configuration: {', '.join(bad)}")
            return
        row = outcome.row
        if row["reasons"]:
            self._fail(outcome, "oracle", row["reasons"].pop())
            return
        missing = uncounted(spec, row)
        if missing is not None:
            self._fail(outcome, "config", missing)
            return
        speculative_bursts(row)
        if row.get("client_bound") and not self._client_bound_allowed(outcome):
            return
        row["status"] = "passed"

    def _launch(self, point: Point, spec: ServerSpec, pool: ServingPool, outcome: PointOutcome) -> Serving | None:
        """Phase 1: the point's server, healthy; ``None`` (the point failed ``launch``) when it cannot start."""
        try:
            with step(f"launch {spec.label} ({spec.nnodes} node(s)) and wait for health"):
                return pool.get(spec)
        except HealthTimeout as exc:
            what, msg = "failed to start", f"{cat.TIMEOUT} server {spec.label} did not become healthy"
            err: Exception = exc
        except LauncherError as exc:  # ssh unreachable, program missing: the same for every repeat
            what, msg = "launch failed", f"{cat.CRASH} server {spec.label} could not be launched"
            err = exc
        except EnvironmentMismatch as exc:  # the nodes run different builds (the message names them): nothing launched
            self._break(pool, spec, point, "refused (mixed builds)")
            self._fail(outcome, "environment", _excerpt(str(exc)))
            return None
        except (ServerLaunchError, ServerConfigMismatch, ServerCrashed) as exc:
            what = "failed to start"
            msg = f"{cat.CRASH} server {spec.label} failed to start ({type(exc).__name__})"
            err = exc
        self._break(pool, spec, point, what)
        self._fail(outcome, "launch", f"{msg}: {_excerpt(str(err))}")
        return None

    def _scan(self, server: Serving, mark: Any, outcome: PointOutcome) -> list[Finding]:
        """Phase 3: the log oracle's findings on every node since the point started, into the row."""
        with step("log scan (every node, since the point started)"):
            try:
                findings = list(server.findings_since(mark))
            except (OSError, ServerError):
                findings = []
        outcome.row["findings"] = [f.row() for f in findings]
        return findings

    def _record(self, point: Point, result: BenchOutcome, out_dir: Path, outcome: PointOutcome) -> None:
        """Phase 4: the bench's metrics, samples and strict-oracle failures into the row."""
        row = outcome.row
        metrics = dict(result.metrics)
        fixed = {k: row[k] for k in IDENTITY_FIELDS}
        row.update(metrics)
        row["measured_concurrency"] = metrics.get("concurrency")  # the bench's is the measured mean
        row.update(fixed)
        row["client_bound"] = bool(result.client_bound)
        row["client_priority"] = self._client_priority
        row.update(self._cpus)  # client_cpus / server_cpus / cpu_partition (pytest_sskj.server.cpus)
        outcome.samples = _samples_of(result)
        attach_result(result, outcome.samples)
        failures = list(result.failures)
        n_total = self.requests_for(point)
        if failures or not result.ok:
            done = metrics.get("completed")
            head = f"{done}/{n_total}" if isinstance(done, int) else f"{n_total - len(failures)}/{n_total}"
            shown = "; ".join(failures[:5]) or "the bench reported not ok"
            more = f" (+{len(failures) - 5} more)" if len(failures) > 5 else ""
            row["reasons"].append(f"{head} requests passed the strict oracle: {shown}{more}")

    def _after_bench(
        self,
        point: Point,
        spec: ServerSpec,
        server: Serving,
        result: BenchOutcome | None,
        findings: Sequence[Finding],
    ) -> tuple[str, str] | None:
        """Phase 5: a hang the bench saw, a crash seen now, or a fatal log finding -> (category, message)."""
        stalled = result.stalled if result is not None else None
        if stalled:
            return (
                "hang",
                f"{cat.TIMEOUT} server {spec.label} hung during {point.id}: {stalled}; the point was stopped "
                f"(--sskj-stall-timeout {self.settings.stall_timeout_s:g} s)",
            )
        if result is not None:
            try:
                server.check_alive()
            except ServerCrashed as exc:
                return ("crash", f"{cat.CRASH} server {spec.label} crashed during {point.id}: {_excerpt(str(exc))}")
        fatal = [f for f in findings if f.severity == "fatal"]
        if not fatal:
            return None
        f0 = fatal[0]
        return (
            f0.category,
            f"{finding_tag(f0.category)} fatal log finding during {point.id}: "
            + "; ".join(f.describe() for f in fatal[:3])
            + f"\n{_excerpt(f0.excerpt or '')}",
        )

    def _client_bound_allowed(self, outcome: PointOutcome) -> bool:
        """A client-bound point fails with category ``client-bound`` unless ``--sskj-allow-client-bound``."""
        row = outcome.row
        evidence = str(row.get("client_bound_reasons") or "flagged by the bench's saturation monitor")
        if self.settings.allow_client_bound:
            row["notes"] = [f"client-bound, allowed by --sskj-allow-client-bound: {evidence}"]
            return True
        self._fail(
            outcome,
            "client-bound",
            f"{cat.CLIENT_BOUND} {outcome.point.id} is not a valid measurement: the client, not the server, "
            f"limited it ({evidence}); "
            + str(row.get("client_bound_advice") or "run the client on a less loaded machine or lower --concurrency")
            + " (--sskj-allow-client-bound lets it pass; its comparisons stay inconclusive)",
        )
        return False

    def _bench_watched(
        self, point: Point, spec: ServerSpec, pool: ServingPool, bench: BenchFn, server: Serving, out_dir: Path
    ) -> tuple[BenchOutcome | None, tuple[str, str] | None]:
        """Phase 2: the bench, watched (:func:`~pytest_sskj.acceptance.watch.run_watched`): (result, crash)."""
        from pytest_sskj.report import allure

        n_total = self.requests_for(point)
        counts = [0, n_total]

        def progress(done: int, total: int) -> None:  # called on the bench thread: only record
            counts[0], counts[1] = done, total

        def draw() -> None:  # on the watching thread, where drawing (and suspending capture) is safe
            if self.progress is not None:
                self.progress(point, counts[0], counts[1])

        workload = self.workload(point)  # imported here, not in the thread
        timeouts = self.timeouts(point)
        s = self.settings
        warmed = self.warmups.done(point.id, server)  # sent early to its prepared server, or a warm server

        def run() -> BenchOutcome:
            return bench(
                server.urls,
                workload,
                out_dir,
                repeat=point.repeat,
                label=point.id,
                progress=progress,
                timeouts=timeouts,
                cache_reset=cache_resets(s.engine),
                warmed=warmed,
            )

        def crashed(exc: BaseException) -> str:
            return f"{cat.CRASH} server {spec.label} crashed during {point.id}: {_excerpt(str(exc))}"

        sent = "" if warmed is None else f" (sent before: {len(warmed)})"
        with allure.step(f"bench: warmup {s.warmup}{sent}, {n_total} requests at C={point.concurrency}"):
            watched = run_watched(
                name=point.id,
                server=server,
                bench=run,
                cpus=lambda: measured_fields(s.cpu_partition, local=_local_launch(s), run_cpus=s.run_cpus),
                crashed=crashed,
                on_crash=lambda what: self._break(pool, spec, point, what),
                draw=draw,
            )
        self._client_priority = watched.client_priority
        self._cpus = watched.cpus
        if watched.crash is None:
            self.warmups.benched(server)
        return watched.result, watched.crash


def _local_launch(settings: Settings) -> bool:
    return settings.launcher == "local" and not settings.target_url
