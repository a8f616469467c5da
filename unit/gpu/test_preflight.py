"""Node pre-flight: nvidia-smi CSV parsing and the refusal messages (node, GPU, processes, idle GPUs)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_sskj.errors import GpuUnavailable, LauncherError
from pytest_sskj.gpu.preflight import (
    APPS_QUERY,
    GPU_QUERY,
    NodeApp,
    NodeGpu,
    parse_apps_csv,
    parse_gpu_csv,
    preflight,
)
from pytest_sskj.server.launcher import CommandResult, Launcher, ProcessHandle
from pytest_sskj.server.spec import NodeCommand

H200_8 = (
    "\n".join(f"{i}, GPU-{i:04d}aaaa-0000, NVIDIA H200, 9.0, 143771, {4 if i != 5 else 80000}" for i in range(8)) + "\n"
)
PRO6000_8 = "\n".join(f"{i}, GPU-{i:04d}bbbb-0000, NVIDIA RTX PRO 6000 Blackwell, 12.0, 97887, 1" for i in range(8))


class ScriptedLauncher:
    """A Launcher double answering ``run`` from a table: (node, argv[1]) -> CommandResult or exception."""

    kind = "scripted"

    def __init__(self, answers: dict[tuple[str, str], CommandResult | Exception]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, tuple[str, ...], float]] = []

    def start(self, cmd: NodeCommand, log_path: Path) -> ProcessHandle:  # pragma: no cover - not used here
        raise NotImplementedError("pre-flight only runs short queries")

    def start_many(self, items: Sequence[tuple[NodeCommand, Path]]) -> list[ProcessHandle]:  # pragma: no cover
        raise NotImplementedError("pre-flight only runs short queries")

    def address(self, node: str) -> str:
        return node

    def leftover_pids(self) -> dict[str, list[int]]:
        return {}

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        self.calls.append((node, tuple(argv), timeout_s))
        ans = self.answers[(node, argv[1])]
        if isinstance(ans, Exception):
            raise ans
        return ans

    def close(self) -> None:
        pass


def node_answers(node: str, gpus: str, apps: str = "") -> dict[tuple[str, str], CommandResult | Exception]:
    return {
        (node, GPU_QUERY[1]): CommandResult(node, 0, gpus, ""),
        (node, APPS_QUERY[1]): CommandResult(node, 0, apps, ""),
    }


def test_scripted_launcher_is_a_launcher() -> None:
    assert isinstance(ScriptedLauncher({}), Launcher)


def test_parse_gpu_csv_reads_every_field() -> None:
    gpus = parse_gpu_csv(H200_8)
    assert len(gpus) == 8
    assert gpus[5] == NodeGpu(5, "GPU-0005aaaa-0000", "NVIDIA H200", (9, 0), 143771, 80000)
    assert gpus[0].arch == "sm90" and gpus[0].label == "GPU 0 NVIDIA H200 (sm90)"
    odd = parse_gpu_csv("0, GPU-x, NVIDIA A100-SXM4-80GB, [N/A], [N/A], [Not Supported]\n\n")
    assert odd == [NodeGpu(0, "GPU-x", "NVIDIA A100-SXM4-80GB", None, None, None)]
    assert odd[0].arch is None


def test_parse_gpu_csv_rejects_an_old_nvidia_smi_answer() -> None:
    with pytest.raises(ValueError, match=r"unexpected nvidia-smi --query-gpu line 'Field \"compute_cap\" is not"):
        parse_gpu_csv('Field "compute_cap" is not a valid field to query.\n')


def test_parse_apps_csv_handles_commas_na_and_no_processes() -> None:
    text = "GPU-0001aaaa-0000, 4242, python3, 70000\nGPU-0002aaaa-0000, 99, /opt/my,odd/app, [N/A]\n"
    assert parse_apps_csv(text) == [
        NodeApp("GPU-0001aaaa-0000", 4242, "python3", 70000),
        NodeApp("GPU-0002aaaa-0000", 99, "/opt/my,odd/app", None),
    ]
    assert parse_apps_csv("") == [] and parse_apps_csv("No running processes found\n") == []
    with pytest.raises(ValueError, match="expected gpu_uuid,pid,process_name,used_memory"):
        parse_apps_csv("GPU-1, notapid, x, 1\n")


def test_all_idle_nodes_pass_and_each_node_is_queried_twice() -> None:
    answers = {**node_answers("601", PRO6000_8), **node_answers("602", PRO6000_8)}
    launcher = ScriptedLauncher(answers)
    report = preflight(launcher, ["601", "602"], 8, arch="sm120")
    assert report.ok, report.problems
    assert report.message() == "pre-flight passed: 2 node(s), 8 x sm120 per node, all idle"
    report.check()
    assert [(c[0], c[1]) for c in launcher.calls] == [
        ("601", GPU_QUERY),
        ("601", APPS_QUERY),
        ("602", GPU_QUERY),
        ("602", APPS_QUERY),
    ]
    assert report.facts()["601"]["gpus"][0]["arch"] == "sm120"  # type: ignore[index]


def test_foreign_processes_refuse_with_node_gpu_and_process() -> None:
    apps = "GPU-0002bbbb-0000, 4242, python3, 70000\nGPU-0002bbbb-0000, 4243, sglang::scheduler, 1000\n"
    launcher = ScriptedLauncher({**node_answers("601", PRO6000_8), **node_answers("602", PRO6000_8, apps)})
    report = preflight(launcher, ["601", "602"], 8, arch="sm120")
    assert not report.ok
    assert report.problems == [
        "node 602: GPU 2 (GPU-0002bbbb-0000) runs foreign processes: pid 4242 python3, 70000 MiB; "
        "pid 4243 sglang::scheduler, 1000 MiB"
    ]
    with pytest.raises(GpuUnavailable) as info:
        report.check()
    assert str(info.value).startswith("refusing to launch: the spec needs 8 x sm120 per node\n  - node 602: GPU 2")


def test_busy_gpu_outside_the_needed_ones_is_fine_and_idle_ones_are_suggested() -> None:
    apps = "GPU-0001bbbb-0000, 4242, python3, 70000\n"
    report = preflight(ScriptedLauncher(node_answers("601", PRO6000_8, apps)), ["601"], 4)
    assert report.problems == [
        "node 601: GPU 1 (GPU-0001bbbb-0000) runs foreign processes: pid 4242 python3, 70000 MiB",
        "node 601: idle GPUs there: 0,2,3,4,5,6,7 -- stop the processes, or launch with CUDA_VISIBLE_DEVICES=0,2,3,4",
    ]
    apps_high = "GPU-0006bbbb-0000, 4242, python3, 70000\n"
    assert preflight(ScriptedLauncher(node_answers("601", PRO6000_8, apps_high)), ["601"], 4).ok


def test_too_few_gpus_and_wrong_architecture() -> None:
    four = "\n".join(PRO6000_8.splitlines()[:4])
    launcher = ScriptedLauncher({**node_answers("601", four), **node_answers("602", H200_8)})
    report = preflight(launcher, ["601", "602"], 8, arch="sm120")
    assert report.problems[0] == "node 601: has 4 GPU(s), the spec needs 8 per node"
    assert report.problems[1].startswith("node 602: wrong architecture: GPU 0 NVIDIA H200 (sm90), GPU 1 NVIDIA H200")
    assert report.problems[1].endswith("; needs sm120")


def test_memory_used_by_invisible_processes_counts_as_busy() -> None:
    report = preflight(ScriptedLauncher(node_answers("602", H200_8)), ["602"], 8)
    assert report.problems == [
        "node 602: GPU 5 (GPU-0005aaaa-0000) has 80000 MiB in use by processes nvidia-smi cannot show here "
        "(another container or PID namespace?)"
    ]
    assert preflight(ScriptedLauncher(node_answers("602", H200_8)), ["602"], 8, max_used_mib=100000).ok


def test_unreachable_node_and_failing_nvidia_smi_are_named() -> None:
    answers: dict[tuple[str, str], CommandResult | Exception] = {
        ("601", GPU_QUERY[1]): LauncherError("ssh: connect to host 601 port 22: Connection refused"),
        ("602", GPU_QUERY[1]): CommandResult(
            "602", 9, "", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        ),
        **node_answers("603", PRO6000_8),
    }
    answers[("603", APPS_QUERY[1])] = CommandResult("603", 2, "", "")
    report = preflight(ScriptedLauncher(answers), ["601", "602", "603"], 8)
    assert report.problems == [
        "node 601: cannot run nvidia-smi there: ssh: connect to host 601 port 22: Connection refused",
        "node 602: `nvidia-smi --query-gpu=index,uuid,name,compute_cap,memory.total,memory.used` exited 9: "
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "node 603: `nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory` exited 2: no output",
    ]


def test_garbage_answer_is_a_problem_not_a_crash() -> None:
    report = preflight(ScriptedLauncher(node_answers("601", "bash: nvidia-smi: command not found\n")), ["601"], 1)
    assert len(report.problems) == 1 and "unexpected nvidia-smi --query-gpu line" in report.problems[0]


def test_gpus_per_node_follows_engine_placement_and_parallel_sizes() -> None:
    from pytest_sskj.gpu.preflight import gpus_per_node
    from pytest_sskj.server.spec import ServerSpec

    nodes = ("601", "602", "603", "604")
    assert gpus_per_node(ServerSpec("sglang", "marlin", nodes=nodes, tp=32, ep=4)) == 8
    assert gpus_per_node(ServerSpec("sglang", "marlin", nodes=nodes, tp=8, placement="replicas")) == 8
    assert gpus_per_node(ServerSpec("sglang", "marlin", tp=4)) == 4
    assert gpus_per_node(ServerSpec("vllm", "auto", tp=2, dp=2)) == 4
    assert gpus_per_node(ServerSpec("embedded", "parallel")) == 0


def test_preflight_spec_over_the_real_local_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real LocalLauncher runs an `nvidia-smi` stand-in (a script on PATH answering like the real one)."""
    from pytest_sskj.gpu.preflight import preflight_spec
    from pytest_sskj.server.local import LocalLauncher
    from pytest_sskj.server.spec import ServerSpec

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "gpus.csv").write_text(PRO6000_8)
    (tmp_path / "apps.csv").write_text("GPU-0003bbbb-0000, 4242, python3, 70000\n")
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-gpu=*) cat {tmp_path}/gpus.csv;; --query-compute-apps=*) cat {tmp_path}/apps.csv;; '
        '*) echo "unexpected $*" >&2; exit 2;; esac\n'
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    launcher = LocalLauncher()
    report = preflight_spec(launcher, ServerSpec("sglang", "flashinfer_mxfp4", tp=4), arch="sm120")
    assert report.problems == [
        "node local: GPU 3 (GPU-0003bbbb-0000) runs foreign processes: pid 4242 python3, 70000 MiB",
        "node local: idle GPUs there: 0,1,2,4,5,6,7 -- stop the processes, or launch with CUDA_VISIBLE_DEVICES=0,1,2,4",
    ]
    (tmp_path / "apps.csv").write_text("")
    assert preflight_spec(launcher, ServerSpec("sglang", "flashinfer_mxfp4", tp=8), arch="sm120").ok
    refused = preflight_spec(launcher, ServerSpec("sglang", "flashinfer_mxfp4", tp=8), arch="sm90")
    assert refused.problems[0].startswith("node local: wrong architecture: GPU 0 NVIDIA RTX PRO 6000 Blackwell (sm120)")
    assert preflight_spec(launcher, ServerSpec("embedded", "parallel")).ok, "the CPU engine needs no GPU"
