"""The dry-run plan: the collected test matrix and, for every server spec, each node's exact command."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pytest

from pytest_sskj.acceptance.accuracy import dry_run_lines as accuracy_lines
from pytest_sskj.acceptance.budget import dry_run_lines as budget_lines
from pytest_sskj.acceptance.context import dry_run_lines as context_lines
from pytest_sskj.acceptance.sequential import dry_run_lines
from pytest_sskj.engines import node_commands
from pytest_sskj.redact import redact_url
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.settings import Settings
from pytest_sskj.stash import NOT_APPLICABLE_KEY

if TYPE_CHECKING:
    from pytest_sskj.options import Option

__all__ = ["overridden_env", "parallel_text", "plan_lines", "planned_specs", "shape_text"]


def planned_specs(settings: Settings) -> list[ServerSpec]:
    """Every distinct server spec the matrix would launch, in launch order (backend-major)."""
    from pytest_sskj.acceptance import matrix

    specs: list[ServerSpec] = []
    for lay, _ in matrix.dimensions(settings):
        for chunk in tuple(settings.chunks) or (None,):  # none given: one server with the engine's own chunk
            for backend in matrix.arms(settings.backends):
                point = matrix.Point(backend, chunk, 0, 0, 0, layout=lay)
                spec = matrix.spec_for(settings, point)
                if spec not in specs:
                    specs.append(spec)
    return specs


def _dimension_lines(s: Settings) -> list[str]:
    """The layout x shape matrix, when the run has one."""
    out = []
    if s.layouts:
        out.append("layouts: " + ", ".join(f"{lay.name} ({lay.sizes})" for lay in s.layouts))
    if len(s.shapes) > 1 or s.layouts:
        out.append(f"shapes ({s.shape_mode}): " + ", ".join(f"{i}->{o}" for i, o in s.shapes))
    if s.layouts:
        cells = len(s.layouts) * len(s.shapes) * len(s.backends) * max(1, len(s.chunks))
        out.append(
            f"recommendation: {len(s.layouts)} layout(s) x {len(s.shapes)} shape(s) x {len(s.backends)} backend(s) "
            f"x {max(1, len(s.chunks))} chunk(s) = {cells} cell(s); winner = highest {s.recommend_metric} "
            f"meeting the SLO" + (f"; expected winner {s.expect_layout}" if s.expect_layout else "")
        )
    return out


def overridden_env(s: Settings, environ: Mapping[str, str], options: Sequence[Option]) -> str | None:
    """A note naming the ``SSKJ_*`` variables set in the environment that the command line overrides (CLI > env:
    the documented order, said aloud so that a stale export is seen); ``None`` when there are none."""
    names = [o.env for o in options if s.sources.get(o.dest) == "cli" and environ.get(o.env, "").strip()]
    if not names:
        return None
    return f"the command line overrides {', '.join(names)} from the environment (CLI > SSKJ_* > ini > profile)"


def shape_text(s: Settings) -> str:
    """``ISL 16384 / OSL 1``, and why when the run got the neutral shape (no shape given, and the engine's
    defaults carry another job's: :func:`pytest_sskj.profile.settle_matrix`)."""
    text = f"ISL {s.isl} / OSL {s.osl}"
    if "neutral" in (s.sources.get("isl"), s.sources.get("osl")):
        from pytest_sskj.engines import get_engine
        from pytest_sskj.profile import neutral_shape_note

        text += f" ({neutral_shape_note(get_engine(s.engine))})"
    return text


def parallel_text(s: Settings) -> str:
    """The run's parallel layout as the header and the plan show it: each deployment group's own sizes (a PD run's
    prefill and decode differ), the layouts of a layout matrix, or the run's one TP/EP/DP/PP."""
    if s.deployment is not None:
        named = (g.name if g.name == g.role else f"{g.name} ({g.role})" for g in s.deployment.groups)
        return "per group: " + "; ".join(f"{n} {g.sizes}" for n, g in zip(named, s.deployment.groups, strict=True))
    if s.layouts:
        return "per layout: " + ", ".join(f"{lay.name} {lay.sizes}" for lay in s.layouts)
    return f"TP{s.tp}/EP{s.ep}/DP{s.dp}/PP{s.pp}"


def _backends(s: Settings) -> str:
    if s.deployment is not None:
        per = ", ".join(
            f"{g.name} {g.backend or 'engine default'}" + (f" chunk {g.chunk}" if g.chunk else "")
            for g in s.deployment.groups
        )
        return f"backends: per group ({per}); one fixed deployment, no A/B"
    return f"backends: {','.join(s.backends)} (baseline {s.baseline})"


def plan_lines(config: pytest.Config, settings: Settings, items: Sequence[pytest.Item]) -> list[str]:
    """The plan as printable lines (no secrets: environment values of secret names are redacted)."""
    s = settings
    lines = [
        "pytest-sskj dry run: nothing is launched",
        f"run id: {s.run_id}    reports: {s.run_dir_display}",
        f"engine: {s.engine}    launcher: {s.launcher}    placement: {s.placement}    "
        f"nodes: {','.join(s.nodes) or 'local'}",
        f"parallel: {parallel_text(s)}    shape: {shape_text(s)}    "
        f"requests {s.requests} x repeats {s.repeats}, warmup {s.warmup}",
        f"{_backends(s)}    chunks: {','.join(map(str, s.chunks)) or 'engine default'}    "
        f"concurrency: {','.join(map(str, s.concurrencies)) or 'found by the search'}",
        f"SLO: {', '.join(map(str, s.slo)) or 'none'}    search: {s.search}",
        *_dimension_lines(s),
        *dry_run_lines(s),
        *accuracy_lines(s),
        *context_lines(s),
        *budget_lines(s),
        "",
        f"test matrix ({len(items)} tests):",
    ]
    lines += [f"  {item.nodeid}" for item in items]
    na = config.stash.get(NOT_APPLICABLE_KEY, {})
    if na:
        lines.append(f"not applicable ({len(na)} tests, deselected and listed in outcomes.json and a release mark):")
        lines += [f"  {nodeid}: {why}" for nodeid, why in na.items()]
    lines.append("")
    if s.target_url:
        lines.append(f"server: already running at {redact_url(s.target_url)} (--target-url): no launch commands")
        return lines
    if s.deployment is not None:
        from pytest_sskj.deploy.deployment import deployment_plan_lines

        return lines + deployment_plan_lines(config, s)
    specs = planned_specs(s)
    lines.append(f"servers ({len(specs)} specs; each started once, stopped before the next needs its GPUs):")
    for spec in specs:
        cmds = config.hook.pytest_sskj_server_commands(config=config, spec=spec) or node_commands(spec)
        layout = dict(spec.labels).get("layout")
        lines.append(f"  [{layout + ' ' if layout else ''}{spec.label}]  key {spec.key()}")
        for cmd in cmds:
            role = (
                "rank 0, serves HTTP"
                if cmd.serves_http and cmd.rank == 0
                else ("replica" if cmd.serves_http else f"rank {cmd.rank}")
            )
            lines.append(f"    {cmd.node} ({role}): {cmd.shell()}")
    return lines
