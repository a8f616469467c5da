"""A stand-in for one node rank of ``python -m sglang.launch_server`` (test double for the SSH launcher tests).

It accepts SGLang's real multi-node flags (the argv that ``node_commands`` builds), behaves like a rank
where the launcher can see it: healthy-start log markers, a process tree (scheduler children, one in its
own process group, each with a grandchild), rank 0 serving ``/health_generate`` and ``/server_info``
(the parsed ServerArgs, as SGLang reports them), ranks >= 1 a dummy health server that always answers
200 (domain.md §8.2).  When a scheduler child dies it logs SGLang's watchdog line ("Subprocess ...
crashed with exit code ...") and exits like SGLang's SIGQUIT cleanup.  ``FAKE_SGLANG_FORCE_BACKEND``
makes it report another moe_runner_backend (a server that overrides the flag).  The PD flags
(``--disaggregation-*``, ``--page-size``) are accepted and reported in ``/server_info``.  Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", default="")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--ep-size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--attn-dp-size", type=int, default=1)
    p.add_argument("--moe-runner-backend", default="auto")
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--schedulers", type=int, default=2)
    # PD disaggregation (sglang 0.5.23 ServerArgs names and defaults)
    p.add_argument("--disaggregation-mode", default="null", choices=("null", "prefill", "decode"))
    p.add_argument("--disaggregation-transfer-backend", default="mooncake")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-ib-device", default=None)
    p.add_argument("--page-size", type=int, default=1)
    return p.parse_args()


def log(msg: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", flush=True)


def main() -> int:
    a = _args()
    r = a.node_rank
    log(
        f"server_args: tp_size={a.tp_size} ep_size={a.ep_size} nnodes={a.nnodes} node_rank={r} "
        f"moe_runner_backend={a.moe_runner_backend} chunked_prefill_size={a.chunked_prefill_size}"
    )
    if os.environ.get("HF_TOKEN"):
        # a careless server that echoes a credential: the launcher's log copy must not contain it
        log(f"using Hugging Face token {os.environ['HF_TOKEN']} for downloads")
    log("Init torch distributed begin.")
    children: list[subprocess.Popen[bytes]] = []
    for i in range(a.schedulers):
        code = "import subprocess,time; subprocess.Popen(['sleep','3600']); time.sleep(3600)"
        # scheduler_1 moves to its own process group (same session): killpg of the leader's group alone misses it
        children.append(subprocess.Popen([sys.executable, "-c", code], preexec_fn=os.setpgrp if i == 1 else None))
        log(f"scheduler_{i} started (pid={children[-1].pid})")
    log("Init torch distributed ends.")
    log("Load weight end.")
    log("Memory pool end.")

    info = {
        "model_path": a.model_path,
        "tokenizer_path": a.model_path,
        "trust_remote_code": a.trust_remote_code,
        "host": a.host,
        "port": a.port,
        "tp_size": a.tp_size,
        "ep_size": a.ep_size,
        "dp_size": a.dp_size,
        "attn_dp_size": a.attn_dp_size,  # as sglang 0.5.23 reports it
        "pp_size": a.pp_size,
        "enable_dp_attention": a.enable_dp_attention or a.attn_dp_size > 1,
        "moe_runner_backend": os.environ.get("FAKE_SGLANG_FORCE_BACKEND", a.moe_runner_backend),
        "chunked_prefill_size": (
            a.chunked_prefill_size // a.attn_dp_size
            if a.attn_dp_size > 1 and a.chunked_prefill_size
            else a.chunked_prefill_size // a.dp_size
            if a.enable_dp_attention and a.chunked_prefill_size
            else a.chunked_prefill_size
        ),
        "disable_radix_cache": a.disable_radix_cache,
        "nnodes": a.nnodes,
        "node_rank": r,
        "dist_init_addr": a.dist_init_addr,
        "disaggregation_mode": a.disaggregation_mode,
        "disaggregation_transfer_backend": a.disaggregation_transfer_backend,
        "disaggregation_bootstrap_port": a.disaggregation_bootstrap_port,
        "disaggregation_ib_device": a.disaggregation_ib_device,
        "page_size": a.page_size,
        "version": "0.0.0-fake",
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate", "/ping"):
                body = b""
            elif self.path in ("/server_info", "/get_server_info") and r == 0:
                body = json.dumps(info).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer((a.host, a.port), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    if r == 0:
        log(f"The server is fired up and ready to roll! (http://{a.host}:{a.port})")
    else:
        log(f"dummy health check server on {a.host}:{a.port} (node rank {r})")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(0.2):
        for i, c in enumerate(children):
            rc = c.poll()
            if rc is not None and not stop.wait(0.3):  # a teardown SIGTERMs the whole tree: not a crash
                log(
                    f"Subprocess scheduler_{i} (pid={c.pid}) crashed with exit code {rc}. "
                    "Triggering SIGQUIT for cleanup..."
                )
                log("Received sigquit from a child process. It usually means the child failed.")
                for other in children:
                    if other.poll() is None:
                        other.kill()
                return 1
            if stop.is_set():
                break
    log("Gracefully exiting")
    for c in children:
        c.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
