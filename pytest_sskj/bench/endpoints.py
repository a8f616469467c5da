"""Endpoint adapters: what each serving API wants in a request and what one of its stream frames means.

Three adapters implement :class:`Endpoint`: SGLang's native ``POST /generate`` (token-id prompt in
``input_ids``, cumulative ``output_ids``/``text`` frames with ``meta_info``), OpenAI ``/v1/completions``
(token-id list ``prompt``, ``max_tokens``, ``ignore_eos``, ``stream_options.include_usage``) and
``/v1/chat/completions`` (a text prompt built from the ids).  An adapter only builds payloads and turns
one decoded JSON frame into a :class:`FrameInfo` (new content tokens, finish reason, server token
counts, error); the single timing loop in :mod:`pytest_sskj.bench.client` does everything else.

Token counting per frame: ``/generate`` counts exactly, from the growth of ``meta_info.completion_tokens``
(or of ``len(output_ids)`` when the server omits it).  The OpenAI endpoints carry no token ids by default,
so a frame with non-empty text (chat: content, ``reasoning_content`` or ``reasoning``) counts as one token
and a role-only or usage-only frame as none; the server's ``usage.completion_tokens`` stays the authority
for the request's output length (see :mod:`pytest_sskj.bench.metrics`).  ``/v1/completions`` with
``token_ids=True`` asks for ``"return_token_ids": true`` (vLLM): every content frame then carries the ids
it adds (``choices[0].token_ids``), so a frame of several merged tokens counts them all and a ``"text": ""``
frame (partial UTF-8) still counts its token; a content frame without ids is an error, never a guess.

``/generate`` frames repeat the whole output so far, so decoding every frame in full is O(n^2) per
request; its adapter decodes only the trailing ``meta_info`` object when the frame has one (a ``"meta_info":``
key can only be a key: inside a JSON string the quotes would be escaped) and the full frame otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

__all__ = [
    "ENDPOINT_NAMES",
    "BadFrame",
    "ChatEndpoint",
    "CompletionsEndpoint",
    "Endpoint",
    "FrameDecoder",
    "FrameInfo",
    "GenerateEndpoint",
    "chat_words",
    "get_endpoint",
    "loads_batch",
]

ENDPOINT_NAMES = ("completions", "generate", "chat")

# Words that are one token each in the embedded tiny model's vocab and, with the leading space, in the
# common BPE vocabularies; the chat prompt is made of them (chat cannot take token ids).
_CHAT_WORDS = ("the", "for", "this", "is", "over", "world")


class FrameInfo(NamedTuple):
    """What one stream frame says, in endpoint-neutral terms."""

    tokens: int
    """New content tokens carried by this frame (0 for role-only, usage-only and meta frames)."""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    spec: tuple[int, int, int] | None = None
    """The request's speculative counts so far, where the server reports them per request (SGLang ``meta_info``:
    ``spec_verify_ct``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``)."""


_EMPTY = FrameInfo(0)


def _spec_of(meta: dict[str, Any]) -> tuple[int, int, int] | None:
    """SGLang's per-request speculative counts in a ``meta_info`` (present when ``spec_verify_ct > 0``)."""
    steps = meta.get("spec_verify_ct")
    if steps.__class__ is not int:
        return None
    correct, proposed = meta.get("spec_num_correct_drafts"), meta.get("spec_num_proposed_drafts")
    return (steps, correct if correct.__class__ is int else 0, proposed if proposed.__class__ is int else 0)


class FrameDecoder(Protocol):
    """Per-request state of an adapter (``/generate`` frames are cumulative, so it must remember)."""

    def decode(self, obj: Any) -> FrameInfo:
        """Interpret one JSON-decoded frame."""
        ...


class Endpoint(Protocol):
    """One serving API: its path, its request body and its frame decoder."""

    name: str
    path: str
    exact_prompt: bool
    """Whether the prompt is sent as token ids, so the server's ``prompt_tokens`` must equal the ISL."""
    exact_tokens: bool
    """Whether per-frame token counts come from the server's ids (else one token per content frame)."""

    def payload(self, prompt_ids: Sequence[int], osl: int, *, model: str | None, ignore_eos: bool) -> dict[str, Any]:
        """The JSON body of one streaming request."""
        ...

    def decoder(self) -> FrameDecoder:
        """A fresh decoder for one request."""
        ...

    def loads_many(self, datas: list[str]) -> list[Any]:
        """Decode the frames of one read, in order; a frame that is not JSON becomes a :class:`BadFrame`."""
        ...

    def read_info(self, datas: list[str], decoder: FrameDecoder) -> FrameInfo | None:
        """One read's counts without decoding every frame, where the API allows it; ``None``: decode each."""
        ...


def frame_error(obj: Any) -> str | None:
    """The error a frame reports (``{"error": ...}`` or ``{"object": "error", ...}``), else None."""
    err = obj.get("error")
    if err:
        if isinstance(err, dict):
            msg = err.get("message") or err
            code = err.get("code")
            return f"server error frame: {msg}" + (f" (code {code})" if code is not None else "")
        return f"server error frame: {err}"
    if obj.get("object") == "error":
        return f"server error frame: {obj.get('message', obj)}"
    return None


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _usage(obj: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        return None, None
    return _int_or_none(usage.get("prompt_tokens")), _int_or_none(usage.get("completion_tokens"))


class _CompletionsDecoder:
    __slots__ = ()

    def decode(self, obj: Any) -> FrameInfo:
        err = frame_error(obj)
        if err:
            return FrameInfo(0, error=err)
        tokens = 0
        finish = None
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            if c.get("text"):
                tokens = 1
            finish = c.get("finish_reason")
        pt, ct = _usage(obj)
        if not tokens and finish is None and pt is None and ct is None:
            return _EMPTY
        return FrameInfo(tokens, finish, pt, ct)


class _CompletionsIdsDecoder:
    """``/v1/completions`` frames of a request sent with ``"return_token_ids": true``."""

    __slots__ = ()

    def decode(self, obj: Any) -> FrameInfo:
        err = frame_error(obj)
        if err:
            return FrameInfo(0, error=err)
        tokens = 0
        finish = None
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            ids = c.get("token_ids")
            finish = c.get("finish_reason")
            if isinstance(ids, list):
                tokens = len(ids)
            elif c.get("text"):
                return FrameInfo(
                    0, finish, error="content frame without token_ids: the server ignored return_token_ids"
                )
        pt, ct = _usage(obj)
        return FrameInfo(tokens, finish, pt, ct)


class _ChatDecoder:
    __slots__ = ()

    def decode(self, obj: Any) -> FrameInfo:
        err = frame_error(obj)
        if err:
            return FrameInfo(0, error=err)
        tokens = 0
        finish = None
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            delta = c.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                tokens = 1
            finish = c.get("finish_reason")
        pt, ct = _usage(obj)
        return FrameInfo(tokens, finish, pt, ct)


class _GenerateDecoder:
    """SGLang ``/generate`` frames carry the cumulative output (unless ``--incremental-streaming-output``,
    where ``output_ids`` is a delta; ``meta_info.completion_tokens`` is cumulative in both modes)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen = 0

    def decode(self, obj: Any) -> FrameInfo:
        err = frame_error(obj)
        if err:
            return FrameInfo(0, error=err)
        meta = obj.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        ct = _int_or_none(meta.get("completion_tokens"))
        if ct is not None:
            total = ct
        else:
            ids = obj.get("output_ids")
            total = len(ids) if isinstance(ids, list) else self._seen
        if total < self._seen:
            return FrameInfo(
                0, error=f"completion_tokens went backwards in a cumulative frame: {self._seen} -> {total}"
            )
        new = total - self._seen
        self._seen = total
        fr = meta.get("finish_reason")
        finish = fr.get("type") if isinstance(fr, dict) else fr if isinstance(fr, str) else None
        if finish == "abort" and isinstance(fr, dict) and fr.get("message"):
            return FrameInfo(
                new,
                finish,
                _int_or_none(meta.get("prompt_tokens")),
                ct,
                error=f"request aborted by the server: {fr.get('message')}",
            )
        return FrameInfo(new, finish, _int_or_none(meta.get("prompt_tokens")), ct, spec=_spec_of(meta))

    def decode_metas(self, metas: list[dict[str, Any]]) -> FrameInfo | None:
        """All frames of one read at once, from their ``meta_info`` alone (the cumulative count of the
        last frame gives the read's new tokens).  ``None`` whenever a frame needs the per-frame path
        (a count that is missing or goes backwards, an abort), so every error is still found there."""
        seen = total = self._seen
        finish: str | None = None
        prompt: int | None = None
        spec = None
        for m in metas:
            if "spec_verify_ct" in m:
                spec = _spec_of(m)
            ct = m.get("completion_tokens")
            if ct.__class__ is not int or ct < total:
                return None
            total = ct
            fr = m.get("finish_reason")
            if fr is not None:
                if fr.__class__ is dict:
                    if fr.get("type") == "abort":
                        return None
                    finish = fr.get("type")
                elif fr.__class__ is str:
                    finish = fr
            pt = m.get("prompt_tokens")
            if pt.__class__ is int:
                prompt = pt
        self._seen = total
        return FrameInfo(total - seen, finish, prompt, total, spec=spec)


class BadFrame(NamedTuple):
    """Stands in for a frame whose data is not valid JSON."""

    data: str
    reason: str


def _one(data: str, loads: Any = json.loads) -> Any:
    try:
        return loads(data)
    except ValueError as exc:
        return BadFrame(data, str(exc))


def loads_batch(datas: list[str]) -> list[Any]:
    """``[json.loads(d) for d in datas]``, but in one C-level call for the whole read when possible.

    The frames are joined into one JSON array; that is accepted only when it parses and yields exactly
    one value per frame (a frame that is not one complete JSON value breaks the parse or the count),
    otherwise every frame is decoded on its own so each bad frame is found.
    """
    if len(datas) > 1:
        try:
            objs = json.loads("[" + ",".join(datas) + "]")
        except ValueError:
            objs = None
        if objs is not None and len(objs) == len(datas):
            return objs  # type: ignore[no-any-return]
    return [_one(d) for d in datas]


_META_KEY = '"meta_info":'
_decoder = json.JSONDecoder()


def _generate_loads(data: str) -> Any:
    i = data.rfind(_META_KEY)
    if i < 0 or not data.startswith("{"):
        return json.loads(data)
    j = i + len(_META_KEY)
    while j < len(data) and data[j] in " \t\r\n":
        j += 1
    meta, end = _decoder.raw_decode(data, j)
    if data[end:].strip() != "}" or not isinstance(meta, dict) or "completion_tokens" not in meta:
        return json.loads(data)  # meta_info is not the last key, or lacks the count: decode it all
    return {"meta_info": meta}


def _generate_metas(datas: list[str]) -> list[dict[str, Any]] | None:
    """The ``meta_info`` of every frame of one read, decoded as one JSON array; ``None`` when a frame
    does not end with a ``meta_info`` that carries ``completion_tokens`` (the caller decodes it all)."""
    metas = []
    cut = len(_META_KEY)
    for d in datas:
        i = d.rfind(_META_KEY)
        if i < 0 or not d.endswith("}"):
            return None
        metas.append(d[i + cut : -1])
    try:
        objs = json.loads("[" + ",".join(metas) + "]")
    except ValueError:
        return None
    if len(objs) != len(datas) or not all(o.__class__ is dict and "completion_tokens" in o for o in objs):
        return None
    return objs  # type: ignore[no-any-return]


def _generate_many(datas: list[str]) -> list[Any]:
    """The ``meta_info`` of every frame of one read, decoded as one JSON array (else frame by frame)."""
    metas = _generate_metas(datas)
    if metas is None:
        return [_one(x, _generate_loads) for x in datas]
    return [{"meta_info": m} for m in metas]


class CompletionsEndpoint:
    """OpenAI ``POST /v1/completions`` with a token-id prompt (SGLang, vLLM, llama.cpp accept it).

    ``token_ids=True`` adds ``"return_token_ids": true`` to the body and counts each frame's ids
    (exact output counts and per-token ITL); only for servers that honour it (vLLM).
    """

    name = "completions"
    path = "/v1/completions"
    exact_prompt = True

    def __init__(self, *, token_ids: bool = False) -> None:
        self.token_ids = token_ids
        self.exact_tokens = token_ids

    def payload(self, prompt_ids: Sequence[int], osl: int, *, model: str | None, ignore_eos: bool) -> dict[str, Any]:
        body = _openai_body({"prompt": list(prompt_ids)}, osl, model=model, ignore_eos=ignore_eos)
        if self.token_ids:
            body["return_token_ids"] = True
        return body

    def decoder(self) -> FrameDecoder:
        return _CompletionsIdsDecoder() if self.token_ids else _CompletionsDecoder()

    def loads_many(self, datas: list[str]) -> list[Any]:
        return loads_batch(datas)

    def read_info(self, datas: list[str], decoder: FrameDecoder) -> FrameInfo | None:
        return None  # every frame carries text: decoded one by one


def _openai_body(prompt: dict[str, Any], osl: int, *, model: str | None, ignore_eos: bool) -> dict[str, Any]:
    """The streaming OpenAI request body shared by completions and chat (usage requested in the stream)."""
    body: dict[str, Any] = {
        **prompt,
        "max_tokens": osl,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": ignore_eos,
    }
    if model:
        body["model"] = model
    return body


def chat_words(prompt_ids: Sequence[int]) -> str:
    """The chat prompt for these ids: one word per id (chat takes text, so its ISL is approximate)."""
    n = len(_CHAT_WORDS)
    return " ".join(_CHAT_WORDS[i % n] for i in prompt_ids)


class ChatEndpoint:
    """OpenAI ``POST /v1/chat/completions``; the prompt is text, so ``prompt_tokens`` is not checked."""

    name = "chat"
    path = "/v1/chat/completions"
    exact_prompt = False
    exact_tokens = False

    def payload(self, prompt_ids: Sequence[int], osl: int, *, model: str | None, ignore_eos: bool) -> dict[str, Any]:
        messages = [{"role": "user", "content": chat_words(prompt_ids)}]
        return _openai_body({"messages": messages}, osl, model=model, ignore_eos=ignore_eos)

    def decoder(self) -> FrameDecoder:
        return _ChatDecoder()

    def loads_many(self, datas: list[str]) -> list[Any]:
        return loads_batch(datas)

    def read_info(self, datas: list[str], decoder: FrameDecoder) -> FrameInfo | None:
        return None  # every frame carries text: decoded one by one


class GenerateEndpoint:
    """SGLang native ``POST /generate`` with ``input_ids``."""

    name = "generate"
    path = "/generate"
    exact_prompt = True
    exact_tokens = True

    def payload(self, prompt_ids: Sequence[int], osl: int, *, model: str | None, ignore_eos: bool) -> dict[str, Any]:
        return {
            "input_ids": list(prompt_ids),
            "sampling_params": {"max_new_tokens": osl, "ignore_eos": ignore_eos, "temperature": 0.0},
            "stream": True,
        }

    def decoder(self) -> FrameDecoder:
        return _GenerateDecoder()

    def loads_many(self, datas: list[str]) -> list[Any]:
        return _generate_many(datas)

    def read_info(self, datas: list[str], decoder: FrameDecoder) -> FrameInfo | None:
        """Fast path: one :class:`FrameInfo` for all frames of a read (cumulative frames make only the
        last count matter); ``None`` sends the read through :meth:`loads_many` and per-frame decoding."""
        metas = _generate_metas(datas)
        if metas is None or not isinstance(decoder, _GenerateDecoder):
            return None
        return decoder.decode_metas(metas)


def get_endpoint(name: str, *, token_ids: bool = False) -> Endpoint:
    """The adapter called ``name``; an unknown name lists the known ones.  ``token_ids``: ask the server
    for each frame's token ids (``completions`` only)."""
    if token_ids and name != "completions":
        raise ValueError(f"token_ids is supported by the completions endpoint only, not {name!r}")
    if name == "completions":
        return CompletionsEndpoint(token_ids=token_ids)
    if name == "generate":
        return GenerateEndpoint()
    if name == "chat":
        return ChatEndpoint()
    raise ValueError(f"unknown endpoint {name!r}: choose one of {', '.join(ENDPOINT_NAMES)}")
