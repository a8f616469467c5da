"""The shipped 8-node PD profile: its dry run prints both groups' commands and the router's, and those command lines
pass the real parsers — ``sglang_router.launch_router.parse_router_args`` (PyPI sglang-router) and SGLang's
``ServerArgs`` argument parser (the sglang package, installed without GPU dependencies)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.testing.ssh_config import numbered_ssh_config

ROOT = Path(__file__).resolve().parents[2]
ACCEPTANCE = ROOT / "acceptance"


# PyPI's torchvision/torchaudio/torchcodec next to a CPU torch break ``import transformers`` (real-engines.md); the
# argument parser needs none of them, so the child hides them.
_HIDE = (
    "import sys, importlib.abc\n"
    "class _Hide(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name.split('.')[0] in ('torchvision', 'torchaudio', 'torchcodec'):\n"
    "            raise ModuleNotFoundError(name)\n"
    "sys.meta_path.insert(0, _Hide())\n"
)


def _python_with(module: str, env: str, *cands: str) -> str:
    for py in (os.environ.get(env, ""), sys.executable, *cands):
        if py and Path(py).is_file():
            r = subprocess.run([py, "-c", f"{_HIDE}import {module}"], capture_output=True, timeout=300)
            if r.returncode == 0:
                return py
    pytest.skip(f"no python with {module} importable (set {env}); PD command lines not checked against it")


def _dry_run_lines(pytester: pytest.Pytester) -> list[str]:
    res = pytester.runpytest_inprocess(
        str(ACCEPTANCE), "--profile", "pro6000/kimi3-sglang-pd", "--sskj-dry-run", "-p", "no:cacheprovider",
        "--reports-dir", str(pytester.path / "reports"),
        "--sskj-ssh-config", str(numbered_ssh_config(pytester.path)),  # nodes 601-608 as the users' Host entries
    )  # fmt: skip
    assert res.ret == 0, res.stdout.str()[-3000:]
    return [ln.strip() for ln in res.stdout.lines]


def _commands(lines: list[str]) -> tuple[dict[str, list[list[str]]], list[str]]:
    groups: dict[str, list[list[str]]] = {}
    current = ""
    router: list[str] = []
    for ln in lines:
        if ln.startswith("[group "):
            current = ln.split()[1]
            groups[current] = []
        elif ln.startswith("[router]"):
            router = shlex.split(ln.split(": ", 1)[1])
        elif current and ln[:3].isdigit() and "sglang.launch_server" in ln:
            groups[current].append(shlex.split(ln.split(": ", 1)[1]))
    return groups, router


def test_pd_dry_run_prints_the_seeds_groups_and_the_router(pytester: pytest.Pytester) -> None:
    groups, router = _commands(_dry_run_lines(pytester))
    assert set(groups) == {"prefill", "decode"} and all(len(v) == 4 for v in groups.values()), groups.keys()
    p0, d0 = " ".join(groups["prefill"][0]), " ".join(groups["decode"][0])
    for part in ("--pp-size 8", "--tp-size 4", "--ep-size 4", "--moe-runner-backend flashinfer_mxfp4",
                 "--chunked-prefill-size 8192", "--disaggregation-mode prefill", "--page-size 64",
                 "--disaggregation-transfer-backend mooncake", "--nnodes 4"):  # fmt: skip
        assert part in p0, f"prefill rank 0 lacks {part!r}: {p0}"
    for part in ("--tp-size 32", "--ep-size 32", "--moe-runner-backend marlin", "--disaggregation-mode decode",
                 "--page-size 64", "--disaggregation-transfer-backend mooncake"):  # fmt: skip
        assert part in d0, f"decode rank 0 lacks {part!r}: {d0}"
    assert "--pp-size" not in d0, "the decode group is PP1"
    assert [c[c.index("--node-rank") + 1] for c in groups["decode"]] == ["0", "1", "2", "3"]
    assert "--dist-init-addr 605:5000" in d0 and "--dist-init-addr 601:5000" in p0
    assert router[1:3] == ["-m", "sglang_router.launch_router"] and "--pd-disaggregation" in router
    assert router[router.index("--prefill") + 1] == "http://601:30000"
    assert router[router.index("--decode") + 1] == "http://605:30000"


@pytest.mark.slow
def test_pd_router_command_passes_the_real_sglang_router_parser(pytester: pytest.Pytester) -> None:
    py = _python_with("sglang_router", "SSKJ_ROUTER_PYTHON", "/work/venv-router/bin/python")
    _, router = _commands(_dry_run_lines(pytester))
    code = (
        "import json, sys\n"
        "from sglang_router.launch_router import parse_router_args\n"
        "a = parse_router_args(sys.argv[1:])\n"
        "print(json.dumps({'pd': a.pd_disaggregation, 'prefill': a.prefill_urls, 'decode': a.decode_urls,"
        " 'port': a.port, 'host': a.host}))\n"
    )
    r = subprocess.run([py, "-c", code, *router[3:]], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"sglang_router refused {router[3:]}: {r.stderr[-2000:]}"
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {
        "pd": True,
        "prefill": [["http://601:30000", None]],
        "decode": ["http://605:30000"],
        "port": 8000,
        "host": "0.0.0.0",
    }, got


@pytest.mark.slow
def test_pd_group_commands_pass_the_real_sglang_server_args_parser(pytester: pytest.Pytester) -> None:
    py = _python_with("sglang.srt.server_args", "SSKJ_SGLANG_PYTHON", "/work/venv-sglang/bin/python")
    groups, _ = _commands(_dry_run_lines(pytester))
    code = _HIDE + (
        "import argparse, json, sys\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "keys = ('tp_size', 'pp_size', 'ep_size', 'moe_runner_backend', 'chunked_prefill_size', 'page_size',"
        " 'disaggregation_mode', 'disaggregation_transfer_backend', 'nnodes', 'node_rank', 'dist_init_addr')\n"
        "out = []\n"
        "for argv in json.load(sys.stdin):\n"
        "    p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)\n"
        "    ns = p.parse_args(argv)\n"
        "    out.append({k: getattr(ns, k, None) for k in keys})\n"
        "print(json.dumps(out))\n"
    )
    want = {
        "prefill": {"tp_size": 4, "pp_size": 8, "ep_size": 4, "moe_runner_backend": "flashinfer_mxfp4",
                    "chunked_prefill_size": 8192, "disaggregation_mode": "prefill"},
        "decode": {"tp_size": 32, "pp_size": 1, "ep_size": 32, "moe_runner_backend": "marlin",
                   "disaggregation_mode": "decode"},
    }  # fmt: skip
    todo = [(name, rank, argv[3:]) for name, cmds in groups.items() for rank, argv in enumerate(cmds)]
    r = subprocess.run(
        [py, "-c", code], input=json.dumps([a for _, _, a in todo]), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, f"sglang's parser refused a group command: {r.stderr[-2000:]}"
    parsed = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(parsed) == len(todo) == 8
    for (name, rank, _), got in zip(todo, parsed, strict=True):
        assert got["page_size"] == 64 and got["disaggregation_transfer_backend"] == "mooncake", got
        assert (got["nnodes"], got["node_rank"]) == (4, rank), got
        for k, v in want[name].items():
            assert got[k] == v, f"group {name} rank {rank}: {k} parsed as {got[k]!r}, expected {v!r}"
