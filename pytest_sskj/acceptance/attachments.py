"""What a measured point attaches to the running test's Allure report: its steps, its launch commands, its
metrics and per-request samples, files and texts (no-ops without Allure; ``report.allure`` is imported only
when called)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sskj.bench.result import BenchOutcome
    from pytest_sskj.server.serving import Serving

__all__ = ["attach_commands", "attach_file", "attach_result", "attach_text", "step"]


def step(title: str) -> Any:
    from pytest_sskj.report import allure

    return allure.step(title)


def attach_file(path: Path, name: str) -> None:
    from pytest_sskj.report import allure

    allure.attach_file(path, name)


def attach_text(name: str, text: str) -> None:
    from pytest_sskj.report import allure

    allure.attach_text(name, text)


def attach_commands(server: Serving) -> None:
    from pytest_sskj.report import allure

    for c in server.commands:
        allure.attach_text(f"launch command {c.node} rank {c.rank}", c.shell())


def attach_result(result: BenchOutcome, samples: Mapping[str, Sequence[float]]) -> None:
    from pytest_sskj.report import allure

    allure.attach_json("metrics", dict(result.metrics))
    n = max((len(v) for v in samples.values()), default=0)
    if n:
        rows = [{k: (v[i] if i < len(v) else None) for k, v in samples.items()} for i in range(n)]
        allure.attach_csv("per-request samples (ms)", rows)
