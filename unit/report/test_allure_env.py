"""environment.properties / categories.json / executor.json from a manifest; message tags categorize."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_sskj.report import categories as cat
from pytest_sskj.report.allure_env import (
    categories_json,
    environment_facts,
    environment_properties,
    executor_json,
    write_allure_extras,
)

MANIFEST = {
    "run_id": "20261129-235959-a1b2",
    "start_time": 1795996782.5,
    "settings": {
        "engine": "sglang",
        "model_name": "Kimi-K3",
        "model_path": "/data/kimi3",
        "platform": "pro6000",
        "tp": 32,
        "ep": 4,
        "dp": 1,
        "pp": 1,
        "nodes": ["601", "602", "603", "604"],
        "backends": ["marlin", "flashinfer_mxfp4"],
        "chunks": [4096, 8192, 16384],
        "concurrencies": [8, 16],
        "isl": 16384,
        "osl": 1,
        "requests": 40,
        "repeats": 3,
        "slo": ["ttft_p95_ms<3000"],
        "ssh_identity": "/home/u/.ssh/id_ed25519",
    },
    "gpu": {
        "count": 2,
        "summary": "2 x NVIDIA RTX PRO 6000D (sm120)",
        "driver_version": "580.65.06",
        "cuda_driver_version": "13.0",
        "notes": ["x"],
        "devices": [
            {
                "index": i,
                "name": "NVIDIA RTX PRO 6000D",
                "arch": "sm120",
                "capability": "12.0",
                "memory_total_mib": 97887,
                "uuid": f"GPU-{i}",
            }
            for i in range(2)
        ],
    },
    "engine": {"version": "0.5.9", "commit": "b95b5341ab95", "flashinfer_commit": "b525c513fef7"},
    "packages": {"flashinfer-python": "0.7.1", "sglang": "0.5.9", "torch": None},
    "pytest_sskj": {"version": "0.1.0", "git_commit": "5668357"},
    "python": {"version": "3.11.7"},
    "host": {"hostname": "gpu601"},
}


def test_environment_properties_lists_gpu_engine_flashinfer_model_and_parallel_sizes() -> None:
    facts = environment_facts(MANIFEST)
    expected = {
        "model": "Kimi-K3",
        "platform": "pro6000",
        "parallel": "TP32/EP4/DP1/PP1",
        "nodes": "601,602,603,604",
        "gpu.names": "NVIDIA RTX PRO 6000D",
        "gpu.driver_version": "580.65.06",
        "gpu.cuda_driver_version": "13.0",
        "gpu.count": "2",
        "gpu.archs": "sm120",
        "gpu.memory_total_mib": "97887",
        "engine": "sglang",
        "engine.version": "0.5.9",
        "engine.commit": "b95b5341ab95",
        "engine.flashinfer_commit": "b525c513fef7",
        "flashinfer-python.version": "0.7.1",
        "shape": "ISL 16384 / OSL 1, 40 req x 3",
        "chunks": "4096,8192,16384",
    }
    assert {k: facts.get(k) for k in expected} == expected
    assert "torch.version" not in facts, "unknown versions are left out, not written as None"
    assert not any(k.startswith("gpu.devices") or "uuid" in k for k in facts), "no per-device noise"
    assert not any("ssh" in k or ".ssh" in v for k, v in facts.items()), facts
    text = environment_properties({**MANIFEST, "gpu": {"note": "a=b:c\nd"}})
    assert "gpu.note=a=b:c\\nd\n" in text


def test_categories_cover_every_tag_and_match_tagged_messages() -> None:
    cats = {c["name"]: c for c in categories_json()}
    assert list(cats) == [
        "Environment",
        "Out of memory",
        "NCCL error",
        "Server crash",
        "Timeout",
        "SLO miss",
        "Performance regression (baseline gate)",
        "Comparison: worse",
        "Comparison: equivalent, not better",
        "Expectation not met",
        "Client-bound measurement",
        "Numerics mismatch",
        "Output mismatch",
        "Inconclusive comparison",
    ]
    for name, msg in [
        ("Environment", f"{cat.ENVIRONMENT} server marlin: the nodes do not run the same build"),
        ("Out of memory", f"{cat.OOM} rank 3: CUDA OOM"),
        ("NCCL error", f"{cat.NCCL} watchdog"),
        ("Server crash", f"AssertionError: {cat.CRASH} exited -9\nmore"),
        ("Timeout", "Timeout >600.0s"),
        ("SLO miss", f"{cat.SLO} ttft_p95_ms=4000"),
        ("Performance regression (baseline gate)", f"{cat.REGRESSION} -3%"),
        ("Comparison: worse", f"{cat.WORSE} b vs a: -9.00 % Input TPS"),
        ("Comparison: equivalent, not better", f"{cat.EQUIVALENT} b vs a: +0.10 % Input TPS"),
        ("Expectation not met", f"{cat.EXPECTATION} best chunk 8192, expected 4096"),
        ("Client-bound measurement", f"{cat.CLIENT_BOUND} loop lag"),
        ("Numerics mismatch", f"{cat.NUMERICS} cosine 0.91"),
        ("Output mismatch", f"{cat.OUTPUT_MISMATCH} first_token_agreement_frac 0.81 < 0.95"),
        ("Inconclusive comparison", f"{cat.INCONCLUSIVE} b vs a: +3.00 % Input TPS"),
    ]:
        assert re.fullmatch(cats[name]["messageRegex"], msg), (name, msg)
        assert cat.categorize(msg) == name
        assert cats[name]["matchedStatuses"] == ["failed", "broken"]
    assert cat.categorize("assert 1 == 2") is None


def test_executor_names_the_ci_job_or_the_host() -> None:
    ci = executor_json(MANIFEST, {"CI": "1", "GITHUB_RUN_ID": "77", "GITHUB_REPOSITORY": "qqtang/sskj"})
    assert ci["buildUrl"] == "https://github.com/qqtang/sskj/actions/runs/77" and ci["name"] == "CI"
    assert ci["buildName"] == "20261129-235959-a1b2" and ci["reportName"] == "pytest-sskj Kimi-K3 20261129-235959-a1b2"
    local = executor_json(MANIFEST, {})
    assert "buildUrl" not in local and local["type"] == "pytest-sskj"


def test_write_allure_extras_writes_three_valid_files(tmp_path: Path) -> None:
    paths = write_allure_extras(tmp_path / "ar", MANIFEST)
    assert [p.name for p in paths] == ["environment.properties", "categories.json", "executor.json"]
    assert len(json.loads(paths[1].read_text())) == 14 and json.loads(paths[2].read_text())["buildOrder"] == 1795996782


@pytest.mark.parametrize(
    "tag",
    [
        *(cat.OOM, cat.NCCL, cat.CRASH, cat.TIMEOUT, cat.SLO, cat.REGRESSION, cat.WORSE, cat.EQUIVALENT),
        *(cat.EXPECTATION, cat.CLIENT_BOUND, cat.NUMERICS),
    ],
)
def test_tags_are_bracketed_lowercase_words(tag: str) -> None:
    assert re.fullmatch(r"\[[a-z-]+\]", tag)


def test_a_deployment_runs_environment_names_each_groups_own_sizes() -> None:
    """A PD run's ``parallel`` is its groups' (issue 46), not the run's unused TP1/EP1/DP1/PP1."""
    groups = [
        {"name": "prefill", "role": "prefill", "tp": 4, "ep": 4, "dp": 1, "pp": 8, "backend": "flashinfer_mxfp4"},
        {"name": "decode", "role": "decode", "tp": 32, "ep": 32, "dp": 1, "pp": 1, "backend": "marlin"},
    ]
    settings = {**MANIFEST["settings"], "tp": 1, "ep": 1, "dp": 1, "pp": 1}
    settings["deployment"] = {"kind": "pd", "groups": groups}
    facts = environment_facts({**MANIFEST, "settings": settings})
    assert facts["parallel"] == ("PD prefill TP4/EP4/DP1/PP8 flashinfer_mxfp4 + decode TP32/EP32/DP1/PP1 marlin"), (
        facts["parallel"]
    )
