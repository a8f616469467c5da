"""SGLang's HTTP surface, as a stand-in rank serves it (stdlib ``http.server``, HTTP/1.1, chunked SSE).

Rank 0: ``/health``, ``/health_generate`` (200 once ready), ``/server_info`` (``/get_server_info``: the parsed
and resolved ``ServerArgs`` plus ``version``), ``/model_info``, ``/v1/models``, ``/get_load``,
``/flush_cache`` (starts a new repeat of the serving model), ``POST /generate`` (``input_ids``; streamed
cumulative ``output_ids``/``text`` frames with ``meta_info``, or one JSON answer) and ``POST
/v1/completions`` (token-id ``prompt``; streamed one frame per token, ``usage`` in the stream when asked).
Every answer is paced by the :class:`~pytest_sskj.twin.engine.ServingEngine`: the handler only forwards
what the engine emits, when it emits it.  PD: a prefill rank 0 also serves its bootstrap port (``GET
/twin/kv?room=R``: answers once that room's prefill finished); a decode rank 0 waits there for a request's
``bootstrap_room`` before it decodes.  Ranks >= 1: the dummy health server (``/health``, ``/health_generate``,
``/ping`` always 200).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

from pytest_sskj.twin.engine import Request, ServingEngine, token_ids

__all__ = ["serve"]


def _text(ids: list[int]) -> str:
    return "".join(f" t{i}" for i in ids)


def text_ids(text: str) -> list[int]:
    """The stand-in's tokenizer: one token per 4 bytes of UTF-8 (about a real tokenizer's rate on English)."""
    data = text.encode()
    return [int.from_bytes(data[i : i + 4], "big") % 151_000 for i in range(0, len(data), 4)] or [0]


def _words(answer: str, n: int) -> str:
    """The first ``n`` tokens of an answer (one token per word)."""
    return "".join(f" {w}" for w in answer.split()[:n])


NO_QUESTION = " I cannot tell which question this is."
"""A text prompt that is not one of the answer key's questions gets no number."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    info: ClassVar[dict[str, Any]] = {}
    engine: ServingEngine | None = None
    rank: int = 0
    kv_wait_s: float = 600.0
    on_request: Callable[[], None] | None = None
    """Called once per generation request received (the model's ``[[faults]]`` count them)."""
    answers: Callable[[str], str | None] | None = None
    context_len: int | None = None
    """The context length this server refuses past (``None``: no limit), as sglang's ``_validate_one_request``."""
    """The greedy answer to a text prompt (:class:`~pytest_sskj.twin.answers.AnswerKey` of this rank's backend);
    ``None``: the rank has no answer key and refuses text prompts."""

    def log_message(self, *args: object) -> None:
        pass

    # -- plumbing ------------------------------------------------------------------------------------------
    def _json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _plain(self, text: str, status: int = 200) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        data = json.loads(self.rfile.read(n) or b"{}") if n else {}
        return data if isinstance(data, dict) else {}

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _sse(self, obj: Any) -> None:
        self._chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

    def _sse_end(self) -> None:
        self._sse(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # -- GET -----------------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = urlparse(self.path).path
        eng = self.engine
        if path in ("/health", "/health_generate", "/ping"):
            self._plain("")
        elif self.rank != 0:
            self.send_error(404)
        elif path in ("/server_info", "/get_server_info"):
            load = eng.inflight if eng else 0
            self._json({**self.info, "internal_states": [{"num_running_reqs": load}], "startup_time": 0.0})
        elif path in ("/model_info", "/get_model_info"):
            mp = self.info.get("model_path")
            self._json({"model_path": mp, "tokenizer_path": mp, "is_generation": True, "weight_version": "default"})
        elif path == "/v1/models":
            name = self.info.get("served_model_name") or self.info.get("model_path")
            card = {"id": name, "object": "model", "owned_by": "sglang", "max_model_len": self.context_len}
            self._json({"object": "list", "data": [card]})
        elif path == "/get_load":
            self._json([{"dp_rank": 0, "num_reqs": eng.inflight if eng else 0}])
        elif path == "/flush_cache":
            self._flush()
        elif path == "/twin/kv" and eng is not None:
            room = parse_qs(urlparse(self.path).query).get("room", [""])[0]
            ok = eng.wait_kv(room, self.kv_wait_s)
            self._json({"room": room, "ready": ok}, 200 if ok else 504)
        else:
            self.send_error(404)

    def _flush(self) -> None:
        if self.engine is not None and self.engine.inflight:
            self._plain("Cache not flushed: there are running or waiting requests.", 400)
            return
        if self.engine is not None:
            self.engine.new_repeat()
        self._plain("Cache flushed.\nPlease check backend logs for more details. ")

    # -- POST ----------------------------------------------------------------------------------------------
    def do_POST(self) -> None:
        path = urlparse(self.path).path
        if self.rank != 0 or self.engine is None:
            self.send_error(404)
            return
        if path == "/flush_cache":
            self._body()
            self._flush()
            return
        if path not in ("/generate", "/v1/completions"):
            self.send_error(404)
            return
        body = self._body()
        if self.on_request is not None:
            self.on_request()
        prompt, answer, error = self._prompt(path, body)
        if error:
            self._json({"error": {"message": error}}, 400)
            return
        sp = body.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens", 128) if path == "/generate" else body.get("max_tokens", 16))
        if answer is not None:
            max_new = max(1, min(max_new, len(answer.split())))
        refused = self._too_long(len(prompt), max_new)
        if refused:
            self._json({"error": {"message": refused}}, 400)
            return
        req = self._submit(prompt, max_new, body)
        if req is None:
            self._json({"error": {"message": f"KV of room {body.get('bootstrap_room')} never arrived"}}, 500)
            return
        if path == "/generate":
            self._generate(req, bool(body.get("stream")), answer)
        else:
            self._completions(req, body, answer)

    def _too_long(self, n: int, max_new: int) -> str:
        """sglang 0.5.23's refusal of a request past the context length (``""``: none): the input alone at or past
        it, or the input plus the requested output past it (no ``--allow-auto-truncate`` here)."""
        c = self.context_len
        if c is None:
            return ""
        if n >= c:
            return f"The input ({n} tokens) is longer than the model's context length ({c} tokens)."
        if n + max_new > c:
            return (
                f"Requested token count exceeds the model's maximum context length of {c} tokens. You requested a "
                f"total of {n + max_new} tokens: {n} tokens from the input messages and {max_new} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        return ""

    def _prompt(self, path: str, body: dict[str, Any]) -> tuple[list[int], str | None, str]:
        """The request's token ids, the answer of a text prompt (``None``: a token-id prompt) and an error
        (``""``: none): ``/generate`` takes ``input_ids`` or ``text``, ``/v1/completions`` a ``prompt`` of either."""
        prompt = body.get("input_ids") if path == "/generate" else body.get("prompt")
        text = body.get("text") if path == "/generate" else prompt
        if isinstance(text, str) and text:
            if self.answers is None:
                why = "text prompts are answered only with an answer key (SSKJ_TWIN_ANSWERS: --sskj-accuracy-set)"
                return [], None, f"the stand-in takes token-id prompts; {why}"
            return text_ids(text), self.answers(text) or NO_QUESTION, ""
        if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
            return [], None, "the stand-in takes token-id prompts (input_ids / prompt)"
        return prompt, None, ""

    def _submit(self, prompt: list[int], max_new: int, body: dict[str, Any]) -> Request | None:
        eng = self.engine
        assert eng is not None
        room = body.get("bootstrap_room")
        if eng.role == "decode" and room is not None:
            host, port = body.get("bootstrap_host"), body.get("bootstrap_port") or 8998
            url = f"http://{host}:{port}/twin/kv?room={room}"
            try:
                with urllib.request.urlopen(url, timeout=self.kv_wait_s + 5) as r:
                    if r.status != 200:
                        return None
            except OSError:
                return None
            return eng.submit_decode(prompt, max_new)
        return eng.submit(prompt, max_new, room=str(room) if room is not None else None)

    def _meta(self, req: Request, done: bool, rid: str) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": {"type": "length", "length": req.emitted} if done else None,
            "prompt_tokens": len(req.prompt),
            "weight_version": "default",
            "completion_tokens": req.emitted,
            "cached_tokens": 0,
        }
        if done:
            meta["e2e_latency"] = time.perf_counter() - req.arrival
        steps, correct, proposed = req.spec
        if steps > 0:  # sglang's per-request speculative counts (tokenizer_manager: when spec_verify_ct > 0)
            meta.update(
                spec_verify_ct=steps,
                spec_num_correct_drafts=correct,
                spec_num_proposed_drafts=proposed,
                spec_accept_rate=correct / proposed if proposed else 0.0,
                spec_accept_length=req.emitted / steps,
            )
        return meta

    def _generate(self, req: Request, stream: bool, answer: str | None = None) -> None:
        rid = uuid.uuid4().hex
        if not stream:
            while not req.events.get()[1]:
                pass
            ids = req.output_ids
            text = _text(ids) if answer is None else _words(answer, len(ids))
            self._json({"text": text, "output_ids": ids, "meta_info": self._meta(req, True, rid)})
            return
        self._sse_start()
        while True:
            n, done = _latest(req)
            ids = token_ids(req.prompt, n)
            text = _text(ids) if answer is None else _words(answer, n)
            self._sse({"text": text, "output_ids": ids, "meta_info": self._meta(req, done, rid)})
            if done:
                break
        self._sse_end()

    def _completions(self, req: Request, body: dict[str, Any], answer: str | None = None) -> None:
        rid, model = f"cmpl-{uuid.uuid4().hex}", body.get("model") or self.info.get("served_model_name")
        usage = {"prompt_tokens": len(req.prompt)}
        if not body.get("stream"):
            while not req.events.get()[1]:
                pass
            ids = req.output_ids
            text = _text(ids) if answer is None else _words(answer, len(ids))
            choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
            usage.update(completion_tokens=len(ids), total_tokens=len(ids) + len(req.prompt))
            self._json({"id": rid, "object": "text_completion", "model": model, "choices": [choice], "usage": usage})
            return
        self._sse_start()
        while True:
            n, done = req.events.get()
            word = (answer.split()[n - 1 : n] or [""])[0] if answer is not None and n else ""
            piece = f" {word}" if answer is not None else f" t{token_ids(req.prompt, n)[-1]}"
            choice = {"index": 0, "text": piece, "logprobs": None}
            choice["finish_reason"] = "length" if done else None
            self._sse({"id": rid, "object": "text_completion", "model": model, "choices": [choice]})
            if done:
                break
        if (body.get("stream_options") or {}).get("include_usage"):
            usage.update(completion_tokens=req.emitted, total_tokens=req.emitted + len(req.prompt))
            self._sse({"id": rid, "object": "text_completion", "model": model, "choices": [], "usage": usage})
        self._sse_end()


def _latest(req: Request) -> tuple[int, bool]:
    """The request's newest state, every event queued behind it drained, as SGLang's tokenizer manager drains
    ``state.out_list`` and sends its last (cumulative) entry: a writer that fell behind sends one frame with
    every token emitted meanwhile, never a backlog of frames (the client counts ``completion_tokens``)."""
    n, done = req.events.get()
    while not done:
        try:
            n, done = req.events.get_nowait()
        except queue.Empty:
            break
    return n, done


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # every concurrent client connects at once (the stdlib default backlog is 5)
    daemon_threads = True


def _start(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    httpd = _Server((host, port), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True, name=f"twin-http-{port}").start()
    return httpd


def serve(
    a: Any,
    info: dict[str, Any],
    engine: ServingEngine | None,
    log: Callable[[str], None],
    on_request: Callable[[], None] | None = None,
    answers: Callable[[str], str | None] | None = None,
    context_len: int | None = None,
) -> list[Any]:
    """Start this rank's HTTP server(s); returns them (``shutdown()`` each at exit).

    ``on_request`` is called once per ``/generate`` or ``/v1/completions`` request received; ``answers`` gives
    the greedy answer to a text prompt (``None``: text prompts are refused)."""
    hook = staticmethod(on_request) if on_request is not None else None  # a plain function, not a method
    answer_hook = staticmethod(answers) if answers is not None else None
    attrs = {"info": info, "engine": engine, "rank": a.node_rank, "on_request": hook, "answers": answer_hook,
             "context_len": context_len}  # fmt: skip
    handler = type("Handler", (_Handler,), attrs)
    servers = [_start(a.host, a.port, handler)]
    if engine is not None and engine.role == "prefill":
        servers.append(_start(a.host, a.disaggregation_bootstrap_port, handler))
        log(f"bootstrap server started on {a.host}:{a.disaggregation_bootstrap_port}")
    return servers
