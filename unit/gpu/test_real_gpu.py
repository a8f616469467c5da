"""On a host with NVIDIA GPUs (the H200 test machine): the real NVML inventory, a real lease, the real skip
reason, and two xdist workers serializing on the same card.  Without a GPU these skip with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.gpu.inventory import GpuInfo, Inventory, read_nvml_inventory
from pytest_sskj.gpu.leases import Lease
from pytest_sskj.gpu.preflight import GPU_QUERY, parse_gpu_csv


def real_inventory() -> Inventory:
    env = {k: v for k, v in os.environ.items() if k == "CUDA_VISIBLE_DEVICES"}
    inv = read_nvml_inventory(env)
    if not inv.gpus:
        pytest.skip(f"no NVIDIA GPU on this host: {inv.reason}")
    return inv


def test_nvml_inventory_reports_the_real_cards_like_nvidia_smi() -> None:
    inv = real_inventory()
    print(inv.header_line())
    for g in inv.gpus:
        print(json.dumps(g.to_dict()))
        assert g.uuid.startswith(("GPU-", "MIG-")) and g.capability[0] >= 7, g
        assert g.arch == f"sm{g.capability[0]}{g.capability[1]}"
        assert g.memory_total_mib > 1024 and g.memory_used_mib + g.memory_free_mib <= g.memory_total_mib + 1, g
    assert inv.driver_version and inv.cuda_driver_version and inv.cuda_driver_version.count(".") == 1, inv
    if shutil.which("nvidia-smi") and "CUDA_VISIBLE_DEVICES" not in os.environ and not any(g.is_mig for g in inv.gpus):
        smi = parse_gpu_csv(subprocess.run(list(GPU_QUERY), capture_output=True, text=True, check=True).stdout)
        assert [(s.uuid, s.name, s.capability) for s in smi] == [(g.uuid, g.name, g.capability) for g in inv.gpus], (
            "our CUDA (PCI bus) order must match nvidia-smi's numbering"
        )
        assert [s.memory_total_mib for s in smi] == [g.memory_total_mib for g in inv.gpus]


@pytest.mark.gpu(count=1)
def test_gpu_marker_leases_a_real_card_and_a_child_sees_only_it(gpus: list[GpuInfo], gpu_lease: Lease) -> None:
    (g,) = gpus
    assert os.environ["CUDA_VISIBLE_DEVICES"] == g.visible_id and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    print(f"leased {g.label} {g.uuid} CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}")
    probe = (
        "import torch; n = torch.cuda.device_count(); p = torch.cuda.get_device_properties(0); "
        "print(n, p.name, f'{p.major}.{p.minor}', p.uuid)"
    )
    try:
        import torch  # noqa: F401 - only to learn whether the probe can run here
    except ImportError:
        return
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    print("child process sees:", out.stdout.strip())
    count, *_, uuid = out.stdout.split()
    assert count == "1", f"the child should see exactly the leased GPU, saw {out.stdout!r}"
    assert g.uuid.endswith(uuid.replace("GPU-", "")), f"child saw {uuid}, lease holds {g.uuid}"


def test_arch_the_host_lacks_skips_with_the_exact_reason(pytester: pytest.Pytester, ledger_path: Path) -> None:
    inv = real_inventory()
    if any(g.arch == "sm120" for g in inv.gpus):
        pytest.skip("this host has an sm120 GPU; the skip cannot be shown here")
    pytester.makepyfile("import pytest\n\n@pytest.mark.gpu(arch='sm120')\ndef test_sm120():\n    pass\n")
    rec = pytester.inline_run("-p", "no:cacheprovider")
    (rep,) = [r for r in rec.getreports("pytest_runtest_logreport") if r.skipped]
    assert isinstance(rep.longrepr, tuple)
    print("skip reason:", rep.longrepr[2])
    assert rep.longrepr[2] == f"Skipped: needs 1 x sm120, found {inv.summary()}"


SERIAL_TESTS = """
import json, os, time
import pytest

def hold(gpus, lease):
    start = time.time()
    try:
        import torch
        x = torch.ones(256, 1024, 1024, device="cuda")  # 1 GiB on the leased card, a real CUDA context
        torch.cuda.synchronize()
    except ImportError:
        x = None
    time.sleep(2.0)
    line = {"worker": os.environ.get("PYTEST_XDIST_WORKER"), "pid": os.getpid(), "uuids": [g.uuid for g in gpus],
            "start": start, "end": time.time(), "waited_s": lease.waited_s, "torch": x is not None}
    with open(os.environ["SSKJ_TEST_INTERVALS"], "a") as fh:
        fh.write(json.dumps(line) + "\\n")

@pytest.mark.gpu(count={n})
def test_a(gpus, gpu_lease):
    hold(gpus, gpu_lease)

@pytest.mark.gpu(count={n})
def test_b(gpus, gpu_lease):
    hold(gpus, gpu_lease)
"""


def test_two_xdist_workers_serialize_on_the_same_gpus(pytester: pytest.Pytester) -> None:
    """The inner run leases through the ledger this session's own GPU tests use (not a private one): on a many-core
    box the outer xdist workers keep their CUDA contexts after their leases, and only that ledger knows them as this
    session's (its residents); with a private ledger the inner run took them for foreign processes and skipped both
    tests after waiting out --sskj-gpu-wait (seen on the H100 with 16 workers)."""
    inv = real_inventory()
    intervals = pytester.path / "intervals.jsonl"
    pytester.makepyfile(test_serial=SERIAL_TESTS.replace("{n}", str(len(inv.gpus))))
    env = {**os.environ, "SSKJ_TEST_INTERVALS": str(intervals)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-q", "-rs", "--sskj-gpu-wait", "60"],
        cwd=pytester.path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert intervals.is_file(), f"expected both inner tests to hold the GPU; the inner run:\n{proc.stdout[-3000:]}"
    rows = sorted((json.loads(x) for x in intervals.read_text().splitlines()), key=lambda r: r["start"])
    print("holds:", json.dumps(rows))
    assert len(rows) == 2 and rows[0]["worker"] != rows[1]["worker"], (
        f"expected two holds by two workers, got {rows}; inner run:\n{proc.stdout[-3000:]}"
    )
    assert rows[0]["end"] <= rows[1]["start"], f"the workers held the same GPU at once: {rows}"
    assert rows[1]["waited_s"] > 0.5, f"the second worker should have waited for the lease: {rows}"


def test_preflight_over_the_local_launcher_sees_the_real_cards_idle() -> None:
    inv = real_inventory()
    if not shutil.which("nvidia-smi"):
        pytest.skip("nvidia-smi is not on PATH")
    from pytest_sskj.gpu.preflight import preflight
    from pytest_sskj.server.local import LocalLauncher

    report = preflight(LocalLauncher(), ["local"], len(inv.gpus), arch=inv.gpus[0].arch)
    print(report.message(), json.dumps(report.facts()))
    assert [g.uuid for g in report.nodes[0].gpus] == [g.uuid for g in inv.gpus if not g.is_mig]
    assert report.ok or any("foreign processes" in p or "in use by" in p for p in report.problems), report.problems
