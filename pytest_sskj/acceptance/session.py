"""The acceptance session object: :class:`Acceptance` runs points, builds verdicts and keeps them.

One per session, in ``config.stash`` (:func:`get_acceptance`): it serves points through
:class:`~pytest_sskj.acceptance.runner.PointRunner` (repeats, the sequential A/B design), builds the comparison,
chunk-curve, SLO and search verdicts from the point store, records them (``verdicts/``, ``pytest_sskj_verdict``)
and reads back the stored rows and verdicts for the terminal summary.  The hooks that parametrize the suite and
print the summary are in :mod:`pytest_sskj.acceptance.plugin`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.acceptance import accuracy as acc
from pytest_sskj.acceptance import context, matrix
from pytest_sskj.acceptance.accuracy import AccuracyComparison, AccuracyKey
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
from pytest_sskj.bench.metrics import percentile_note, percentile_problems
from pytest_sskj.engines import get_engine
from pytest_sskj.settings import Settings
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

__all__ = ["ACCEPTANCE_KEY", "Acceptance", "SiteDefaults", "get_acceptance"]

ACCEPTANCE_KEY = pytest.StashKey["Acceptance"]()
"""The session's :class:`Acceptance` object."""

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
        if self.settings.deployment is not None and self.settings.target_url is None:  # groups + router, together
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
    def serve(
        self, point: Point, item: pytest.Item | None = None, *, within: pytest.Item | None = None
    ) -> PointOutcome:
        """Measure ``point`` once per session (or reuse it from ``--resume`` / another xdist worker).
        ``item``: the test this point is (its id, its server's log window); ``within``: the test that measures
        it among others (a search step), whose next tests tell which servers come next."""
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
                then, after = self._next_points(item or within)
                outcome = self.runner.run(point, self.pool(), self.bench(), test_id=test_id, then=then, after=after)
            finally:
                self.live.finish()
        if item is not None and not outcome.resumed:
            self._attach_server(item, point)
        return outcome

    def _next_points(self, item: pytest.Item | None) -> tuple[Point | None, Point | None]:
        """The points the next two measuring tests after ``item`` start with, whose servers the pool may start
        early (``None``: none is known, or this is an xdist worker, whose next test the scheduler decides).

        Tests whose points are measured already (SLO gates, comparisons, curves: they read the serving
        points) are looked past, so the last serving point starts the first search's server; only where the
        sequential design cannot add repeat pairs in between (``--sskj-max-repeats`` above ``--repeats``).
        A search is one measuring test: its steps share one server, and the point after it is the next
        test's."""
        if item is None or hasattr(self.config, "workerinput"):
            return None, None
        items = item.session.items
        at = next((i for i, it in enumerate(items) if it is item), None)
        if at is None:
            return None, None
        found: list[Point | None] = []
        may_extend = self.design().sequential or self.settings.resume  # other points may come in between
        for later in items[at + 1 :]:
            callspec = getattr(later, "callspec", None)
            params = callspec.params if callspec is not None else {}
            nxt = params.get("sskj_point")
            if isinstance(nxt, Point) and nxt.id not in self.runner.outcomes:
                found.append(nxt)
            elif "sskj_search_config" in params:
                found.append(self._first_search_point(params["sskj_search_config"]))
            elif may_extend:  # a test that may measure more repeat pairs first
                break
            if len(found) == 2 or (found and found[-1] is None):
                break
        found += [None, None]  # (a ``None`` found ends the search: nothing is known after it)
        return found[0], found[1]

    def _first_search_point(self, config: object) -> Point | None:
        """The first step of the search test parametrized with ``config`` (``(backend, chunk)``)."""
        from pytest_sskj.acceptance.search import first_concurrency

        s = self.settings
        if s.search == "none" or s.resume or not isinstance(config, tuple) or len(config) != 2:
            return None
        backend, chunk = config
        return Point(backend, chunk, first_concurrency(s.search, s.search_max), 0, 0, kind="search")

    def _attach_server(self, item: pytest.Item, point: Point) -> None:
        """Let the server fixtures' report hook attach log findings / tails of this test's window."""
        try:
            from pytest_sskj.server.fixtures import SERVER_KEY
        except ImportError:
            return
        pool = self.pool()
        spec = self.runner.spec_for(point)
        server = pool.running.get(spec)  # ServerPool and DeploymentPool: the running servers by spec
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
        metrics = self.settings.compare_metrics
        v = compare(
            comp.baseline,
            comp.candidate,
            [RepeatSample.from_row(o.row, metrics) for o in usable_b],
            [RepeatSample.from_row(o.row, metrics) for o in usable_c],
            metrics=metrics,
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
        vals = [[o.row.get(s.compare_metrics[0]) for o in side] for side in (base, cand)]
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
        from pytest_sskj.server.speculative import without_speculative

        sb, sc = self.runner.spec_for(pb), self.runner.spec_for(pc)
        # the arms' speculative configurations are the compared dimension (like the backend), not a difference
        plain = [without_speculative(self.settings, c.backend, s).as_dict() for c, s in ((pb, sb), (pc, sc))]
        out = [f"server spec {d}" for d in spec_differences(*plain)]
        from pytest_sskj.stash import MANIFEST_KEY

        manifest = self.config.stash.get(MANIFEST_KEY, None)
        engines = dict(manifest.data.get("engines", {})) if manifest is not None else {}
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

    def agreement_gates(self, base: str, cand: str) -> tuple[Any, ...]:
        """The agreement gates of ``cand`` vs ``base``: ``--sskj-agreement-min``; where the two arms differ only in
        speculative decoding and the gates were not set explicitly, also ``identical_seq_frac>=1`` (greedy
        speculative decoding is lossless: the verified tokens are the target's own)."""
        from pytest_sskj.acceptance.agreement import AgreementGate

        s = self.settings
        if not matrix.speculative_pair(base, cand) or s.sources.get("agreement_min") not in (None, "default"):
            return tuple(s.agreement_min)
        kept = tuple(g for g in s.agreement_min if g.metric != "identical_seq_frac")
        return (*kept, AgreementGate("identical_seq_frac", 1.0))

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
        # speculative decoding vs none: both sides one request at a time (its own numerics, no batch composition)
        spec = matrix.speculative_pair(base, cand)
        roles = ("aa", "aa", "ab") if spec else ("ab", "ab", "aa")
        agr = judge_dirs(
            point_dir(base, roles[0]),
            point_dir(cand, roles[1]),
            point_dir(base, roles[2]),
            self.agreement_gates(base, cand),
            baseline=base,
            candidate=f"{cand} (both sides at C=1)" if spec else cand,
            aa_what=f"{base} repeat {aa_r} at C=1 vs repeat 1 at C={conc}, {where}"
            if spec
            else f"{base} repeat 1 at C={conc} vs repeat {aa_r} at C=1, {where}",
            measured_s=sum(float(w) for w in walls if isinstance(w, (int, float))),
            roles=roles,
        )
        self.agreements[str(verdict.get("id"))] = agr
        out = {**verdict, "agreement": agr.as_dict(), "message": f"{verdict.get('message', '')}; {agr.message}"}
        if agr.passed is False:
            out["passed"] = False
        return out

    def accuracy(self, key: AccuracyKey, test_id: str = "") -> dict[str, Any]:
        """The ``accuracy`` verdict of one arm at one accuracy concurrency (its host point served now if no test
        has yet), recorded like every verdict."""
        v = acc.score_verdict(key, *self._accuracy_side(key.backend, key.layout))
        self.record({**v, "test_id": test_id})
        return self.verdicts[-1]

    def accuracy_gate(self, comp: AccuracyComparison, test_id: str = "") -> dict[str, Any]:
        """The ``accuracy_gate`` verdict of a candidate arm against the baseline, recorded like every verdict."""
        sides = tuple(self._accuracy_side(b, comp.layout)[1:] for b in (comp.baseline, comp.candidate))
        self.record({**acc.gate_verdict(comp, self.settings, sides), "test_id": test_id})
        return self.verdicts[-1]

    def max_context(self, key: context.ContextKey, test_id: str = "") -> dict[str, Any]:
        """The ``max_context`` verdict of one arm (its host point served now if no test has yet), recorded."""
        host, folder, why = self._accuracy_side(key.backend, key.layout, ("max-context search", "--sskj-max-context"))
        self.record({**context.verdict(key, host, folder, why), "test_id": test_id})
        return self.verdicts[-1]

    def _accuracy_side(
        self, backend: str, layout: str | None, kept: tuple[str, str] = ("answers", "--sskj-accuracy-set")
    ) -> tuple[Point, Path, str]:
        """The arm's host point (served now if no test has yet), its folder, and why it kept no ``kept`` (what,
        and the option that asks for it)."""
        host = acc.host_point(self.settings, backend, layout)
        out = self.serve(host)
        return host, self.store.point_dir(host.id), acc.absent(host, out.status, out.message, *kept)

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

    def search(
        self, backend: str, chunk: int | None, test_id: str = "", *, item: pytest.Item | None = None
    ) -> SearchResult:
        """The adaptive concurrency search of one (backend, chunk); steps on disk, resumable.  ``item``: the
        search's test, whose next tests tell the pool which servers to start early."""
        s = self.settings
        cfg = f"{backend}-chunk{chunk}"
        log = StepLog(s.run_dir / "search" / cfg / f"steps-{s.search}.jsonl")
        known = (
            {int(st["concurrency"]): st["metrics"] for st in log.read() if isinstance(st.get("metrics"), dict)}
            if s.resume
            else {}
        )

        def measure(c: int) -> dict[str, Any]:
            out = self.serve(Point(backend, chunk, c, 0, 0, kind="search"), within=item)
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
