"""NVML inventory: CUDA order by PCI bus id, CUDA_VISIBLE_DEVICES (indices, UUIDs, MIG), the empty reasons."""

from __future__ import annotations

import sys

import pytest
from gpu_fakes import FakeGpu, FakeNvml

from pytest_sskj.gpu.inventory import GpuInfo, Inventory, pci_sort_key, read_nvml_inventory

# NVML enumerates these out of PCI order: NVML 0 sits on bus 0xb3, NVML 1 on 0x19, NVML 2 on 0x3b.
SHUFFLED = [
    FakeGpu("GPU-cccc0000-0000", "00000000:B3:00.0"),
    FakeGpu("GPU-aaaa0000-0000", "00000000:19:00.0"),
    FakeGpu("GPU-bbbb0000-0000", "00000000:3B:00.0"),
]


def uuids(inv: Inventory) -> list[str]:
    return [g.uuid for g in inv.gpus]


def test_cuda_order_follows_pci_bus_id_not_nvml_enumeration(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = list(SHUFFLED)
    inv = read_nvml_inventory({})
    assert uuids(inv) == ["GPU-aaaa0000-0000", "GPU-bbbb0000-0000", "GPU-cccc0000-0000"], uuids(inv)
    assert [g.index for g in inv.gpus] == [0, 1, 2]
    assert [g.nvml_index for g in inv.gpus] == [1, 2, 0], "NVML indices must be kept for NVML calls"
    assert [g.physical_index for g in inv.gpus] == [0, 1, 2]
    assert [g.pci_bus_id for g in inv.gpus] == ["00000000:19:00.0", "00000000:3b:00.0", "00000000:b3:00.0"]
    assert inv.reason is None and inv.driver_version == "580.159.04" and inv.cuda_driver_version == "13.0"


def test_pci_sort_key_orders_domain_bus_device_function() -> None:
    ids = ["0001:00:00.0", "0000:b3:00.0", "0000:19:01.0", "0000:19:00.1", "garbage"]
    assert sorted(ids, key=pci_sort_key) == ["0000:19:00.1", "0000:19:01.0", "0000:b3:00.0", "0001:00:00.0", "garbage"]


def test_visible_devices_by_index_are_pci_order_indices_in_the_listed_order(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = list(SHUFFLED)
    inv = read_nvml_inventory({"CUDA_VISIBLE_DEVICES": "2,0"})
    assert uuids(inv) == ["GPU-cccc0000-0000", "GPU-aaaa0000-0000"], uuids(inv)
    assert [g.index for g in inv.gpus] == [0, 1], "CUDA renumbers visible devices from 0"
    assert [g.physical_index for g in inv.gpus] == [2, 0]
    assert [g.visible_id for g in inv.gpus] == ["2", "0"], "a child needs the physical (PCI order) index"
    assert inv.visible_devices == "2,0"


def test_visible_devices_by_uuid_and_unique_prefix(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = list(SHUFFLED)
    inv = read_nvml_inventory({"CUDA_VISIBLE_DEVICES": "GPU-bbbb0000-0000, GPU-cccc"})
    assert uuids(inv) == ["GPU-bbbb0000-0000", "GPU-cccc0000-0000"], uuids(inv)
    assert inv.notes == ()


def test_visible_devices_stop_at_the_first_unknown_entry_like_cuda(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = list(SHUFFLED)
    inv = read_nvml_inventory({"CUDA_VISIBLE_DEVICES": "1,7,0"})
    assert uuids(inv) == ["GPU-bbbb0000-0000"], "entries after an invalid one are ignored by CUDA"
    assert inv.notes and "'7' names no GPU" in inv.notes[0], inv.notes


def test_ambiguous_uuid_prefix_stops_the_list(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = list(SHUFFLED)
    inv = read_nvml_inventory({"CUDA_VISIBLE_DEVICES": "GPU-"})
    assert inv.gpus == ()
    assert "matches several devices" in (inv.reason or ""), inv.reason


def test_empty_visible_devices_hides_every_gpu_and_says_so(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = list(SHUFFLED)
    inv = read_nvml_inventory({"CUDA_VISIBLE_DEVICES": ""})
    assert inv.gpus == ()
    assert inv.reason == "CUDA_VISIBLE_DEVICES='' hides all 3 GPU(s) of this host", inv.reason


def test_mig_mode_gpu_contributes_its_instances_not_itself(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [
        FakeGpu("GPU-aaaa0000-0000", "00000000:19:00.0"),
        FakeGpu(
            "GPU-bbbb0000-0000",
            "00000000:3B:00.0",
            mig=True,
            migs=[("MIG-1111", 71000, 10), ("MIG-2222", 71000, 30000)],
            mig_processes={"MIG-2222": [(4242, "python3", 29000)]},
        ),
    ]
    inv = read_nvml_inventory({})
    assert uuids(inv) == ["GPU-aaaa0000-0000", "MIG-1111", "MIG-2222"], uuids(inv)
    mig1, mig2 = inv.gpus[1], inv.gpus[2]
    assert mig1.is_mig and mig1.parent_uuid == "GPU-bbbb0000-0000" and mig1.mig_mode is True
    assert mig1.memory_total_mib == 71000 and mig1.memory_free_mib == 70990
    assert mig1.processes == () and [p.pid for p in mig2.processes] == [4242], "processes are per instance"
    assert mig1.visible_id == "MIG-1111", "CUDA addresses MIG instances by UUID only"
    assert inv.gpus[0].mig_mode is False and inv.gpus[0].visible_id == "0"
    assert "MIG" in inv.header_line()


def test_visible_devices_can_name_one_mig_instance(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [
        FakeGpu(
            "GPU-bbbb0000-0000", "00000000:3B:00.0", mig=True, migs=[("MIG-1111", 71000, 0), ("MIG-2222", 71000, 0)]
        )
    ]
    inv = read_nvml_inventory({"CUDA_VISIBLE_DEVICES": "MIG-2222"})
    assert uuids(inv) == ["MIG-2222"], uuids(inv)
    assert inv.gpus[0].index == 0


def test_mig_mode_without_instances_says_why_it_is_empty(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [FakeGpu("GPU-bbbb0000-0000", "00000000:3B:00.0", mig=True)]
    inv = read_nvml_inventory({})
    assert inv.gpus == () and inv.reason == "all 1 GPU(s) are in MIG mode with no MIG instance created", inv.reason


def test_mig_unsupported_gpu_has_mig_mode_none(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [
        FakeGpu("GPU-aaaa", "00000000:19:00.0", name="NVIDIA GeForce RTX 4090", capability=(8, 9), mig=None)
    ]
    inv = read_nvml_inventory({})
    assert inv.gpus[0].mig_mode is None and inv.gpus[0].arch == "sm89"


def test_processes_memory_and_names_are_read(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [
        FakeGpu(
            "GPU-aaaa",
            "00000000:19:00.0",
            used_mib=90000,
            processes=[(4242, "/usr/bin/python3", 89000), (77, "x", None)],
        )
    ]
    g = read_nvml_inventory({}).gpus[0]
    assert (g.memory_total_mib, g.memory_used_mib, g.memory_free_mib) == (143771, 90000, 53771)
    assert [tuple(p) for p in g.processes] == [(4242, "python3", 89000), (77, "x", None)], g.processes
    assert g.arch == "sm90" and g.capability == (9, 0) and g.label == "NVIDIA H200 (sm90)"


def test_no_nvidia_ml_py_gives_an_empty_inventory_with_the_reason(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    inv = read_nvml_inventory({})
    assert inv.gpus == () and inv.reason is not None
    assert inv.reason.startswith("NVML: nvidia-ml-py is not installed") and "pip install nvidia-ml-py" in inv.reason


def test_nvml_init_failure_gives_the_nvml_reason(fake_nvml: FakeNvml) -> None:
    fake_nvml.init_error = "Driver Not Loaded"
    inv = read_nvml_inventory({})
    assert inv.gpus == () and inv.reason == "NVML: Driver Not Loaded (no NVIDIA driver on this host?)", inv.reason
    assert inv.summary() == "0 GPUs (NVML: Driver Not Loaded (no NVIDIA driver on this host?))"


def test_driver_without_gpus(fake_nvml: FakeNvml) -> None:
    inv = read_nvml_inventory({})
    assert inv.reason == "NVML: driver loaded but no GPU found" and inv.header_line().startswith("gpu: none")


def test_summary_header_and_facts_name_the_cards(fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [
        FakeGpu("GPU-a", "0000:19:00.0"),
        FakeGpu("GPU-b", "0000:3b:00.0"),
        FakeGpu("GPU-c", "0000:5d:00.0", name="NVIDIA RTX PRO 6000", capability=(12, 0), total_mib=97887),
    ]
    inv = read_nvml_inventory({})
    assert inv.summary() == "2 x NVIDIA H200 (sm90), 1 x NVIDIA RTX PRO 6000 (sm120)"
    assert inv.header_line() == (
        "gpu: 2 x NVIDIA H200 (sm90, 140.4 GiB), 1 x NVIDIA RTX PRO 6000 (sm120, 95.6 GiB), "
        "driver 580.159.04, CUDA 13.0"
    )
    facts = inv.facts()
    assert facts["count"] == 3 and facts["driver_version"] == "580.159.04" and facts["cuda_driver_version"] == "13.0"
    assert [d["capability"] for d in facts["devices"]] == ["9.0", "9.0", "12.0"]
    assert inv.by_uuid("GPU-c") is inv.gpus[2] and inv.by_uuid("GPU-x") is None


def test_load_inventory_asks_the_hook_first(pytester: pytest.Pytester, fake_nvml: FakeNvml) -> None:
    fake_nvml.gpus = [FakeGpu("GPU-from-nvml", "0000:19:00.0")]
    pytester.makeconftest(
        """
        from pytest_sskj.gpu.inventory import GpuInfo, Inventory

        def pytest_sskj_gpu_inventory(config):
            return Inventory(gpus=(GpuInfo(0, 0, "GPU-from-hook", "0000:01:00.0", "Fake", (12, 0), 1000, 0, 1000),),
                             source="hook")
        """
    )
    from pytest_sskj.gpu.inventory import load_inventory

    config = pytester.parseconfigure()
    inv = load_inventory(config, {})
    assert uuids(inv) == ["GPU-from-hook"] and inv.source == "hook"


def test_hook_returning_a_wrong_type_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_sskj_gpu_inventory(config):\n    return ['GPU-0']\n")
    from pytest_sskj.gpu.inventory import load_inventory

    config = pytester.parseconfigure()
    with pytest.raises(TypeError, match=r"must return a pytest_sskj\.gpu\.inventory\.Inventory, got list"):
        load_inventory(config, {})


def test_gpuinfo_to_dict_round_trips_the_fields() -> None:
    g = GpuInfo(0, 3, "GPU-x", "0000:19:00.0", "NVIDIA H200", (9, 0), 100, 10, 90, physical_index=5)
    d = g.to_dict()
    assert (d["arch"], d["nvml_index"], d["physical_index"], d["memory_free_mib"]) == ("sm90", 3, 5, 90)
    assert g.visible_id == "5"
