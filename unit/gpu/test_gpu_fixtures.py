"""The ``gpu`` marker in real pytest runs (pytester): lease + env, skip vs --sskj-require-gpu, validation,
release on failure / timeout / Ctrl-C / killed process, header and manifest facts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_sskj.gpu.leases import LeaseLedger

FAKE_CONFTEST = """
from pytest_sskj.gpu.inventory import GpuInfo, Inventory

def pytest_sskj_gpu_inventory(config):
    gpus = tuple(
        GpuInfo(i, i, f"GPU-fake-{{i}}", f"00000000:{{0x19 + i:02x}}:00.0", "NVIDIA H200", (9, 0), 143771, 4, 143767,
                physical_index=i)
        for i in range({n})
    )
    return Inventory(gpus=gpus, driver_version="580.159.04", cuda_driver_version="13.0", source="fake")
"""


@pytest.fixture
def fake_host(pytester: pytest.Pytester, ledger_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project whose host has one fake H200 (through the inventory hook)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    pytester.makeconftest(FAKE_CONFTEST.format(n=1))
    return pytester


def skip_reasons(rec: pytest.HookRecorder) -> dict[str, str]:
    out = {}
    for r in rec.getreports("pytest_runtest_logreport"):
        if r.skipped:
            assert isinstance(r.longrepr, tuple), r.longrepr
            out[r.nodeid.split("::")[-1]] = r.longrepr[2]
    return out


def test_gpu_test_gets_a_lease_and_cuda_env_which_is_restored_after(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile(
        """
        import json, os
        import pytest

        def test_before():
            assert "CUDA_VISIBLE_DEVICES" not in os.environ

        @pytest.fixture
        def server_env():
            # a fixture that launches a server sees the lease already (setup order)
            return dict(os.environ)

        @pytest.mark.gpu(count=1)
        def test_gpu(server_env, gpus, gpu_lease, gpu_inventory):
            assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" == server_env["CUDA_VISIBLE_DEVICES"]
            assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
            assert [g.uuid for g in gpus] == ["GPU-fake-0"] and gpu_lease.uuids == ("GPU-fake-0",)
            assert gpu_inventory.summary() == "1 x NVIDIA H200 (sm90)"
            ledger = json.loads((gpu_lease.ledger.path).read_text())["leases"]
            assert ledger["GPU-fake-0"]["pid"] == os.getpid() and ledger["GPU-fake-0"]["test_id"].endswith("test_gpu")

        def test_gpus_fixture_alone_means_one_gpu(gpus):
            assert len(gpus) == 1 and os.environ["CUDA_VISIBLE_DEVICES"] == "0"

        def test_after():
            assert "CUDA_VISIBLE_DEVICES" not in os.environ and "CUDA_DEVICE_ORDER" not in os.environ
        """
    )
    result = fake_host.runpytest("-p", "no:cacheprovider", "--sskj-gpu-wait", "0")
    result.assert_outcomes(passed=4)
    assert LeaseLedger().leases() == {}, "every lease is released at teardown"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_unmet_arch_skips_with_the_exact_reason(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile(
        """
        import pytest

        @pytest.mark.gpu(arch="sm120")
        def test_sm120_kernel():
            raise AssertionError("must not run on sm90")

        @pytest.mark.gpu(count=2)
        def test_two():
            raise AssertionError("must not run with one GPU")
        """
    )
    rec = fake_host.inline_run("-p", "no:cacheprovider")
    rec.assertoutcome(skipped=2)
    assert skip_reasons(rec) == {
        "test_sm120_kernel": "Skipped: needs 1 x sm120, found 1 x NVIDIA H200 (sm90)",
        "test_two": "Skipped: needs 2 x GPU, found 1 x NVIDIA H200 (sm90)",
    }


def test_no_gpu_host_skips_with_the_nvml_reason(
    pytester: pytest.Pytester, ledger_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no nvidia-ml-py: the reader says so
    pytester.makepyfile("import pytest\n\n@pytest.mark.gpu(count=2)\ndef test_x():\n    pass\n")
    rec = pytester.inline_run("-p", "no:cacheprovider")
    reason = skip_reasons(rec)["test_x"]
    assert reason.startswith("Skipped: needs 2 x GPU, found 0 GPUs (NVML: nvidia-ml-py is not installed"), reason


@pytest.mark.parametrize("how", [["--sskj-require-gpu"], ["env"]])
def test_require_gpu_turns_the_skip_into_a_failure(
    fake_host: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: list[str]
) -> None:
    fake_host.makepyfile("import pytest\n\n@pytest.mark.gpu(arch='sm120')\ndef test_x():\n    pass\n")
    args = ["-p", "no:cacheprovider"]
    if how == ["env"]:
        monkeypatch.setenv("SSKJ_REQUIRE_GPU", "1")
    else:
        args += how
    result = fake_host.runpytest(*args)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*needs 1 x sm120, found 1 x NVIDIA H200 (sm90) (--sskj-require-gpu: failing instead of skipping)*"]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


BAD_MARKERS = {
    "gpu(count=0)": "gpu marker count must be >= 1, got 0",
    "gpu(arch='hopper')": "gpu marker arch must look like 'sm90' or 'sm120', got 'hopper'",
    "gpu(cores=2)": "gpu marker got unknown argument(s) cores; accepted: count, min_capability, arch, min_free_gib",
    "gpu(1, count=2)": "gpu marker got count both positionally and as a keyword",
    "gpu(min_capability='x')": "invalid literal for int()",
}


def test_invalid_marker_arguments_error_with_the_test_and_the_fix(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile(
        "import pytest\n"
        + "".join(f"\n@pytest.mark.{m}\ndef test_bad_{i}():\n    pass\n" for i, m in enumerate(BAD_MARKERS))
    )
    result = fake_host.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=len(BAD_MARKERS))
    out = result.stdout.str()
    for i, (marker, message) in enumerate(BAD_MARKERS.items()):
        line = next((ln for ln in out.splitlines() if f"test_bad_{i}: invalid @pytest.mark.gpu(" in ln), "")
        assert message in line, f"expected {message!r} for @pytest.mark.{marker}, got line {line!r}"


def test_lease_is_released_after_a_failing_test_and_a_timeout(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.gpu
        def test_fails():
            assert False, "boom"

        @pytest.mark.gpu
        @pytest.mark.timeout(1, method="signal")
        def test_times_out():
            time.sleep(30)

        @pytest.mark.gpu
        def test_next_gets_the_only_gpu(gpus):
            assert gpus[0].uuid == "GPU-fake-0"
        """
    )
    result = fake_host.runpytest("-p", "no:cacheprovider", "--sskj-gpu-wait", "0")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*Timeout (>1.0s)*"])
    assert LeaseLedger().leases() == {}


def test_keyboard_interrupt_releases_the_lease(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile("import pytest\n\n@pytest.mark.gpu\ndef test_ctrl_c():\n    raise KeyboardInterrupt\n")
    result = fake_host.runpytest("-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    # this process is alive, so a lease left behind would still be in the ledger
    assert LeaseLedger().leases() == {}


def test_killed_holder_leaves_a_stale_lease_that_the_next_session_reclaims(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile(test_dies="import os, pytest\n\n@pytest.mark.gpu\ndef test_dies():\n    os._exit(3)\n")
    fake_host.runpytest_subprocess("-p", "no:cacheprovider")
    raw = json.loads((LeaseLedger().path).read_text())["leases"]
    assert list(raw) == ["GPU-fake-0"], f"the killed process's lease is still on disk: {raw}"
    # the same file, now harmless (an in-process run of os._exit would end this test process too)
    fake_host.makepyfile(test_dies="import pytest\n\n@pytest.mark.gpu\ndef test_dies(gpus):\n    pass\n")
    result = fake_host.runpytest("-p", "no:cacheprovider", "--sskj-gpu-wait", "0")
    result.assert_outcomes(passed=1)


def test_header_and_manifest_carry_the_gpu_facts(fake_host: pytest.Pytester) -> None:
    fake_host.makepyfile("def test_x():\n    pass\n")
    result = fake_host.runpytest("-p", "no:cacheprovider", "--run-id", "gpu-facts")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["sskj: gpu: 1 x NVIDIA H200 (sm90, 140.4 GiB), driver 580.159.04, CUDA 13.0"])
    manifest = json.loads((fake_host.path / "reports" / "gpu-facts" / "manifest.json").read_text())
    gpu = manifest["gpu"]
    assert (gpu["count"], gpu["driver_version"], gpu["cuda_driver_version"], gpu["source"]) == (
        1,
        "580.159.04",
        "13.0",
        "fake",
    )
    assert gpu["devices"][0]["name"] == "NVIDIA H200" and gpu["devices"][0]["capability"] == "9.0"
