"""The log oracle: every §11 signature on real-shaped lines, near-misses, incremental scanning, markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.redact import REDACTED
from pytest_sskj.server.logscan import CATEGORIES, SEVERITIES, SIGNATURES, LogOracle, LogScanner, match_line

# (signature name, category, severity, a line shaped like the real log line)
HITS: list[tuple[str, str, str, str]] = [
    (
        "cuda_oom",
        "oom",
        "fatal",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
        "94.97 GiB of which 1.12 GiB is free.",
    ),
    ("cuda_error_oom", "oom", "fatal", "RuntimeError: CUDA error: out of memory"),
    ("cuda_alloc_error", "oom", "fatal", "RuntimeError: cudaErrorMemoryAllocation: out of memory at alloc.cu:88"),
    (
        "mem_fraction",
        "oom",
        "fatal",
        "[2026-11-29 10:00:01 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
    ("prefill_oom", "oom", "fatal", "[2026-11-29 10:00:01 TP5] Prefill out of memory. Try to lower your batch size."),
    ("decode_oom", "oom", "fatal", "[2026-11-29 10:00:01 TP5] Decode out of memory. Try to lower your batch size."),
    ("req_slots_oom", "oom", "fatal", "RuntimeError: alloc_req_slots runs out of memory."),
    (
        "scheduler_died_init",
        "oom",
        "fatal",
        "Rank 3 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause "
        "is the OS OOM killer.",
    ),
    (
        "kv_pool_full",
        "oom",
        "warning",
        "[2026-11-29 10:00:01 TP0] KV cache pool is full. Retract requests. "
        "#retracted_reqs: 2, #new_token_ratio: 0.7000 -> 0.9000",
    ),
    ("memory_leak", "oom", "error", "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=1"),
    (
        "nccl_collective_timeout",
        "nccl",
        "fatal",
        "[rank12]:[E1129 10:00:01.000 ProcessGroupNCCL.cpp:632] [Rank 12] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
        "milliseconds before timing out.",
    ),
    ("nccl_error", "nccl", "fatal", "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)"),
    (
        "nccl_error_code",
        "nccl",
        "fatal",
        "torch.distributed.DistError: ncclRemoteError: A call failed possibly due to a network error",
    ),
    (
        "dist_backend_error",
        "nccl",
        "fatal",
        "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId",
    ),
    (
        "nccl_warn",
        "nccl",
        "warning",
        "gpu602:81234:81399 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.4",
    ),
    ("soft_watchdog", "watchdog", "warning", "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)"),
    (
        "watchdog",
        "watchdog",
        "fatal",
        "[2026-11-29 10:00:01 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    ),
    (
        "health_check_failed",
        "watchdog",
        "fatal",
        "[2026-11-29 10:00:01] Health check failed. Server couldn't get a response from detokenizer for last 20 "
        "seconds. tic start time: 10:00:00. last_heartbeat time: 09:59:40",
    ),
    (
        "manager_exception",
        "crash",
        "fatal",
        "[2026-11-29 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    ),
    ("manager_exception", "crash", "fatal", "[2026-11-29 10:00:01] TokenizerManager hit an exception: boom"),
    ("manager_exception", "crash", "fatal", "[2026-11-29 10:00:01] DetokenizerManager hit an exception: boom"),
    ("manager_exception", "crash", "fatal", "DataParallelController hit an exception: Traceback"),
    ("manager_exception", "crash", "fatal", "MultiTokenizerRouter hit an exception: x"),
    ("manager_exception", "crash", "fatal", "MultiDetokenizerRouter hit an exception: x"),
    (
        "sigquit_child",
        "crash",
        "fatal",
        "[2026-11-29 10:00:01] Received sigquit from a child process. It usually means the child failed.",
    ),
    (
        "sigquit",
        "crash",
        "fatal",
        "[2026-11-29 10:00:01] SIGQUIT received. signum=3, frame=<frame at 0x7f>. It usually means one child failed.",
    ),
    (
        "subprocess_crashed",
        "crash",
        "fatal",
        "Subprocess scheduler_0 (pid=81234) crashed with exit code -6. Triggering SIGQUIT for cleanup...",
    ),
    (
        "scheduler_died",
        "crash",
        "fatal",
        "Rank 0 scheduler died during initialization (exit code: 1). If exit code is -9 (SIGKILL), a common cause is "
        "the OS OOM killer.",
    ),
    ("init_failed", "crash", "fatal", "Exception: Initialization failed. Please see the error messages above."),
    ("init_failed", "crash", "fatal", "Exception: Initialization failed. warmup error: Traceback ..."),
    (
        "cuda_graph_failed",
        "crash",
        "fatal",
        "Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing",
    ),
    ("illegal_memory_access", "crash", "fatal", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    (
        "cublas_status",
        "crash",
        "fatal",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, ...)`",
    ),
    ("segfault", "crash", "fatal", "Fatal Python error: Segmentation fault"),
    ("core_dumped", "crash", "fatal", "bash: line 1: 81234 Aborted                 (core dumped) python3 -m x"),
    ("cxx_terminate", "crash", "fatal", "terminate called after throwing an instance of 'c10::Error'"),
    (
        "vllm_engine_dead",
        "crash",
        "fatal",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
        "issue. See stack trace (above) for the root cause.",
    ),
    (
        "vllm_engine_dead",
        "crash",
        "fatal",
        "ERROR 11-29 10:00:01 [core.py:123] EngineCore encountered an issue. See stack trace (above) for the root "
        "cause.",
    ),
    # vLLM 0.32.0: the first three lines are from real CPU-server logs (unit/server/data/logs/vllm, unit/vllm/data);
    # the unknown-variable warning text is the one issue 11 quotes from a real run
    (
        "vllm_worker_died",
        "crash",
        "fatal",
        "(EngineCore pid=17431) ERROR 12-01 09:35:19 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
        "unexpectedly (exit code: None), shutting down executor.",
    ),
    (
        "vllm_engine_core_fatal",
        "crash",
        "fatal",
        "(EngineCore pid=17431) ERROR 12-01 09:35:19 [core.py:1512] EngineCore encountered a fatal error.",
    ),
    (
        "vllm_invalid_choice",
        "config",
        "fatal",
        "api_server.py: error: argument --moe-backend: invalid choice: 'flashinfer_mxfp4' (choose from 'aiter', "
        "'auto', 'marlin', 'triton')",
    ),
    (
        "vllm_unknown_env",
        "config",
        "warning",
        "(APIServer pid=812) WARNING 11-30 16:02:11 [envs.py:1969] Unknown vLLM environment variable detected: "
        "VLLM_MXFP4_USE_MARLIN",
    ),
    ("llamacpp_init_failed", "crash", "fatal", "RuntimeError: Failed to init server, please check the input params."),
    ("not_contiguous", "config", "fatal", "RuntimeError: Check failed: input must be contiguous"),
    ("mxfp8_input_sf", "config", "fatal", "RuntimeError: input_sf must be provided when use_mxfp8_act_scaling=True"),
    (
        "w4a8_quant_scales",
        "config",
        "fatal",
        "RuntimeError: Expecting 4 quant scales for W4A8_MXFP4_MXFP8 quantization",
    ),
    ("mxfp4_hidden_align", "config", "fatal", "RuntimeError: hidden_size must be divisible by 128 for MXFP4 weights"),
    ("mxfp4_inter_align", "config", "fatal", "RuntimeError: inter_size must be divisible by 128 for MXFP4 weights"),
    ("situ_beta", "config", "fatal", "RuntimeError: situ_beta must have num_experts_on_rank elements."),
    (
        "invalid_activation",
        "config",
        "fatal",
        "[TensorRT-LLM][ERROR] Assertion failed: Invalid activation type (moe_kernels.cu:1024)",
    ),
    (
        "llamacpp_bind",
        "config",
        "fatal",
        "0.00.041.000 E srv          start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8091",
    ),
    (
        "llamacpp_gguf_open",
        "config",
        "fatal",
        "0.00.001.000 E gguf_init_from_file: failed to open GGUF file '/nope.gguf' (No such file or directory)",
    ),
    ("traceback", "traceback", "fatal", "Traceback (most recent call last):"),
    ("traceback", "traceback", "fatal", "[2026-11-29 10:00:01 TP3] Traceback (most recent call last):"),
    # issue 11: the lines that were missed (shapes from sglang 0.5.23 / PyTorch source; the corpus has more)
    (
        "scheduler_terminated",
        "crash",
        "fatal",
        "[2026-12-01 10:00:01] Scheduler or DataParallelController 81234 terminated with -9",
    ),
    (
        "watchdog_thread_crashed",
        "watchdog",
        "fatal",
        "[2026-12-01 10:00:01 TP0] Scheduler watchdog thread crashed: division by zero",
    ),
    ("crash_dump", "crash", "fatal", "[2026-12-01 10:00:01] Dumping requests before crash. self.crash_dump_folder='x'"),
    (
        "weights_not_ready",
        "crash",
        "fatal",
        "[2026-12-01 10:00:01] Weights are not ready after waiting 120 seconds. Consider increasing "
        "SGLANG_WAIT_WEIGHTS_READY_TIMEOUT environment variable.",
    ),
    (
        "nccl_watchdog_stuck",
        "nccl",
        "fatal",
        "[rank3]:[F1201 10:00:01.000 ProcessGroupNCCL.cpp:1613] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
        "collectives.",
    ),
    (
        "nccl_watchdog_hang",
        "nccl",
        "fatal",
        "[rank3]:[F1201 10:00:01.000 ProcessGroupNCCL.cpp:1613] [PG ID 0 PG GUID 0(default_pg) Rank 3] Terminating "
        "the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
    ),
    (
        "nccl_heartbeat_timeout",
        "nccl",
        "fatal",
        "[rank1]:[E1201 10:00:01.000 ProcessGroupNCCL.cpp:1422] [PG ID 0 PG GUID 0(default_pg) Rank 1] Heartbeat "
        "monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2",
    ),
    ("cuda_kernel_error", "crash", "fatal", "RuntimeError: CUDA error: unspecified launch failure"),
    ("cuda_error", "crash", "fatal", "RuntimeError: CUDA error: an unknown error occurred on the device"),
    ("cuda_driver_oom", "oom", "fatal", "RuntimeError: CUDA driver error: out of memory"),
    (
        "shell_killed",
        "oom",
        "fatal",
        "bash: line 1: 4242 Killed                  python3 -m sglang.launch_server --model-path /models/Kimi-K3",
    ),
    # PD disaggregation (sglang 0.5.23 srt/disaggregation/*/conn.py wording)
    ("pd_kv_transfer_error", "crash", "error", "[2026-12-01 10:00:01 DP0 TP0] KVTransferError(bootstrap_room=7): x"),
    (
        "pd_kv_transfer_failed",
        "crash",
        "error",
        "[2026-12-01 10:00:01 TP0] Room marked Failed before the transfer ended",
    ),
    (
        "pd_lost_prefill",
        "crash",
        "error",
        "[2026-12-01 TP0] Lost connection with prefill instance (bootstrap_addr: 601:8998)",
    ),
    (
        "pd_prefill_down",
        "crash",
        "error",
        "Prefill server with bootstrap_addr: 601:8998 is healthy before, but now it is down. "
        "Request (bootstrap_room: 3) has been marked as failed.",
    ),
    ("pd_send_kv", "crash", "error", "[2026-12-01 TP1] Failed to send kv chunk of 12 to 10.0.0.5:17000"),
    ("pd_rdma", "crash", "error", "[Staging] Bulk RDMA transfer failed with ret=-1. src_ptr=0x7f00, dst_ptr=0x7f10"),
    ("pd_bootstrap", "config", "error", "Could not fetch prefill parallel info from bootstrap_addr: 601:8998"),
]

NEAR_MISSES = [
    # server-argument dumps mention the flags but are not failures
    "server_args=ServerArgs(model_path='/models/Kimi-K3', mem_fraction_static=0.85, watchdog_timeout=300, "
    "soft_watchdog_timeout=None, chunked_prefill_size=8192, enable_nccl_nvls=False, disable_cuda_graph=False)",
    "usage: launch_server.py [--watchdog-timeout WATCHDOG_TIMEOUT] [--mem-fraction-static MEM_FRACTION_STATIC]",
    "NCCL_DEBUG=WARN NCCL_IB_HCA=mlx5 python3 -m sglang.launch_server --tp-size 32",
    "gpu601:81234:81234 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.",
    "cublasLt handle created: CUBLAS_STATUS_SUCCESS",
    "[2026-11-29 10:00:01 TP0] Memory pool end. avail mem=12.43 GB",
    "[2026-11-29 10:00:01] The server is fired up and ready to roll!",
    "[2026-11-29 10:00:01 TP0] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.01",
    "[2026-11-29 10:00:01 TP0] Decode batch. #running-req: 8, #token: 1024, token usage: 0.03, cuda graph: True",
    'INFO:     127.0.0.1:51234 - "GET /health_generate HTTP/1.1" 200 OK',
    "checking whether the traceback module is importable: ok (no Traceback)",
    "ulimit -c unlimited  # core_dumped=False",
    "allocating KV cache pool: 8192 tokens; pool is not full",
    "setting NCCL error handling: TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
    "0.00.566.394 I srv init: listening on http://127.0.0.1:8091",
    "I slot print_timing: id  4 | task 119 | prompt eval time = 199.57 ms / 512 tokens",
    "the health check succeeded after 2 probes",
    "contiguous memory allocation enabled; tensors must be contiguous-friendly",
]


def test_every_signature_has_a_real_shaped_line_in_this_file() -> None:
    covered = {name for name, *_ in HITS}
    missing = sorted({s.name for s in SIGNATURES} - covered)
    assert not missing, f"signatures without a test line: {missing}"
    assert all(s.category in CATEGORIES and s.severity in SEVERITIES for s in SIGNATURES)


@pytest.mark.parametrize(
    ("name", "category", "severity", "line"), HITS, ids=[f"{h[0]}-{i}" for i, h in enumerate(HITS)]
)
def test_signature_matches_real_shaped_line(name: str, category: str, severity: str, line: str) -> None:
    sig = match_line(line)
    assert sig is not None, f"no signature matched {line!r}; expected {name}"
    assert (sig.name, sig.category, sig.severity) == (name, category, severity), (
        f"{line!r}: expected {name}/{category}/{severity}, got {sig.name}/{sig.category}/{sig.severity}"
    )


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_near_miss_does_not_match(line: str) -> None:
    sig = match_line(line)
    assert sig is None, f"{line!r} must not match, but matched {sig.name if sig else ''}"


def test_scanner_is_incremental_and_keeps_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("starting\nRuntimeError: NCCL err")
    s = LogScanner(log, "601", 0)
    assert s.scan() == [], "a partial line must not be scanned before it is complete"
    with log.open("a") as fh:
        fh.write("or: unhandled cuda error\nfine line\n")
    found = s.scan()
    assert [(f.category, f.line_no, f.node) for f in found] == [("nccl", 2, "601")], found
    assert s.scan() == [], "the same lines must not be reported twice"
    with log.open("a") as fh:
        fh.write("Segmentation fault")
    assert s.scan() == []
    last = s.scan(final=True)
    assert [f.signature for f in last] == ["segfault"], last


def test_traceback_excerpt_carries_context_and_redacts_secrets(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    log.write_text(
        "loading with HF_TOKEN=hf_abcdefSECRET\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "RuntimeError: token hf_abcdefSECRET rejected\n"
    )
    oracle = LogOracle("sglang", secrets=("hf_abcdefSECRET",))
    oracle.add(log, "local", 0)
    (f,) = oracle.findings_since(None)
    assert f.category == "traceback"
    assert "RuntimeError: token" in f.excerpt, f"the excerpt must include the lines after the match: {f.excerpt!r}"
    assert "hf_abcdefSECRET" not in f.excerpt and REDACTED in f.excerpt, f.excerpt


def test_sglang_0_5_23_startup_markers_count_as_healthy(tmp_path: Path) -> None:
    log = tmp_path / "r0.log"
    log.write_text(
        "[2026-12-01 10:00:00 TP0] Init parallel begin.\n"
        "[2026-12-01 10:00:09 TP0] Init parallel ends. elapsed=8.91 s\n"
        "[2026-12-01 10:01:00 TP0] Load weight end. elapsed=51.2 s, type=KimiK3ForConditionalGeneration\n"
        "[2026-12-01 10:01:05 TP0] Memory pool end. avail mem=12.43 GB\n"
        "[2026-12-01 10:02:00] The server is fired up and ready to roll!\n"
    )
    oracle = LogOracle("sglang")
    oracle.add(log, "601", 0)
    oracle.scan()
    assert oracle.missing_markers() == {}, oracle.missing_markers()


def test_oracle_marks_window_findings_and_checks_healthy_markers(tmp_path: Path) -> None:
    r0, r1 = tmp_path / "r0.log", tmp_path / "r1.log"
    r0.write_text("Init torch distributed begin.\nInit torch distributed ends.\nLoad weight end.\n")
    r1.write_text("Init torch distributed begin.\n")
    oracle = LogOracle("sglang")
    oracle.add(r0, "601", 0)
    oracle.add(r1, "602", 1)
    before = oracle.mark()
    assert oracle.missing_markers() == {
        "601/rank0": ["Memory pool end.", "The server is fired up and ready to roll!"],
        "602/rank1": ["Init parallel ends.|Init torch distributed ends.", "Load weight end.", "Memory pool end."],
    }, oracle.missing_markers()
    with r1.open("a") as fh:
        fh.write("[TP9] KV cache pool is full. Retract requests.\n")
    mid = oracle.mark()
    with r0.open("a") as fh:
        fh.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert [f.signature for f in oracle.findings_since(before)] == ["kv_pool_full", "illegal_memory_access"]
    window = oracle.findings_since(mid)
    assert [(f.node, f.rank, f.severity) for f in window] == [("601", 0, "fatal")], window
    assert oracle.fatal() == window
