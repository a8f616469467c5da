"""GPU checks before the pool launches a server: local leases from the shared ledger, remote pre-flight."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_preflight import ScriptedLauncher, node_answers

from pytest_sskj.errors import GpuUnavailable
from pytest_sskj.gpu.serving import server_prelaunch
from pytest_sskj.server.spec import ServerSpec

CONFTEST = """
from pytest_sskj.gpu.inventory import GpuInfo, Inventory

def pytest_sskj_gpu_inventory(config):
    gpus = tuple(
        GpuInfo(index=i, nvml_index=i, uuid=f"GPU-{i}", pci_bus_id=f"0000:0{i}:00.0", name="NVIDIA H200",
                capability=(9, 0), memory_total_mib=143771, memory_used_mib=0, memory_free_mib=143771)
        for i in range(2)
    )
    return Inventory(gpus=gpus, source="test")
"""


IDLE_8 = "\n".join(f"{i}, GPU-{i:04d}cccc-0000, NVIDIA H200, 9.0, 143771, 4" for i in range(8)) + "\n"
BUSY_8 = IDLE_8.replace("143771, 4\n", "143771, 90000\n", 1)


@pytest.fixture
def config(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.Config:
    monkeypatch.setenv("SSKJ_GPU_LEDGER_DIR", str(tmp_path / "ledger"))
    pytester.makeconftest(CONFTEST)
    return pytester.parseconfigure("--sskj-gpu-wait", "0")


def test_cpu_engine_needs_no_gpus(config: pytest.Config) -> None:
    env, release = server_prelaunch(config)(ServerSpec(engine="embedded", backend="parallel"), ScriptedLauncher({}))
    assert (tuple(env), release) == ((), None)


def test_local_gpu_server_leases_its_devices_and_releases_them_on_stop(config: pytest.Config) -> None:
    prelaunch = server_prelaunch(config)
    spec = ServerSpec(engine="sglang", backend="marlin", tp=2)
    env, release = prelaunch(spec, ScriptedLauncher({}))
    assert dict(env) == {"CUDA_VISIBLE_DEVICES": "GPU-0,GPU-1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert release is not None
    with pytest.raises(GpuUnavailable, match="needs 1 x GPU"):
        prelaunch(ServerSpec(engine="sglang", backend="flashinfer_mxfp4", tp=1), ScriptedLauncher({}))
    release()
    env2, release2 = prelaunch(ServerSpec(engine="sglang", backend="flashinfer_mxfp4", tp=1), ScriptedLauncher({}))
    assert dict(env2)["CUDA_VISIBLE_DEVICES"] in ("GPU-0", "GPU-1")
    assert release2 is not None
    release2()


def test_pinned_cuda_visible_devices_is_respected(config: pytest.Config) -> None:
    spec = ServerSpec(engine="vllm", backend="auto", tp=8, env=(("CUDA_VISIBLE_DEVICES", "0-7"),))
    assert server_prelaunch(config)(spec, ScriptedLauncher({})) == ((), None)


def test_remote_nodes_are_preflighted_and_a_busy_node_refuses_the_launch(config: pytest.Config) -> None:
    spec = ServerSpec(engine="sglang", backend="marlin", nodes=("601", "602"), tp=16)
    answers = {**node_answers("601", IDLE_8), **node_answers("602", IDLE_8)}
    assert server_prelaunch(config)(spec, ScriptedLauncher(answers)) == ((), None)
    busy = {**node_answers("601", IDLE_8), **node_answers("602", BUSY_8)}
    with pytest.raises(GpuUnavailable, match="602"):
        server_prelaunch(config)(spec, ScriptedLauncher(busy))
