"""Hooks of the acceptance suite: parameters from Settings, run order, verdict bookkeeping, terminal summary.

The suite's tests (``acceptance/test_*.py``) ask for one of six parameters and this plugin fills them
from :class:`~pytest_sskj.settings.Settings`: ``sskj_point`` (serving points, in execution order: grouped
by server, or A B A B where restarts are cheap), ``sskj_comparison``, ``sskj_curve``, ``sskj_slo_config``,
``sskj_baseline_config`` and ``sskj_search_config``.  Collection puts serving points first, then SLO gates,
baseline gates, comparisons, chunk curves and searches, so verdicts find their points already measured.
Each acceptance test gets a pytest-timeout ``signal``-method marker sized to its server start (so fixture
teardown still runs after a timeout) unless it already has one.  The session object :class:`Acceptance` (in
``config.stash``) runs points through :class:`~pytest_sskj.acceptance.runner.PointRunner`, builds verdicts and
announces them with ``pytest_sskj_verdict``; the terminal summary prints the users' table from the point store.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.acceptance import matrix
from pytest_sskj.acceptance.agreement import AgreementVerdict
from pytest_sskj.acceptance.comparability import fact_differences, spec_differences
from pytest_sskj.acceptance.compare import DECIDED, RepeatSample, Verdict, compare
from pytest_sskj.acceptance.curve import Curve, build_curve
from pytest_sskj.acceptance.live import LiveLine
from pytest_sskj.acceptance.matrix import Comparison, ConfigKey, CurveKey, Point
from pytest_sskj.acceptance.runner import PointOutcome, PointRunner
from pytest_sskj.acceptance.search import SearchResult, highest_met, judge, search
from pytest_sskj.acceptance.sequential import Design, log_spread_pct, plan_line, repeat_seconds, run_sequential
from pytest_sskj.acceptance.store import PointStore, StepLog, atomic_write_json, jsonable
from pytest_sskj.acceptance.summary import overhead_line, summary_lines  # imported early, not at session end
from pytest_sskj.bench.metrics import percentile_note, percentile_problems
from pytest_sskj.engines import get_engine
from pytest_sskj.settings import Settings
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

__all__ = ["ACCEPTANCE_KEY", "PARAMS", "Acceptance", "SiteDefaults", "get_acceptance", "sskj_acceptance"]

ACCEPTANCE_KEY = pytest.StashKey["Acceptance"]()
SESSION_T0_KEY = pytest.StashKey[float]()
"""``time.perf_counter()`` at session start: the overhead line compares the session's wall time with the
benchmark time the points measured."""
"""The session's :class:`Acceptance` object."""

PARAMS = (
    "sskj_point",
    "sskj_slo_config",
    "sskj_baseline_config",
    "sskj_comparison",
    "sskj_curve",
    "sskj_search_config",
)
"""The parameters this plugin generates, in the order their tests run."""

_VERDICT_DIR = "verdicts"


@dataclass(frozen=True)
class SiteDefaults:
    """Report labels a site sets in ``acceptance/conftest.py`` (fixture ``sskj_site``)."""

    feature: str = "MoE backend"
    story: str = "prefill throughput"


class Acceptance:
    """Per-session acceptance state: the point runner, the verdicts, the live line."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.store = PointStore(settings.run_dir)
        self.live = LiveLine.for_config(config)
        self.runner = PointRunner(config, settings, self.store, progress=self.live.update)
        self.verdicts: list[dict[str, Any]] = []
        self.extent: dict[str, int] = {}
        """Repeats measured per configuration id (more than ``--repeats`` where the sequential design added)."""
        self.agreements: dict[str, AgreementVerdict | None] = {}
        """Output-agreement part of each comparison (by comparison id); ``None`` when agreement is off."""

    # -- infrastructure ------------------------------------------------------------------------------
    def pool(self) -> Any:
        if self.settings.deployment is not None:  # groups + router, started together
            from pytest_sskj.deploy.plugin import get_deployment_pool

            return get_deployment_pool(self.config)
        from pytest_sskj.server.fixtures import get_pool

        return get_pool(self.config)

    def bench(self) -> Any:
        from pytest_sskj.bench.runner import run_bench

        return run_bench

    def epic(self) -> str:
        """``<model> <platform>`` (``Kimi-K3 pro6000``); the embedded engine is ``embedded-tiny cpu``."""
        s = self.settings
        model = s.model_name or (Path(s.model_path).name if s.model_path else f"{s.engine}-tiny")
        platform = s.platform or get_engine(s.engine).platform or "unknown-platform"
        return f"{model} {platform}"

    def label(self, site: SiteDefaults, *, story: str | None = None, **params: Any) -> None:
        """Allure labels (epic, feature, story) and parameters of the current test (no-ops without allure)."""
        from pytest_sskj.report import allure

        allure.labels(epic=self.epic(), feature=site.feature, story=story or site.story)
        allure.parameters(**params)

    # -- points --------------------------------------------------------------------------------------
    def serve(self, point: Point, item: pytest.Item | None = None) -> PointOutcome:
        """Measure ``point`` once per session (or reuse it from ``--resume`` / another xdist worker)."""
        from filelock import FileLock

        if point.id in self.runner.outcomes:
            return self.runner.outcomes[point.id]
        test_id = item.nodeid if item is not None else f"acceptance/test_serving.py::test_serving[{point.id}]"
        lock = FileLock(str(self.store.point_dir(point.id) / ".lock"))
        with lock:
            if hasattr(self.config, "workerinput") and not self.settings.resume:
                found = self.store.read(point.id)
                if found is not None and found[0].get("status") != "not_run":
                    out = PointOutcome(
                        point,
                        found[0],
                        found[1],
                        resumed=True,
                        message="\n".join(map(str, found[0].get("reasons") or [])),
                    )
                    self.runner.outcomes[point.id] = out
                    return out
            try:
                outcome = self.runner.run(point, self.pool(), self.bench(), test_id=test_id)
            finally:
                self.live.finish()
        if item is not None and not outcome.resumed:
            self._attach_server(item, point)
        return outcome

    def _attach_server(self, item: pytest.Item, point: Point) -> None:
        """Let the server fixtures' report hook attach log findings / tails of this test's window."""
        try:
            from pytest_sskj.server.fixtures import SERVER_KEY
        except ImportError:
            return
        pool = self.pool()
        spec = self.runner.spec_for(point)
        server = getattr(pool, "running", {}).get(spec)
        if server is not None and SERVER_KEY not in item.stash:
            item.stash[SERVER_KEY] = (server, server.mark())

    def repeats(self, key: ConfigKey, n: int | None = None) -> list[PointOutcome]:
        """The first ``n`` repeats of ``key`` (default: every repeat measured so far, at least ``--repeats``),
        measured now if no test has run them yet; repeats beyond ``--repeats`` are the sequential design's."""
        s = self.settings
        n = n or max(s.repeats, self.extent.get(key.id, 0))
        self.extent[key.id] = max(n, self.extent.get(key.id, 0))
        last = self.design().last
        return [self.serve(key.point(r, s.repeats if r <= s.repeats else last)) for r in range(1, n + 1)]

    def design(self) -> Design:
        """The sequential design of every comparison: ``--repeats`` .. ``--sskj-max-repeats`` repeats per side."""
        s = self.settings
        return Design(s.repeats, max(s.repeats, s.max_repeats or s.repeats))

    # -- verdicts ------------------------------------------------------------------------------------
    def record(self, verdict: dict[str, Any]) -> None:
        """Keep, persist and announce a verdict (``kind``, ``passed``, ``message`` + kind-specific keys)."""
        if verdict.get("kind") == "comparison":
            verdict = self.with_agreement(verdict)
        verdict = jsonable(verdict)
        verdict.setdefault("run_id", self.settings.run_id)
        unverified = self.config.stash[EXTRA_KEY].get("target_labels_note")  # identity/plugin.py: --target-url
        if unverified:
            verdict.update(labels_not_verified=unverified, message=f"{verdict.get('message', '')}; {unverified}")
        self.verdicts.append(verdict)
        name = f"{verdict.get('kind')}-{verdict.get('id')}.json"
        atomic_write_json(self.settings.run_dir / _VERDICT_DIR / name, verdict)
        self.config.hook.pytest_sskj_verdict(config=self.config, verdict=dict(verdict))

    def ordering(self) -> str:
        """How the repeats of a comparison were ordered (recorded in every comparison verdict)."""
        if matrix.interleaves(self.settings):
            return "interleaved A B A B (repeat r of every arm before repeat r+1; restarts are cheap)"
        return (
            "grouped by server: every repeat of one arm, then the next (a restart is expensive); slow drift "
            "between the blocks is not separated from the backend difference"
        )

    def _sides(self, comp: Comparison, n: int | None = None) -> tuple[list[PointOutcome], list[PointOutcome]]:
        if n is None:  # the pairs both sides have
            n = min(
                self.extent.get(c.id, self.settings.repeats) for c in (comp.baseline_config(), comp.candidate_config())
            )
        return self.repeats(comp.baseline_config(), n), self.repeats(comp.candidate_config(), n)

    def _verdict(
        self, comp: Comparison, noise_floor: float | None, n: int | None = None, confidence: float = 0.95
    ) -> tuple[Verdict | None, str]:
        base, cand = self._sides(comp, n)
        usable_b = [o for o in base if o.passed]
        usable_c = [o for o in cand if o.passed]
        missing = [o for o in (*base, *cand) if not o.passed]
        if not usable_b or not usable_c:
            why = "; ".join(f"{o.point.id}: {o.message.splitlines()[0] if o.message else o.status}" for o in missing)
            return None, why
        v = compare(
            comp.baseline,
            comp.candidate,
            [RepeatSample.from_row(o.row) for o in usable_b],
            [RepeatSample.from_row(o.row) for o in usable_c],
            margin_pct=0.0 if comp.is_control else self.settings.margin_pct,
            confidence=confidence,
            noise_floor_pct=noise_floor,
            ordering=self.ordering(),
            incomparable=self.incomparable(comp),
        )

        if missing:
            note = f"{len(missing)} repeat(s) did not pass and are left out: " + ", ".join(o.point.id for o in missing)
            v = replace(v, notes=(*v.notes, note))
        if v.outcome == "inconclusive":
            v = replace(v, plan=self.plan(usable_b, usable_c))
        return v, ""

    def plan(self, base: Sequence[PointOutcome], cand: Sequence[PointOutcome]) -> str:
        """The power planner's line for an inconclusive comparison of ``base`` and ``cand`` repeats."""
        s = self.settings
        vals = [[o.row.get("input_throughput") for o in side] for side in (base, cand)]
        spreads = [log_spread_pct([float(x) for x in side if isinstance(x, (int, float))]) for side in vals]
        observed = max((x for x in spreads if x is not None), default=None)
        spread = s.plan_spread_pct if s.plan_spread_pct is not None else observed
        secs = repeat_seconds([o.row for o in (*base, *cand)])
        return plan_line(s.plan_difference_pct, spread, observed=s.plan_spread_pct is None, repeat_s=secs)

    def incomparable(self, comp: Comparison) -> list[str]:
        """Why the two sides of ``comp`` cannot be compared: specs or recorded engine facts that differ."""
        from pytest_sskj.acceptance.matrix import Point

        pb = Point(comp.baseline, comp.chunk, comp.concurrency, 1, 1)
        pc = Point(comp.candidate, comp.chunk, comp.concurrency, 1, 1)
        sb, sc = self.runner.spec_for(pb), self.runner.spec_for(pc)
        out = [f"server spec {d}" for d in spec_differences(sb.as_dict(), sc.as_dict())]
        from pytest_sskj.stash import MANIFEST_KEY

        manifest = self.config.stash.get(MANIFEST_KEY, None)
        engines = dict(getattr(manifest, "data", {}).get("engines", {})) if manifest is not None else {}
        fb, fc = engines.get(sb.label), engines.get(sc.label)
        if isinstance(fb, dict) and isinstance(fc, dict) and sb.label != sc.label:
            out += [f"engine fact {d}" for d in fact_differences(fb, fc)]
        return out

    def noise_floor(self, comp: Comparison) -> float | None:
        """The run's A/A difference (absolute, %, primary metric) at ``comp``'s chunk and concurrency."""
        floors = []
        for ctl in matrix.comparisons(self.settings):
            if not ctl.is_control or (ctl.chunk, ctl.concurrency) != (comp.chunk, comp.concurrency):
                continue
            v, _ = self._verdict(ctl, None)
            if v is not None and v.primary.delta_pct is not None:
                floors.append(abs(v.primary.delta_pct))
        return max(floors) if floors else None

    def compare(self, comp: Comparison, test_id: str = "") -> tuple[Verdict | None, str]:
        """Run (or reuse) both sides and compare; ``(None, why)`` when a side has no passed repeat.

        An A/A control (:attr:`Comparison.is_control`) passes when it claims no difference and records its
        measured difference as the run's noise floor; a candidate must clear ``max(margin, noise floor)``.
        """
        floor = None if comp.is_control else self.noise_floor(comp)
        why: list[str] = []

        def judge_at(n: int, confidence: float) -> Verdict | None:
            v, w = self._verdict(comp, floor, n, confidence)
            why.append(w)
            return v

        def extend(n: int) -> None:  # one more interleaved A/B pair: baseline repeat n, then candidate repeat n
            self.repeats(comp.baseline_config(), n)
            self.repeats(comp.candidate_config(), n)

        v = run_sequential(self.design(), judge_at, extend)
        if v is None:
            return None, why[-1]
        enforced = comp.is_control or self.settings.compare_expect == "better"
        passed = v.outcome not in DECIDED if comp.is_control else v.outcome == "better"
        self.record(
            {
                "kind": "comparison",
                "id": comp.id,
                "test_id": test_id,
                "passed": passed if enforced else None,
                "enforced": enforced,
                "control": comp.is_control,
                "baseline": comp.baseline,
                "candidate": comp.candidate,
                "chunk": comp.chunk,
                "concurrency": comp.concurrency,
                **v.as_dict(),
                **({"noise_floor_pct": abs(v.primary.delta_pct or 0.0)} if comp.is_control else {}),
            }
        )
        return v, ""

    def with_agreement(self, verdict: dict[str, Any]) -> dict[str, Any]:
        """A comparison ``verdict`` with its output-agreement part (key ``agreement``, message appended; a failed
        agreement fails the comparison).  The statistics are left as they are.  Off: ``verdict`` unchanged."""
        from pytest_sskj.acceptance.agreement import judge_dirs, probe_repeat

        s = self.settings
        if s.agreement_prompts <= 0:
            return verdict
        base, cand = str(verdict["baseline"]), str(verdict["candidate"])
        chunk, conc = verdict.get("chunk"), int(verdict["concurrency"])

        def point_dir(backend: str, role: str) -> Path:
            return self.store.point_dir(Point(backend, chunk, conc, probe_repeat(role, s.repeats), s.repeats).id)

        outcomes = [*self.repeats(ConfigKey(base, chunk, conc)), *self.repeats(ConfigKey(cand, chunk, conc))]
        walls = [o.row.get("wall_s") for o in outcomes]
        aa_r = probe_repeat("aa", s.repeats)
        where = "another server run" if matrix.interleaves(s) and aa_r != 1 else "the same server"
        agr = judge_dirs(
            point_dir(base, "ab"),
            point_dir(cand, "ab"),
            point_dir(base, "aa"),
            s.agreement_min,
            baseline=base,
            candidate=cand,
            aa_what=f"{base} repeat 1 at C={conc} vs repeat {aa_r} at C=1, {where}",
            measured_s=sum(float(w) for w in walls if isinstance(w, (int, float))),
        )
        self.agreements[str(verdict.get("id"))] = agr
        out = {**verdict, "agreement": agr.as_dict(), "message": f"{verdict.get('message', '')}; {agr.message}"}
        if agr.passed is False:
            out["passed"] = False
        return out

    def curve(self, key: CurveKey, test_id: str = "") -> Curve:
        rows = {cfg.chunk: [o.row for o in self.repeats(cfg)] for cfg in key.configs()}
        c = build_curve(key.backend, key.concurrency, rows, expected_best=self.settings.expect_best_chunk)
        self.record({"kind": "chunk_curve", "id": key.id, "test_id": test_id, **c.as_dict()})
        return c

    def slo(self, key: ConfigKey, test_id: str = "") -> tuple[bool | None, str, list[dict[str, Any]]]:
        """Judge every passed repeat of ``key`` against the SLO; ``(None, why, [])`` when none passed."""
        s = self.settings
        outs = self.repeats(key)
        passed = [o for o in outs if o.passed]
        if not passed:
            return (
                None,
                "; ".join(f"{o.point.id}: {o.message.splitlines()[0] if o.message else o.status}" for o in outs),
                [],
            )
        lines, gates, all_ok = [], [], True
        for o in passed:
            ok, results = judge(s.slo, o.row, osl=(key.shape or (s.isl, s.osl))[1])
            all_ok = all_ok and ok
            n = o.row.get("completed")
            basis = [percentile_note(r.gate.metric, n if isinstance(n, int) else None) for r in results]
            lines.append(
                f"{o.point.id}: "
                + ", ".join(r.sentence() + (f" ({b})" if b else "") for r, b in zip(results, basis, strict=True))
            )
            gates += [
                {
                    "metric": r.gate.metric,
                    "op": r.gate.op,
                    "threshold": r.gate.threshold,
                    "value": r.value,
                    "passed": r.passed,
                    "repeat": o.point.repeat,
                }
                for r in results
            ]
        unsupported = percentile_problems(s.slo, s.requests)
        message = "; ".join(lines) + "".join(f"; WARNING: {w}" for w in unsupported)
        self.record(
            {
                "kind": "slo",
                "warnings": unsupported,
                "id": key.id,
                "test_id": test_id,
                "passed": all_ok,
                "backend": key.backend,
                "chunk": key.chunk,
                "concurrency": key.concurrency,
                "gates": gates,
                "message": message,
            }
        )
        return all_ok, message, gates

    def search(self, backend: str, chunk: int | None, test_id: str = "") -> SearchResult:
        """The adaptive concurrency search of one (backend, chunk); steps on disk, resumable."""
        s = self.settings
        cfg = f"{backend}-chunk{chunk}"
        log = StepLog(s.run_dir / "search" / cfg / f"steps-{s.search}.jsonl")
        known = (
            {int(st["concurrency"]): st["metrics"] for st in log.read() if isinstance(st.get("metrics"), dict)}
            if s.resume
            else {}
        )

        def measure(c: int) -> dict[str, Any]:
            out = self.serve(Point(backend, chunk, c, 0, 0, kind="search"))
            metrics: dict[str, Any] = {
                k: v for k, v in out.row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            metrics["ok"] = out.passed
            metrics["client_bound"] = bool(out.row.get("client_bound"))
            if not out.passed:
                metrics["error"] = (out.message.splitlines() or [out.status])[0]
            return metrics

        result = search(
            s.search,
            measure,
            s.slo,
            osl=s.osl,
            max_c=s.search_max,
            floor=s.search_floor,
            known=known,
            on_step=lambda st: log.append(st.as_dict()),
        )
        rows = [r for r in self.stored_rows() if r.get("kind", "serve") == "serve"]
        met = highest_met([r for r in rows if r.get("backend") == backend and r.get("chunk") == chunk])
        if met is not None and (result.best is None or met > result.best):
            note = f"the matrix points met the SLO up to C={met} (the highest concurrency meeting the SLO overall)"
            result = replace(result, notes=(*result.notes, note))
        self.record(
            {
                "kind": "search",
                "id": cfg,
                "test_id": test_id,
                "backend": backend,
                "chunk": chunk,
                "best_concurrency": result.best,
                "highest_slo_met_concurrency": max(x for x in (met, result.best) if x is not None)
                if (met, result.best) != (None, None)
                else None,
                **result.as_dict(),
            }
        )
        return result

    # -- summary -------------------------------------------------------------------------------------
    def stored_verdicts(self) -> list[dict[str, Any]]:
        d = self.settings.run_dir / _VERDICT_DIR
        if not d.is_dir():
            return list(self.verdicts)
        out = []
        for p in sorted(d.glob("*.json"), key=lambda p: p.stat().st_mtime):
            try:
                v = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(v, dict):
                out.append(v)
        return out

    def stored_rows(self) -> list[dict[str, Any]]:
        rows = []
        for pid in self.store.ids():
            found = self.store.read(pid)
            if found is not None and found[0].get("run_id") in (self.settings.run_id, None):
                rows.append(found[0])
        return rows


def get_acceptance(config: pytest.Config) -> Acceptance:
    """The session's :class:`Acceptance` (created on first use)."""
    acc = config.stash.get(ACCEPTANCE_KEY, None)
    if acc is None:
        acc = Acceptance(config, config.stash[SETTINGS_KEY])
        config.stash[ACCEPTANCE_KEY] = acc
    return acc


@pytest.fixture(scope="session")
def sskj_acceptance(pytestconfig: pytest.Config) -> Acceptance:
    """The acceptance session object: ``serve(point)``, ``compare``, ``curve``, ``slo``, ``search``."""
    return get_acceptance(pytestconfig)


@pytest.fixture(scope="session")
def sskj_site() -> SiteDefaults:
    """Report labels of this site; ``acceptance/conftest.py`` overrides this default."""
    return SiteDefaults()


# -- hooks -------------------------------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    unsupported = percentile_problems(settings.slo, settings.requests)
    if unsupported and settings.percentile_strict:
        raise pytest.UsageError(
            "--sskj-slo: " + "; ".join(unsupported) + "\n  accepted: percentile gates the request count supports"
            "\n  Hint: raise --requests, gate a lower percentile, or drop --sskj-percentile-strict"
        )
    if settings.dry_run:
        return
    from pytest_sskj.acceptance.resume import guard_resume, write_fingerprint
    from pytest_sskj.recording import records

    if not settings.resume:
        if not hasattr(config, "workerinput") and records(config):
            write_fingerprint(settings)
        return
    d = settings.reports_dir / settings.resume
    if not (d / "points").is_dir() and not (d / "search").is_dir():
        known = sorted((p.name for p in settings.reports_dir.glob("*") if (p / "points").is_dir()), reverse=True)
        hint = (
            f"runs with points under {settings.reports_dir}: {', '.join(known[:5])}"
            if known
            else (f"no run under {settings.reports_dir} has finished points; check --reports-dir")
        )
        raise pytest.UsageError(f"--resume {settings.resume}: {d} holds no finished points to resume\n  Hint: {hint}")
    diffs = guard_resume(settings)
    if diffs:
        raise pytest.UsageError(
            f"--resume {settings.resume}: the run measured something else; its points cannot be reused:\n"
            + "".join(f"  - {x}\n" for x in diffs)
            + "  accepted: the run's own settings (see its measurement.json)\n"
            + "  Hint: drop the changed options to continue the run, or start a new run without --resume"
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    settings = metafunc.config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    names = set(metafunc.fixturenames)
    if "sskj_point" in names:
        points: Sequence[Point | None] = matrix.execution_order(
            matrix.build_points(settings), interleave=matrix.interleaves(settings)
        ) or [None]
        metafunc.parametrize("sskj_point", points, ids=[p.id if p else "no-points" for p in points])
    # an empty list is one ``None`` parameter, deselected as not applicable (see pytest_collection_modifyitems)
    for name in ("sskj_slo_config", "sskj_baseline_config"):
        if name in names:
            cfgs: Sequence[ConfigKey | None] = matrix.configs(settings) or [None]
            metafunc.parametrize(name, cfgs, ids=[c.id if c else "no-points" for c in cfgs])
    if "sskj_comparison" in names:
        comps: Sequence[Comparison | None] = matrix.comparisons(settings) or [None]
        metafunc.parametrize("sskj_comparison", comps, ids=[c.id if c else "no-candidate" for c in comps])
    if "sskj_curve" in names:
        curves: Sequence[CurveKey | None] = matrix.curves(settings) or [None]
        metafunc.parametrize("sskj_curve", curves, ids=[c.id if c else "no-points" for c in curves])
    if "sskj_search_config" in names:
        sc: Sequence[tuple[str, int | None] | None] = matrix.search_configs(settings) or [None]
        sc_ids = [f"{x[0]}{'' if x[1] is None else f'-chunk{x[1]}'}" if x else "none" for x in sc]
        metafunc.parametrize("sskj_search_config", sc, ids=sc_ids)


def _param_rank(item: pytest.Item) -> int:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return -1
    for i, name in enumerate(PARAMS):
        if name in callspec.params:
            return i
    return -1


def _budget_s(settings: Settings, item: pytest.Item) -> float:
    """pytest-timeout's bound of one acceptance test: its server start plus its points, each point allowed
    the engine's budget or, if longer, the stall detection and teardown (the stall verdict comes first)."""
    per_point = max(get_engine(settings.engine).point_budget_s, settings.stall_timeout_s + 30.0)
    rank = _param_rank(item)
    points = 1 if rank <= 0 else 2 * max(settings.repeats, settings.max_repeats or 0) * max(1, len(settings.chunks))
    if rank == PARAMS.index("sskj_search_config"):
        points = 16
    return settings.health_timeout_s * (1 if rank <= 0 else 2) + per_point * points


def _deselect_not_applicable(config: pytest.Config, settings: Settings, items: list[pytest.Item]) -> None:
    """Deselect the verdict tests that do not apply to this run (:func:`matrix.not_applicable`) and list them
    with their reason (``NOT_APPLICABLE_KEY``: outcomes.json and the release mark), as the baseline gate is."""
    from pytest_sskj.stash import NOT_APPLICABLE_KEY

    gone: list[pytest.Item] = []
    na = config.stash.setdefault(NOT_APPLICABLE_KEY, {})
    for it in items:
        params = getattr(getattr(it, "callspec", None), "params", {})
        for name, value in params.items():
            why = matrix.not_applicable(settings, name, value)
            if why is not None:
                na[it.nodeid] = why
                gone.append(it)
                break
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [it for it in items if it not in gone]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    _deselect_not_applicable(config, settings, items)
    order = {id(it): i for i, it in enumerate(items)}
    items.sort(key=lambda it: (_param_rank(it), order[id(it)]))
    timeout_on = config.pluginmanager.hasplugin("timeout") and hasattr(signal, "SIGALRM")
    cli_timeout = config.getoption("timeout", None) if timeout_on else None
    xdist_on = config.pluginmanager.hasplugin("xdist")
    for it in items:
        if _param_rank(it) < 0:
            continue
        if timeout_on and it.get_closest_marker("timeout") is None:
            if cli_timeout is None:  # the point budget wins over an ini default such as timeout = 600
                it.add_marker(pytest.mark.timeout(_budget_s(settings, it), method="signal"))
            else:
                it.add_marker(pytest.mark.timeout(method="signal"))
        if xdist_on and _param_rank(it) == 0:
            point = it.callspec.params["sskj_point"]  # type: ignore[attr-defined]
            it.add_marker(pytest.mark.xdist_group(f"sskj-{point.backend}-chunk{point.chunk}"))


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_T0_KEY] = time.perf_counter()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings.dry_run:
        return
    acc = config.stash.get(ACCEPTANCE_KEY, None)
    if acc is None and not (settings.run_dir / "points").is_dir():
        return
    acc = acc or get_acceptance(config)
    rows = acc.stored_rows()
    lines = summary_lines(rows, acc.stored_verdicts(), baseline=settings.baseline, run_dir=str(settings.run_dir))
    if not lines:
        return
    overhead = session_overhead(config, rows)
    if overhead is not None:
        at = len(lines) - 1 if lines[-1].startswith("results:") else len(lines)
        lines.insert(at, overhead)
    lines[-1:-1] = (
        _evidence_lines(config, settings.run_dir, acc.stored_verdicts()) if lines[-1].startswith("results:") else []
    )
    terminalreporter.write_sep("=", "sskj acceptance summary (median of repeats)")
    for line in lines:
        terminalreporter.write_line(line)
    from pytest_sskj.report.conclusions import conclusion_lines  # computed from the run (h1-twin)

    for line in conclusion_lines(rows, acc.stored_verdicts(), settings.as_dict())[1:]:
        terminalreporter.write_line(line)


def session_overhead(config: pytest.Config, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The terminal's ``overhead:`` line (:func:`overhead_line`: server starts vs server runs, session wall vs
    measured benchmark time) of this session; ``None`` before the session started.  The wall time is taken at the
    first call of the session's end, so the terminal and ``summary.md`` (the reporter stores the line in the
    manifest's ``session``) show the same figures."""
    t0 = config.stash.get(SESSION_T0_KEY, None)
    if t0 is None:
        return None
    extra = config.stash.get(EXTRA_KEY, {})
    wall = extra.setdefault("session_wall_s", time.perf_counter() - t0)
    starts = getattr(extra.get("server_pool"), "starts", None)
    return overhead_line(rows, starts if isinstance(starts, dict) else None, float(wall))


def session_deselections(config: pytest.Config) -> tuple[int, list[str]]:
    """How many tests the session deselected and why (:func:`deselection_lines`), from the reporter's record
    of the selection: the terminal summary and ``summary.md`` both show these."""
    from pytest_sskj.acceptance.summary import deselection_lines

    reporter = config.stash.get(EXTRA_KEY, {}).get("reporter")
    selection = getattr(getattr(reporter, "outcomes", None), "selection", None) or {}
    na = selection.get("not_applicable") or {}
    deselected = sum(int(n) for n in (selection.get("deselected") or {}).values()) + len(na)
    return deselected, deselection_lines(na, deselected)


def _evidence_lines(config: pytest.Config, run_dir: Path, verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The long verdict evidence goes to ``verdicts.txt`` in the run directory (the terminal has the headlines),
    and every deselection of the session is explained."""
    from pytest_sskj.acceptance.summary import verdict_lines

    out: list[str] = []
    full = verdict_lines(verdicts)
    if full:
        try:
            from pytest_sskj.rundir import atomic_write_text

            atomic_write_text(run_dir / "verdicts.txt", "\n".join(full) + "\n")
            out.append(f"evidence of every verdict: {run_dir / 'verdicts.txt'} (and verdicts.json)")
        except OSError as exc:
            out.append(f"could not write {run_dir / 'verdicts.txt'}: {exc}")
    out += session_deselections(config)[1]
    return out


def point_param_ids(settings: Settings) -> list[str]:
    """The ``test_serving`` ids of ``settings`` in execution order (used by the dry run and tests)."""
    pts = matrix.execution_order(matrix.build_points(settings), interleave=matrix.interleaves(settings))
    return [p.id for p in pts]
