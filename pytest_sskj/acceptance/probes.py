"""What a passed serving point asks of its server after its bench, while the server is still up.

Three probes, none of them measured (the next points' servers may be starting meanwhile):

* output agreement (:mod:`~pytest_sskj.acceptance.agreement`): the point's greedy probe prompts, when the run
  compares backends and this point holds one of the probe roles;
* accuracy (:mod:`~pytest_sskj.acceptance.accuracy`): the fixed questions, when this point is its arm's host;
* max context (:mod:`~pytest_sskj.acceptance.context`): the largest input served within the SLO, when this point
  is its arm's host (last: its longest requests may leave the server out of memory).

Their answers go into the point's folder; the verdicts read them there.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sskj.acceptance.matrix import Point
    from pytest_sskj.settings import Settings

__all__ = ["after_point"]


def after_point(settings: Settings, point: Point, url: str, out_dir: Path, model: str | None) -> None:
    """Run this passed point's probes against ``url`` (its server), writing into ``out_dir``."""
    agreement_probes(settings, point, url, out_dir, model)
    accuracy_questions(settings, point, url, out_dir, model)
    context_search(settings, point, url, out_dir, model)


def context_search(settings: Settings, point: Point, url: str, out_dir: Path, model: str | None) -> None:
    """The max-context search, if ``point`` is its arm's host (acceptance/context.py)."""
    from pytest_sskj.acceptance.accuracy import host_point
    from pytest_sskj.acceptance.context import ask_point, describe
    from pytest_sskj.engines import get_engine
    from pytest_sskj.report import allure

    s = settings
    if s.max_context is None or point != host_point(s, point.backend, point.layout):
        return
    with allure.step(describe(s)):
        ask_point(s, url, get_engine(s.engine).token_ids, out_dir, model)


def accuracy_questions(settings: Settings, point: Point, url: str, out_dir: Path, model: str | None) -> None:
    """The fixed questions, if ``point`` is its arm's host (acceptance/accuracy.py)."""
    from pytest_sskj.acceptance.accuracy import ask_point, host_point
    from pytest_sskj.engines import get_engine
    from pytest_sskj.report import allure

    s = settings
    if s.accuracy_set is None or point != host_point(s, point.backend, point.layout):
        return
    at = ",".join(map(str, s.accuracy_concurrencies))
    with allure.step(f"accuracy questions ({s.accuracy_questions} {s.accuracy_set.name} questions at C={at})"):
        ask_point(s, url, get_engine(s.engine).token_ids, out_dir, model)


def agreement_probes(settings: Settings, point: Point, url: str, out_dir: Path, model: str | None) -> None:
    """Output agreement: this point's greedy probes, if it runs any."""
    from pytest_sskj.acceptance import agreement as agr
    from pytest_sskj.engines import get_engine
    from pytest_sskj.report import allure

    s = settings
    if point.kind != "serve" or s.agreement_prompts <= 0 or len(s.backends) < 2 or s.target_url:
        return
    from pytest_sskj.acceptance.matrix import speculative_pair

    roles = agr.probe_roles(  # a speculative arm of the baseline's backend answers one at a time too (its A/B)
        repeat=point.repeat,
        repeats=point.repeats,
        is_baseline=point.backend == s.baseline or speculative_pair(point.backend, s.baseline),
        concurrency=point.concurrency,
    )
    if not roles:
        return
    probes = agr.probe_set(s.seed, s.agreement_prompts, isl=s.isl, osl=s.osl)
    what = ", ".join(f"{r} at C={c}" for r, c in roles)
    with allure.step(f"output agreement probes ({len(probes.prompts)} greedy prompts: {what})"):
        agr.run_roles(
            url,
            get_engine(s.engine).token_ids,
            probes,
            roles,
            out_dir,
            model=model,
            point_id=point.id,
        )
