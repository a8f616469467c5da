"""NVML sampling on a real GPU (the H200 machine): power, SM clock, memory and utilisation every interval
while a CUDA load runs, and that load flagged as a foreign process on the GPU.  Skips elsewhere with the
exact reason NVML gave (``no pynvml (nvidia-ml-py) in ...``, ``NVML: NVMLError_LibraryNotFound: ...``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.telemetry import point_telemetry
from pytest_sskj.telemetry.gpu_script import nvml_unavailable

WHY = nvml_unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no NVML GPU here: {WHY}")

LOAD = (
    "import time, torch\n"
    "x = torch.randn(8192, 8192, device='cuda')\n"
    "t = time.time()\n"
    "while time.time() - t < 6:\n"
    "    y = x @ x\n"
    "torch.cuda.synchronize()\n"
)


class _Server:
    spec = ServerSpec(engine="embedded", backend="serial")
    urls: ClassVar[list[str]] = []
    external = False

    def pids(self) -> dict[str, list[int]]:
        return {"local/rank0": [os.getpid()]}


def test_nvml_samples_power_clock_memory_utilisation_and_flags_a_foreign_cuda_process(tmp_path: Path) -> None:
    pytest.importorskip("torch.cuda")
    import torch

    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device (NVML does)")
    launcher = LocalLauncher()
    try:
        with point_telemetry(_Server(), launcher, tmp_path, interval_s=0.5) as tel:
            load = subprocess.Popen([sys.executable, "-c", LOAD])
            assert load.wait(timeout=120) == 0
            time.sleep(0.6)
        assert launcher.leftover_pids() == {}
    finally:
        launcher.close()
    samples = [g for r in tel.records if r["source"] == "gpu" for g in r.get("gpus") or []]
    assert len(samples) >= 6, f"expected a sample every 0.5 s for ~6 s, got {len(samples)}: {tel.records[:2]}"
    assert all(g["power_w"] and g["power_w"] > 0 for g in samples), samples[:3]
    assert all(g["sm_clock_mhz"] and g["sm_clock_mhz"] > 0 for g in samples), samples[:3]
    assert max(g["mem_used_mib"] for g in samples) > 256, "the load's 8192x8192 tensors are on the GPU"
    assert max(g["util_pct"] for g in samples) > 10, "the matmul loop kept the GPU busy"
    cols = tel.summary({}, tolerance_pct=25.0)
    assert cols["gpu_power_mean_w"] > 0 and cols["gpu_sm_clock_min_mhz"] > 0, cols
    foreign = [f for f in cols["telemetry_flags"] if f.startswith("foreign GPU process on local GPU")]
    assert foreign, f"the CUDA load is not part of the server: expected it flagged, flags {cols['telemetry_flags']}"
    print(
        "nvml telemetry:",
        {
            k: cols[k]
            for k in (
                "gpu_samples",
                "gpu_power_mean_w",
                "gpu_sm_clock_min_mhz",
                "gpu_util_mean_pct",
                "gpu_mem_used_max_mib",
            )
        },
        cols["telemetry_flags"],
    )
