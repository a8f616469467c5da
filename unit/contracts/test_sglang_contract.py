"""Contract: every SGLang command we generate parses and resolves with the real ``sglang`` package, and sglang's
own resolved values pass our ``/server_info`` verification.

The real package (``sglang==0.5.23``, installed without its GPU dependencies by ``.ci/install_sglang.sh``) runs
in its own interpreter (``SSKJ_SGLANG_PYTHON``; else this one, when it can import sglang) through
``pytest_sskj/twin/sglang_resolve.py`` (the twin ranks' resolver too): ``ServerArgs.add_cli_args`` -> ``parse_args``
-> ``from_cli_args`` -> ``resolve_once()`` -> ``resolved_dict()``, with a placeholder Kimi-K3 ``config.json``
(domain.md §2), ``--device cuda`` appended and sglang's ``override_platform`` saying the target is the users'
RTX PRO 6000 (SM120).  ``/server_info``
returns those resolved args at the top level plus ``version`` (real-engines.md), so that is what the pool's
check is fed.  Without sglang the suite skips with the reason; ``SSKJ_REQUIRE_SGLANG=1`` (CI) turns that skip
into a failure.  This suite is what fails first when the users move to a newer sglang.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.engines import get_engine, node_commands
from pytest_sskj.engines.sglang import BACKENDS, PINNED_VERSION, verify_server_info
from pytest_sskj.parsing import parse_size_list
from pytest_sskj.server.spec import ServerSpec, spec_from_settings
from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY
from pytest_sskj.twin import sglang_resolve

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HARNESS = Path(sglang_resolve.__file__)  # run as a script by sglang's interpreter (the twin's ranks use it too)
PLATFORM = sglang_resolve.PLATFORM  # the users' GPU (RTX PRO 6000 Blackwell, SM120), in sglang's vocabulary
PINNED = PINNED_VERSION
NODES = ("601", "602", "603", "604")
ENGINE = get_engine("sglang")

# domain.md §2.1: the Kimi-K3 text config (a placeholder checkpoint: config.json only, no weights)
KIMI_K3_CONFIG: dict[str, Any] = {
    "architectures": ["KimiK3ForConditionalGeneration"],
    "model_type": "kimi_k3",
    "text_config": {
        "model_type": "kimi_linear",
        "hidden_size": 7168,
        "num_hidden_layers": 93,
        "num_attention_heads": 96,
        "num_key_value_heads": 96,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "intermediate_size": 33792,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_experts": 896,
        "num_experts_per_token": 16,
        "num_shared_experts": 2,
        "moe_intermediate_size": 3072,
        "routed_expert_hidden_size": 3584,
        "rms_norm_eps": 1e-5,
        "vocab_size": 163840,
        "max_position_embeddings": 1048576,
        "num_nextn_predict_layers": 0,
    },
}


pytestmark = pytest.mark.slow  # the real sglang package's parser and resolution, in its own venv


def _sglang_python() -> str:
    explicit = os.environ.get("SSKJ_SGLANG_PYTHON")
    if explicit:
        if not Path(explicit).is_file():
            raise FileNotFoundError(f"SSKJ_SGLANG_PYTHON={explicit} does not exist")
        return explicit
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    reason = (
        "the real sglang package is not installed: run .ci/install_sglang.sh (a venv with sglang==0.5.23 without "
        "its GPU dependencies) and set SSKJ_SGLANG_PYTHON to its python"
    )
    if os.environ.get("SSKJ_REQUIRE_SGLANG") == "1":
        pytest.fail(f"SSKJ_REQUIRE_SGLANG=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Case:
    """One generated server: the spec, its per-node commands and what sglang made of each."""

    name: str
    spec: ServerSpec
    argvs: tuple[tuple[str, ...], ...]


def _sglang_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    i = argv.index("sglang.launch_server")
    assert argv[i - 1] == "-m", argv
    return argv[i + 1 :]


def _profile_specs(pytester: pytest.Pytester, model: Path) -> list[tuple[str, ServerSpec]]:
    # the profile names the users' bare node numbers, which their ssh config maps; here a template maps them, and
    # --mem-fraction-static (a value no source gives for the users' run, so the profile leaves it out) is passed
    # on the command line to check that the run's server args reach sglang
    config = pytester.parseconfigure(
        "--profile",
        str(REPO / "profiles" / "kimi3-pro6000-sglang.toml"),
        "--sskj-node-template",
        "node{}",
        "--sskj-server-arg=--mem-fraction-static=0.85",
    )
    s: Settings = config.stash[SETTINGS_KEY]
    out = []
    for backend in s.backends:
        for chunk in s.chunks:
            spec = spec_from_settings(s, backend=backend, chunk=chunk).with_(model_path=str(model))
            out.append((f"profile-{backend}-chunk{chunk}", spec.with_(dist_init_host="10.0.0.1")))
    return out


def _specs(model: Path) -> list[tuple[str, ServerSpec]]:
    base = ServerSpec(
        engine=ENGINE.name,
        backend="marlin",
        model_path=str(model),
        nodes=NODES,
        tp=32,
        ep=4,
        port=30000,
        dist_init_host="10.0.0.1",
    )
    out = [
        (f"matrix-{b}-chunk{c}", base.with_(backend=b, chunk=c))
        for b in ("marlin", "flashinfer_mxfp4")
        for c in parse_size_list("4K,8K,16K")
    ]
    out += [
        ("replicas-tp8", base.with_(tp=8, ep=1, chunk=8192, placement="replicas")),
        ("dp4-attention-4-nodes", base.with_(backend="flashinfer_mxfp4", chunk=8192, dp=4)),
        ("dp2-single-node", base.with_(nodes=(), tp=8, ep=8, dp=2, chunk=8192, dist_init_host=None)),
        ("pp2-4-nodes", base.with_(tp=16, pp=2, chunk=8192)),
        ("single-node-tp8-auto", base.with_(nodes=(), tp=8, ep=8, backend="auto", chunk=None, dist_init_host=None)),
    ]
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("kimi-k3-placeholder")
    (d / "config.json").write_text(json.dumps(KIMI_K3_CONFIG))
    return d


@pytest.fixture(scope="module")
def contract(model_dir: Path) -> dict[str, Any]:
    python = _sglang_python()
    cases = [Case(n, s, tuple(_sglang_argv(c.argv) for c in node_commands(s))) for n, s in _specs(model_dir)]
    return _run(python, cases)


def _run(python: str, cases: list[Case]) -> dict[str, Any]:
    req = {"commands": [list(a) for c in cases for a in c.argvs], "platform": PLATFORM, "append": ["--device", "cuda"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    proc = subprocess.run(
        [python, str(HARNESS)], input=json.dumps(req), capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert proc.returncode == 0, f"the sglang harness failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    data: dict[str, Any] = json.loads(proc.stdout)
    it = iter(data["results"])
    data["cases"] = [(c, [next(it) for _ in c.argvs]) for c in cases]
    return data


def test_the_pinned_sglang_version_is_the_one_checked(contract: dict[str, Any]) -> None:
    assert contract["version"] == PINNED, (
        f"the contract suite is pinned to sglang {PINNED}, the interpreter has {contract['version']}: re-read the "
        "findings of issue 11 for the new version, then move the pin"
    )


def test_our_backend_list_is_the_packages_moe_runner_backend_choices(contract: dict[str, Any]) -> None:
    theirs = contract["moe_runner_backend_choices"]
    assert list(BACKENDS) == theirs, (
        f"engines/sglang.py BACKENDS differ from sglang {contract['version']} arg_groups/choices.py: "
        f"missing {sorted(set(theirs) - set(BACKENDS))}, unknown to sglang {sorted(set(BACKENDS) - set(theirs))}"
    )
    assert ENGINE.backend_switch.flag in contract["options"], ENGINE.backend_switch


def test_every_flag_we_emit_exists_in_the_parser(contract: dict[str, Any]) -> None:
    options = set(contract["options"])
    for case, _ in contract["cases"]:
        for argv in case.argvs:
            ours = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
            assert ours <= options, f"{case.name}: flags unknown to sglang {contract['version']}: {ours - options}"


def test_every_generated_command_parses_and_resolves(contract: dict[str, Any]) -> None:
    counted = 0
    for case, results in contract["cases"]:
        for argv, res in zip(case.argvs, results, strict=True):
            assert res["error"] is None, f"{case.name}: sglang refused {' '.join(argv)}:\n  {res['error']}"
            ours = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
            deprecated = [m for m in res["messages"] if "deprecated" in m.lower() and any(f in m for f in ours)]
            assert not deprecated, f"{case.name}: we emit a deprecated flag: {deprecated}"
            counted += 1
    # 6 matrix servers x 4 ranks, 4 replicas, 4 attention-DP ranks, 1 single-node DP, 4 PP ranks, 1 single node
    assert counted == 38, counted


def test_sglangs_resolved_values_pass_our_server_info_verification(contract: dict[str, Any]) -> None:
    for case, results in contract["cases"]:
        for rank, res in enumerate(results):
            info = {**res["resolved"], "version": contract["version"]}
            assert info["node_rank"] == (rank if case.spec.placement == "ranks" else 0), (case.name, info["node_rank"])
            info["node_rank"] = 0  # what rank 0 serves; every rank must agree on the rest
            problems = verify_server_info(case.spec, info)
            assert problems == [], f"{case.name} rank {rank}: our check disagrees with sglang itself: {problems}"


def test_multi_node_dp_is_attention_dp_as_sglang_resolves_it(contract: dict[str, Any]) -> None:
    (case, results), *_ = [(c, r) for c, r in contract["cases"] if c.name == "dp4-attention-4-nodes"]
    assert all("--enable-dp-attention" not in a for a in case.argvs), case.argvs
    got = {k: results[0]["resolved"][k] for k in ("dp_size", "attn_dp_size", "chunked_prefill_size")}
    assert got == {"dp_size": 1, "attn_dp_size": 4, "chunked_prefill_size": 8192 // 4}, got


def test_profile_commands_parse_resolve_and_verify(pytester: pytest.Pytester, model_dir: Path) -> None:
    python = _sglang_python()
    cases = [
        Case(n, s, tuple(_sglang_argv(c.argv) for c in node_commands(s)))
        for n, s in _profile_specs(pytester, model_dir)
    ]
    assert len(cases) == 6, [c.name for c in cases]
    data = _run(python, cases)
    for case, results in data["cases"]:
        for res in results:
            assert res["error"] is None, f"{case.name}: {res['error']}"
            info = {**res["resolved"], "version": data["version"], "node_rank": 0}
            assert verify_server_info(case.spec, info) == [], case.name
            assert res["resolved"]["mem_fraction_static"] == 0.85, "the run's server args reach sglang"


def test_healthy_start_markers_are_logged_by_this_sglang(contract: dict[str, Any]) -> None:
    """Every marker we wait for (one of its alternatives) is a string the installed source logs."""
    source = "\n".join(p.read_text(errors="replace") for p in Path(contract["package_dir"]).rglob("*.py"))
    missing = [m for m in ENGINE.logs.healthy_markers if not any(alt.rstrip(".") in source for alt in m.split("|"))]
    assert not missing, f"sglang {contract['version']} never logs {missing}"


def test_the_manifest_version_probe_reads_the_real_sglang(contract: dict[str, Any]) -> None:
    """What the manifest's engine facts record for a server whose python is this sglang interpreter."""
    from types import SimpleNamespace

    from pytest_sskj.server.fixtures import engine_versions
    from pytest_sskj.server.local import LocalLauncher
    from pytest_sskj.server.pool import RunningServer

    python = _sglang_python()
    server = RunningServer(spec=ServerSpec(ENGINE.name, "marlin", python=python), urls=["http://127.0.0.1:1"])
    launcher = LocalLauncher()
    try:
        versions = engine_versions(SimpleNamespace(launcher=launcher), server)  # type: ignore[arg-type]
    finally:
        launcher.close()
    assert versions.get("sglang") == contract["version"] == ENGINE.versions.checked, versions
