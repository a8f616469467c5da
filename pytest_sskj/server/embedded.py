"""The embedded CPU engine: a tiny generated GGUF model served by llama.cpp's real HTTP server (xllamacpp).

Three parts (embedded-engine.md §1b-§1d):

* :func:`ensure_tiny_model` writes a deterministic random-weight llama GGUF (2 layers, hidden 64, vocab 512)
  with the ``gguf`` package into a cache directory (atomic write under a file lock, ~1 s, byte-identical
  every time).  A constant "bias channel" (residual dimension 0) keeps byte/control/unused tokens out of
  sampling so a stream has exactly one non-empty chunk per token; ``eos_bias`` steers ``</s>`` the same way
  (-1: never, +1: always first, to prove ``ignore_eos`` is honoured).
* ``python -m pytest_sskj.server.embedded serve --model PATH --host H --port P --parallel N --batch B``
  runs the server in-process, prints ``sskj-embedded: listening on http://H:PORT`` (port 0 binds a free
  one) and exits 0 on SIGTERM/SIGINT.  ``--parallel`` is the slot count (the ``parallel`` backend = 8 slots
  with continuous batching, ``serial`` = 1 slot), ``--batch`` is llama.cpp's ``n_batch`` (the "chunk").
  It computes with 1 thread and no busy-polling by default: on a shared 2-core machine 2 polling threads made
  every step wait for both to be scheduled (10-20x slower under load); ``--threads``/``--poll`` override.
* :func:`serve_argv` is that command line (the ``embedded`` engine's launch, :mod:`pytest_sskj.engines.embedded`);
  :func:`pytest_sskj.server.standalone.embedded_server` runs one outside the pool.

This module imports nothing from pytest_sskj at import time (``rundir`` only where a model is written), so the
engine module and the server layer can both use it, and the server process starts on the standard library and
xllamacpp alone (every server start of a run pays for its imports).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ADDRESS_PATTERN",
    "DEFAULT_BATCH",
    "MODEL_FORMATS",
    "MODEL_VERSION",
    "VOCAB_SIZE",
    "build_tiny_model",
    "ensure_tiny_model",
    "main",
    "serve_argv",
    "tiny_vocab",
]

MODEL_VERSION = 1
VOCAB_SIZE = 512
DEFAULT_BATCH = 512
MODEL_FORMATS = ("f32", "f16", "q8_0", "mxfp4")
"""Tensor formats the generator writes the weight matrices in (norms stay f32): the same weights, quantized --
a legitimate, explainable change of what the model says (output agreement's known-difference control)."""
CTX_PER_SLOT = 4096
ADDRESS_PATTERN = re.compile(r"sskj-embedded: listening on (https?://\S+)")
"""The line the server prints once bound (its base URL is group 1)."""
_EMBED, _HEADS, _KV_HEADS, _FFN, _LAYERS, _CTX_TRAIN = 64, 4, 2, 128, 2, 4096
_WORDS = (
    "the",
    "for",
    "this",
    "is",
    "over",
    "world",
    "hello",
    "quick",
    "brown",
    "fox",
    "jumps",
    "lazy",
    "dog",
    "model",
    "server",
    "token",
    "test",
    "fast",
    "slow",
    "batch",
    "chunk",
    "prefill",
    "decode",
    "cluster",
    "node",
    "rank",
    "expert",
    "kernel",
    "marlin",
    "latency",
    "through",
    "put",
    "and",
    "of",
    "to",
    "in",
)
_PUNCT = ".,;:!?-'\"()[]/"


def tiny_vocab() -> tuple[list[str], list[int]]:
    """Pieces and ``gguf.TokenType`` values of the tiny SentencePiece-style vocabulary (512 entries)."""
    normal, control, unknown, unused, byte = 1, 3, 2, 5, 6
    pieces: list[str] = ["<unk>", "<s>", "</s>"]
    types = [unknown, control, control]
    for b in range(256):
        pieces.append(f"<0x{b:02X}>")
        types.append(byte)
    seen = set(pieces)

    def add(p: str) -> None:
        if p not in seen and len(pieces) < VOCAB_SIZE:
            seen.add(p)
            pieces.append(p)
            types.append(normal)

    add("▁")
    for c in "abcdefghijklmnopqrstuvwxyz":
        add(c)
    for c in "abcdefghijklmnopqrstuvwxyz":
        add("▁" + c)
    for c in "0123456789" + _PUNCT:
        add(c)
    for w in _WORDS:  # every prefix: llama.cpp's SPM merger only merges pairs whose result is in the vocab
        for k in range(2, len(w) + 1):
            add("▁" + w[:k])
    while len(pieces) < VOCAB_SIZE:
        pieces.append(f"<extra_{len(pieces)}>")
        types.append(unused)
    return pieces, types


def _matrix_writer(w: Any, model_format: str) -> Callable[[str, Any], None]:
    """``add(name, array)``: 2-D weight matrices in ``model_format`` (gguf's own quantizer), others as given."""
    import gguf
    import numpy as np

    if model_format not in MODEL_FORMATS:
        raise ValueError(f"model format {model_format!r} unknown; known: {', '.join(MODEL_FORMATS)}")
    qtypes = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "mxfp4": gguf.GGMLQuantizationType.MXFP4}

    def add(name: str, arr: Any) -> None:
        if arr.ndim != 2 or model_format == "f32":
            w.add_tensor(name, arr)
        elif model_format == "f16":
            w.add_tensor(name, arr.astype(np.float16))
        else:
            qt = qtypes[model_format]
            w.add_tensor(name, gguf.quants.quantize(arr, qt), raw_dtype=qt)

    return add


_FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "q8_0": "MOSTLY_Q8_0", "mxfp4": "MOSTLY_MXFP4_MOE"}


TINY_SEED = 1234
"""The weights' seed of the tiny model (another seed: unrelated weights of the same vocabulary)."""


def build_tiny_model(path: Path, *, eos_bias: float = -1.0, seed: int = TINY_SEED, model_format: str = "f32") -> None:
    """Write the tiny llama GGUF to ``path`` (deterministic for a given ``eos_bias``, ``seed`` and format)."""
    import gguf
    import numpy as np

    pieces, types = tiny_vocab()
    rng = np.random.default_rng(seed)
    e, f, v = _EMBED, _FFN, VOCAB_SIZE
    head_dim = e // _HEADS
    e_kv = head_dim * _KV_HEADS

    def rand(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    add = _matrix_writer(w, model_format)
    w.add_name("sskj-tiny-llama")
    w.add_context_length(_CTX_TRAIN)
    w.add_embedding_length(e)
    w.add_block_count(_LAYERS)
    w.add_feed_forward_length(f)
    w.add_head_count(_HEADS)
    w.add_head_count_kv(_KV_HEADS)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(v)
    w.add_file_type(gguf.LlamaFileType[_FILE_TYPES[model_format]])
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores([0.0] * v)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    # bias channel: residual dim 0 is 1.0 in every embedding and nothing writes to it afterwards
    emb = rand(v, e, scale=0.5)
    emb[:, 0] = 1.0
    add("token_embd.weight", emb)
    add("output_norm.weight", np.ones(e, dtype=np.float32))
    out = rand(v, e, scale=0.1)
    out[:, 0] = 0.0
    for i, t in enumerate(types):
        if t != 1:
            out[i, 0] = -8.0
    out[2, 0] = 8.0 * eos_bias  # </s>: -1 never, +1 always
    add("output.weight", out)
    for layer in range(_LAYERS):
        p = f"blk.{layer}."
        attn_out = rand(e, e, scale=0.05)
        attn_out[0, :] = 0.0
        ffn_down = rand(e, f, scale=0.05)
        ffn_down[0, :] = 0.0
        add(p + "attn_norm.weight", np.ones(e, dtype=np.float32))
        add(p + "attn_q.weight", rand(e, e, scale=0.1))
        add(p + "attn_k.weight", rand(e_kv, e, scale=0.1))
        add(p + "attn_v.weight", rand(e_kv, e, scale=0.1))
        add(p + "attn_output.weight", attn_out)
        add(p + "ffn_norm.weight", np.ones(e, dtype=np.float32))
        add(p + "ffn_gate.weight", rand(f, e, scale=0.1))
        add(p + "ffn_up.weight", rand(f, e, scale=0.1))
        add(p + "ffn_down.weight", ffn_down)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny_model_path(
    cache_dir: Path, *, eos_bias: float = -1.0, model_format: str = "f32", seed: int = TINY_SEED
) -> Path:
    """Where :func:`ensure_tiny_model` keeps the tiny model of these parameters in ``cache_dir``."""
    tag = f"{eos_bias:+g}".replace("+", "p").replace("-", "m").replace(".", "_")
    fmt = "" if model_format == "f32" else f"-{model_format}"
    other = "" if seed == TINY_SEED else f"-seed{seed}"
    return cache_dir / f"sskj-tiny-llama-v{MODEL_VERSION}-eos{tag}{fmt}{other}.gguf"


def ensure_tiny_model(
    cache_dir: Path, *, eos_bias: float = -1.0, model_format: str = "f32", seed: int = TINY_SEED
) -> Path:
    """The tiny model for ``eos_bias``, ``model_format`` and weight ``seed`` in ``cache_dir``, generated once
    (atomic, safe across xdist workers)."""
    from filelock import FileLock

    from pytest_sskj.rundir import atomic_target

    cache_dir.mkdir(parents=True, exist_ok=True)
    path = tiny_model_path(cache_dir, eos_bias=eos_bias, model_format=model_format, seed=seed)
    if path.is_file() and path.stat().st_size > 0:
        return path
    with FileLock(str(path) + ".lock"):
        if path.is_file() and path.stat().st_size > 0:
            return path
        with atomic_target(path) as tmp:
            build_tiny_model(tmp, eos_bias=eos_bias, model_format=model_format, seed=seed)
    return path


def serve_argv(
    model: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    slots: int = 8,
    batch: int | None = None,
    threads: int | None = None,
    ubatch: int | None = None,
    alias: str | None = "tiny",
    python: str | None = None,
    draft: str | Path | None = None,
) -> list[str]:
    """The command line of ``python -m pytest_sskj.server.embedded serve`` (the ``embedded`` engine's argv;
    ``draft``: the draft model of speculative decoding)."""
    argv = [
        python or sys.executable,
        "-m",
        "pytest_sskj.server.embedded",
        "serve",
        "--model",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--parallel",
        str(slots),
    ]
    if batch is not None:
        argv += ["--batch", str(batch)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    if ubatch is not None:
        argv += ["--ubatch", str(ubatch)]
    if alias:
        argv += ["--alias", alias]
    if draft is not None:
        argv += ["--draft", str(draft)]
    return argv


# --- the server process ----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m pytest_sskj.server.embedded",
        description="pytest-sskj's embedded CPU engine (llama.cpp server via xllamacpp)",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve a GGUF model over HTTP until SIGTERM/SIGINT")
    s.add_argument("--model", required=True, help="GGUF file")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=0, help="0 binds a free port (printed on stdout)")
    s.add_argument("--parallel", type=int, default=8, help="slots (concurrent sequences); 1 serializes requests")
    s.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="n_batch: tokens per prefill step (chunk)")
    s.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared 2-core CI box, 2 threads made every step wait for both to be "
        "scheduled, 10-20x slower under load)",
    )
    s.add_argument("--ubatch", type=int, default=None, help="n_ubatch (default min(--batch, 512))")
    s.add_argument("--ctx-per-slot", type=int, default=CTX_PER_SLOT, help="context tokens per slot")
    s.add_argument(
        "--poll",
        type=int,
        default=0,
        help="llama.cpp threadpool busy-poll level 0-100 (0: sleep, friendly to shared CPUs)",
    )
    s.add_argument(
        "--nice",
        type=int,
        default=10,
        help="niceness increment of the server process (default 10): on a CPU box the server shares cores "
        "with the benchmark client, which must not wait behind the server it measures (client-bound points)",
    )
    s.add_argument("--alias", default=None, help="model name served by /v1/models")
    s.add_argument(
        "--draft",
        default=None,
        help="GGUF of a draft model of the same vocabulary: llama.cpp's draft-model speculative decoding",
    )
    s.add_argument("--draft-max", type=int, default=4, help="most draft tokens per verification step")
    s.add_argument("--no-metrics", action="store_true", help="disable the Prometheus /metrics endpoint")
    s.add_argument("--hf-token", default=None, help="Hugging Face token (llama.cpp's --hf-token, for model downloads)")
    m = sub.add_parser("make-model", help="write the tiny GGUF model")
    m.add_argument("path", type=Path)
    m.add_argument("--eos-bias", type=float, default=-1.0)
    m.add_argument("--format", choices=MODEL_FORMATS, default="f32", help="tensor format of the weight matrices")
    return ap


def _own_cores(fallback: int) -> int:
    """How many cores are this server's: ``SSKJ_SERVER_CPUS`` (the launcher's partition; a prepared server
    starts on more cores and is moved onto these), else this process's affinity, else ``fallback``."""
    given = os.environ.get("SSKJ_SERVER_CPUS", "").strip()
    if given:
        from pytest_sskj.server.cpus import parse_cpus  # (xllamacpp imports what it needs anyway)

        try:
            return max(1, len(parse_cpus(given)))
        except ValueError:
            pass
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else fallback


def _serve(a: argparse.Namespace) -> int:
    import signal

    import xllamacpp as xlc

    if a.parallel < 1 or a.batch < 1:
        sys.stderr.write(f"sskj-embedded: --parallel ({a.parallel}) and --batch ({a.batch}) must be >= 1\n")
        return 2
    if a.draft and not Path(a.draft).is_file():
        sys.stderr.write(f"sskj-embedded: draft model file {a.draft} does not exist\n")
        return 2
    if not Path(a.model).is_file():
        sys.stderr.write(
            f"sskj-embedded: model file {a.model} does not exist; generate it with "
            "`python -m pytest_sskj.server.embedded make-model PATH`\n"
        )
        return 2
    # Block SIGTERM/SIGINT before the server starts its threads (they inherit the mask), then take them
    # synchronously in this thread: a signal delivered to a C++ worker thread would never wake us.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    # never more compute threads than the cores this process may run on (a CPU partition gives it fewer)
    threads = max(1, min(a.threads, _own_cores(a.threads)))
    if a.nice:
        # before the server starts its threads: they inherit it.  In its own session (autogroup) this ranks the
        # server's threads only among themselves; the client is kept apart by the CPU partition instead
        os.nice(a.nice)
    p = xlc.CommonParams()
    p.model.path = str(a.model)
    if a.alias:
        p.model_alias = [a.alias]  # a set<string>: a bare str would become its letters
    p.n_ctx = a.ctx_per_slot * a.parallel
    p.n_parallel = a.parallel
    p.cont_batching = True
    p.n_batch = a.batch
    p.n_ubatch = a.ubatch if a.ubatch else min(a.batch, DEFAULT_BATCH)
    p.cpuparams.n_threads = threads
    p.cpuparams_batch.n_threads = threads
    p.cpuparams.poll = a.poll
    p.cpuparams_batch.poll = a.poll
    p.hostnames = [a.host]
    p.port = a.port
    p.endpoint_metrics = not a.no_metrics
    if a.draft:
        p.speculative.types = [xlc.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        p.speculative.draft.mparams.path = str(a.draft)
        p.speculative.draft.n_max = a.draft_max
        p.speculative.draft.cpuparams.n_threads = threads
        p.speculative.draft.cpuparams_batch.n_threads = threads
    if a.hf_token:
        p.hf_token = a.hf_token
    # like SGLang's ``server_args=ServerArgs(...)`` line: the log echoes every argument (so a copied log
    # must go through the redactor)
    sys.stdout.write(f"sskj-embedded: server args: {vars(a)}\n")
    try:
        server = xlc.Server(p)
    except RuntimeError as exc:
        sys.stderr.write(f"sskj-embedded: {exc}\n")
        return 1
    sys.stdout.write(
        f"sskj-embedded: listening on {server.listening_address} "
        f"(slots {a.parallel}, n_batch {a.batch}, threads {threads}, pid {os.getpid()})\n"
    )
    sys.stdout.flush()
    received = signal.sigwait(stop_signals)
    sys.stdout.write(f"sskj-embedded: stopping on {signal.Signals(received).name}\n")
    sys.stdout.flush()
    _exit_if_cleanup_hangs(STOP_CLEANUP_S)
    del server
    return 0


STOP_CLEANUP_S = 2.0
"""How long the server's own cleanup may take after a stop signal: llama.cpp's HTTP server waits for open
requests while "cleaning up" (issue 27: 15 s, the pool's whole grace); past this the process exits anyway."""


def _exit_if_cleanup_hangs(limit_s: float) -> None:
    import threading

    def hard_exit() -> None:
        sys.stdout.write(f"sskj-embedded: cleanup did not finish within {limit_s:g} s (requests open?); exiting\n")
        sys.stdout.flush()
        os._exit(0)

    timer = threading.Timer(limit_s, hard_exit)
    timer.daemon = True
    timer.start()


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.cmd == "make-model":
        path = Path(a.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        build_tiny_model(path, eos_bias=a.eos_bias, model_format=a.format)
        sys.stdout.write(f"{path}\n")
        return 0
    return _serve(a)


if __name__ == "__main__":
    raise SystemExit(main())
