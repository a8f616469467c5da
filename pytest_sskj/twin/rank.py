"""One stand-in SGLang rank: what ``python -m sglang.launch_server ...`` runs on a twin node.

Started by the real launcher with the exact argv pytest-sskj generates (the shim package
``pytest_sskj/twin/shim/sglang`` is first on the node's ``PYTHONPATH``, see :mod:`pytest_sskj.twin.plugin`).
It parses its flags strictly (:mod:`pytest_sskj.twin.args`; rank 0 also with the real sglang parser when
``SSKJ_TWIN_SGLANG_PYTHON`` names one), logs SGLang's start-up lines (the healthy markers of
``engines/sglang.py``), meets the other ranks at ``--dist-init-addr`` (rank 0 listens, ranks >= 1 connect and
stay connected; a lost peer is logged as an NCCL error and ends the rank, as a real collective would), and
then serves: rank 0 SGLang's HTTP surface (:mod:`pytest_sskj.twin.api`) paced by the serving model of the
cell of its configuration in the twin model file (``SSKJ_TWIN_MODEL``), ranks >= 1 SGLang's dummy health
server.  A prefill rank 0 of a PD deployment also serves the bootstrap port, where decode ranks wait for a
room's KV.  SIGTERM ends it cleanly (the launcher's teardown).  Stdlib only.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_sskj.twin.args import parse, resolve_real, server_info
from pytest_sskj.twin.engine import ServingEngine
from pytest_sskj.twin.model import Fault, ModelError, TwinModel, load_model
from pytest_sskj.twin.speculative import Draft

__all__ = ["DEFAULT_MODEL", "main", "server_facts"]

DEFAULT_MODEL = Path(__file__).resolve().parent / "data" / "kimi3-pro6000.toml"


def log(msg: str) -> None:
    """One SGLang-style log line on stdout, flushed at once (the launcher streams the file it goes to)."""
    sys.stdout.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}\n")
    sys.stdout.flush()


def server_facts(a: Any) -> dict[str, Any]:
    """What a model cell is matched on: PD role, parallel sizes as requested, backend, requested chunk."""
    return {
        "role": {"null": "serve"}.get(a.disaggregation_mode, a.disaggregation_mode),
        "tp": a.tp_size,
        "ep": a.ep_size,
        "dp": max(a.dp_size, a.attn_dp_size),
        "pp": a.pp_size,
        "backend": a.moe_runner_backend,
        "chunk": a.chunked_prefill_size,
    }


class _Peers:
    """The rendezvous at ``--dist-init-addr``: rank 0 accepts nnodes-1 connections, ranks >= 1 connect to it."""

    def __init__(self, a: Any, stopping: threading.Event) -> None:
        self.a = a
        self.stopping = stopping
        self.socks: list[socket.socket] = []

    def join(self, timeout_s: float = 120.0) -> None:
        a = self.a
        if a.nnodes <= 1:
            return
        if not a.dist_init_addr:
            log("ValueError: --dist-init-addr is required when --nnodes > 1")
            raise SystemExit(1)
        host, _, port = a.dist_init_addr.rpartition(":")
        if a.node_rank == 0:
            srv = socket.create_server(("0.0.0.0", int(port)), reuse_port=False)  # noqa: S104 - the nodes' rendezvous
            srv.settimeout(timeout_s)
            while len(self.socks) < a.nnodes - 1:
                conn, _ = srv.accept()
                rank = conn.makefile().readline().strip()
                log(f"node rank {rank} joined the process group ({len(self.socks) + 2}/{a.nnodes})")
                self.socks.append(conn)
            srv.close()
        else:
            deadline = time.perf_counter() + timeout_s
            while True:
                try:
                    conn = socket.create_connection((host, int(port)), timeout=5.0)
                    break
                except OSError:
                    if time.perf_counter() > deadline:
                        log(f"torch.distributed.DistNetworkError: failed to connect to {a.dist_init_addr}")
                        raise SystemExit(1) from None
                    time.sleep(0.2)
            conn.sendall(f"{a.node_rank}\n".encode())
            self.socks.append(conn)
        for s in self.socks:
            s.settimeout(None)
            threading.Thread(target=self._watch, args=(s,), daemon=True).start()

    def _watch(self, s: socket.socket) -> None:
        try:
            while s.recv(64):
                pass
        except OSError:
            pass
        if self.stopping.wait(2.0):  # a teardown stops every rank at once: not a failure
            return
        log(
            "torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error, "
            f"NCCL version 2.27.3 (node rank {self.a.node_rank} lost a peer of the process group)"
        )
        os._exit(1)


class _Faults:
    """The model's ``[[faults]]`` of this rank: their lines are logged once it was sent enough requests."""

    def __init__(self, faults: tuple[Fault, ...], role: str, node_rank: int) -> None:
        self.pending = [f for f in faults if f.applies(role, node_rank)]
        self.requests = 0
        self._lock = threading.Lock()

    def on_request(self) -> None:
        with self._lock:
            self.requests += 1
            due = [f for f in self.pending if self.requests >= f.after_requests]
            self.pending = [f for f in self.pending if f not in due]
        for f in due:
            for line in f.lines:
                log(line)

    def at_start(self) -> None:
        """A rank >= 1 is sent no requests: its faults fire once it is up."""
        for f in self.pending:
            for line in f.lines:
                log(line)
        self.pending = []


def _load(a: Any) -> tuple[TwinModel, list[Any]]:
    path = Path(os.environ.get("SSKJ_TWIN_MODEL") or DEFAULT_MODEL)
    try:
        model = load_model(path)
    except ModelError as exc:
        log(f"Initialization failed. warmup error: {exc}")
        raise SystemExit(1) from None
    facts = server_facts(a)
    cells = model.candidates(facts)
    if not cells:
        log(f"Initialization failed. warmup error: {model.describe(facts)}")
        raise SystemExit(1)
    return model, cells


def _answers(model: TwinModel, backend: str | None) -> Callable[[str], str | None] | None:
    """The greedy answers of this rank's backend to the run's accuracy questions (``SSKJ_TWIN_ANSWERS``: the
    question file; unset: no answer key, text prompts are refused)."""
    path = os.environ.get("SSKJ_TWIN_ANSWERS", "")
    if not path:
        return None
    from pytest_sskj.accuracy.gsm8k import AccuracySetError
    from pytest_sskj.twin.answers import AnswerKey

    try:
        key = AnswerKey.load(Path(path), model.accuracy, model.seed)
    except (AccuracySetError, OSError) as exc:
        log(f"Initialization failed. warmup error: twin answer key {path}: {exc}")
        raise SystemExit(1) from None
    name = backend or "default"
    stated = model.accuracy.get(name)
    said = (
        f"{stated:.1%} of them right" if stated is not None else "every one right (the model file states no accuracy)"
    )
    log(f"twin: answer key {path} ({len(key.references)} questions): backend {name} answers {said}")
    return lambda prompt: key.answer(prompt, name)


def _draft(model: TwinModel, info: dict[str, Any], backend: str | None) -> Draft | None:
    """The draft of a server launched with ``--speculative-algorithm`` (``None`` without): its acceptance from the
    model file's ``[speculative]``, its draft tokens per step as sglang resolved them (``info``: the real
    resolution where it ran, else the flags).  A model file that cannot say is a start-up failure, as a draft
    sglang cannot load is."""
    algo = info.get("speculative_algorithm")
    if not algo:
        return None
    spec, name = model.speculative, backend or "auto"
    rate = spec.rate(name, str(algo)) if spec is not None else None
    tokens = info.get("speculative_num_draft_tokens")
    if spec is None or rate is None or not isinstance(tokens, int) or tokens < 2:
        why = (
            f"twin model {model.name!r} has no [speculative] acceptance for {name}/{algo}"
            if spec is None or rate is None
            else f"no draft token count for {algo} (give --speculative-num-draft-tokens, or resolve with real sglang)"
        )
        log(f"Initialization failed. speculative worker error: {why}")
        raise SystemExit(1)
    log(f"twin: speculative {algo}: {tokens - 1} draft token(s) per verify step, each accepted with p={rate:g}")
    return Draft(rate, tokens - 1, spec.draft_cost, f"{model.seed}|{name}|{algo}")


def _info(a: Any, argv: list[str]) -> dict[str, Any]:
    info = server_info(a)
    python = os.environ.get("SSKJ_TWIN_SGLANG_PYTHON", "")
    if python and a.node_rank == 0:
        with tempfile.TemporaryDirectory(prefix="sskj-twin-") as tmp:
            real, why = resolve_real(python, argv, Path(tmp))
        log(f"twin: {why}")
        if real is not None:
            info = {**real, "nnodes": a.nnodes, "node_rank": a.node_rank}
    return info


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    a = parse(argv)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    shown = " ".join(f"{k}={v!r}" for k, v in server_info(a).items() if k not in ("version",))
    log(f"server_args=ServerArgs({shown})")
    model, cells = _load(a)
    log(f"twin: model {model.name} ({model.path}), {len(cells)} cell(s), time scale {model.time_scale:g}")
    log("Init torch distributed begin.")
    peers = _Peers(a, stopping)
    peers.join()
    log("Init torch distributed ends. mem usage=0.00 GB")
    info = _info(a, argv)
    log("Load weight end. type=stand-in, dtype=torch.bfloat16, avail mem=0.00 GB, mem usage=0.00 GB.")
    log("Memory pool end. avail mem=0.00 GB")
    from pytest_sskj.twin.api import serve

    role = server_facts(a)["role"]
    engine = None
    if a.node_rank == 0:
        label = "/".join(f"{k}={v}" for k, v in server_facts(a).items())
        calibrated = os.environ.get("SSKJ_TWIN_CALIBRATION", "on") != "off"  # off: to see what calibration buys
        if not calibrated:
            log("twin: calibration switched off (SSKJ_TWIN_CALIBRATION=off): each cell's figures at face value")
        draft = _draft(model, info, server_facts(a)["backend"])
        engine = ServingEngine(
            model, cells, chunk=a.chunked_prefill_size, role=role, label=label, calibrated=calibrated, draft=draft
        )
    faults = _Faults(model.faults, role, a.node_rank)
    answers = _answers(model, server_facts(a)["backend"]) if a.node_rank == 0 else None
    context = a.context_length or model.context_length
    if context and a.node_rank == 0:
        log(f"twin: context length {context} tokens ({'--context-length' if a.context_length else 'model file'})")
    servers = serve(a, info, engine, log, faults.on_request if faults.pending else None, answers, context)
    if a.node_rank == 0:
        log(f"The server is fired up and ready to roll! (http://{a.host}:{a.port})")
    else:
        log(f"Dummy health check server started on {a.host}:{a.port} (node rank {a.node_rank})")
        faults.at_start()
    while not stopping.wait(0.2):
        pass
    log("Gracefully exiting")
    for s in servers:
        s.shutdown()
    if engine is not None:
        engine.stop()
    return 0
