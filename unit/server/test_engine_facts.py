"""Engine facts for the manifest: versions read on node 0 through the launcher, never failing a launch."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from pytest_sskj.server.fixtures import engine_versions
from pytest_sskj.server.launcher import CommandResult
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.pool import RunningServer
from pytest_sskj.server.spec import ServerSpec


def test_versions_are_read_on_node_zero_with_the_real_local_launcher(tmp_path: Path) -> None:
    import torch

    server = RunningServer(spec=ServerSpec(engine="vllm", backend="auto"), urls=["http://127.0.0.1:1"])
    pool = SimpleNamespace(launcher=LocalLauncher())
    versions = engine_versions(pool, server)  # type: ignore[arg-type]
    assert versions.get("torch") == torch.__version__, versions
    assert "sglang" not in versions, "a package that is not importable on the node is left out"


class _Failing:
    kind = "scripted"

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        raise OSError(f"ssh to {node} refused")


def test_a_failed_query_is_recorded_not_raised() -> None:
    server = RunningServer(spec=ServerSpec(engine="sglang", backend="marlin", nodes=("601",)), urls=["http://601:1"])
    versions = engine_versions(SimpleNamespace(launcher=_Failing()), server)  # type: ignore[arg-type]
    assert versions == {"versions_error": "OSError: ssh to 601 refused"}


def test_cpu_engine_and_external_servers_need_no_query() -> None:
    emb = RunningServer(spec=ServerSpec(engine="embedded", backend="parallel"), urls=["http://127.0.0.1:1"])
    ext = RunningServer(spec=ServerSpec(engine="sglang", backend="marlin"), urls=["http://x:1"], external=True)
    assert engine_versions(SimpleNamespace(launcher=_Failing()), emb) == {}  # type: ignore[arg-type]
    assert engine_versions(SimpleNamespace(launcher=_Failing()), ext) == {}  # type: ignore[arg-type]
