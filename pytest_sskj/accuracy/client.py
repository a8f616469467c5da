"""Asking the questions: one greedy, non-streaming text completion per question, ``concurrency`` in flight, through
the engine's own text API (:data:`TEXT_DIALECTS`, keyed like the output-agreement dialects an engine names), and
every prompt, completion and grade kept as one JSON line per question in the run dir.

The prompt is zero-shot, lm-eval's ``gsm8k`` format without its few-shot exemplars (:data:`PROMPT`; the exemplars
are the train split's sentences, which the project does not ship): ``Question: <q>\\nAnswer:``, greedy (temperature
0), at most :data:`MAX_TOKENS` tokens, stopping at lm-eval's ``Question:``, ``</s>`` and ``<|im_end|>``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_sskj.accuracy.gsm8k import Item
from pytest_sskj.accuracy.score import Graded

PROMPT = "Question: {question}\nAnswer:"
STOPS = ("Question:", "</s>", "<|im_end|>")
MAX_TOKENS = 256
SEED = 1234


@dataclass(frozen=True)
class TextDialect:
    """How one engine family answers a greedy text completion: its path, request body and the text of the answer."""

    name: str
    path: str
    body: Callable[[str, int, str | None], dict[str, Any]]
    text: Callable[[Any], str]


def _field(d: Any, *keys: str | int) -> Any:
    cur = d
    for k in keys:
        try:
            cur = cur[k]
        except (KeyError, IndexError, TypeError):
            shown = ", ".join(map(str, d)) if isinstance(d, Mapping) else type(d).__name__
            raise ValueError(f"the answer has no {'.'.join(map(str, keys))} (keys: {shown})") from None
    if not isinstance(cur, str):
        raise ValueError(f"{'.'.join(map(str, keys))} is {type(cur).__name__}, not text")
    return cur


def _llamacpp(prompt: str, max_tokens: int, model: str | None) -> dict[str, Any]:
    return {"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "top_k": 1, "seed": SEED,
            "stop": list(STOPS), "cache_prompt": False, "stream": False}  # fmt: skip


def _openai(prompt: str, max_tokens: int, model: str | None) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "seed": SEED, "stop": list(STOPS)}
    return {**body, "stream": False, **({"model": model} if model else {})}


def _sglang(prompt: str, max_tokens: int, model: str | None) -> dict[str, Any]:
    params = {"temperature": 0.0, "max_new_tokens": max_tokens, "stop": list(STOPS)}
    return {"text": prompt, "sampling_params": params, "stream": False}


TEXT_DIALECTS: Mapping[str, TextDialect] = MappingProxyType(
    {
        "llamacpp": TextDialect("llamacpp", "/completion", _llamacpp, lambda d: _field(d, "content")),
        "openai-token-ids": TextDialect(
            "openai-token-ids", "/v1/completions", _openai, lambda d: _field(d, "choices", 0, "text")
        ),
        "sglang-generate": TextDialect("sglang-generate", "/generate", _sglang, lambda d: _field(d, "text")),
    }
)
"""Text-completion adapters, keyed by the output-agreement dialect an engine names."""


@dataclass
class Answers:
    """One side's completions by question index (absent where the request failed: ``errors`` says why)."""

    dialect: str
    concurrency: int
    max_tokens: int
    wall_s: float
    completions: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)


def ask(
    url: str,
    dialect_name: str,
    items: Sequence[Item],
    *,
    concurrency: int,
    max_tokens: int = MAX_TOKENS,
    model: str | None = None,
    timeout_s: float = 600.0,
) -> Answers:
    """Send every item's prompt to ``url`` with ``concurrency`` requests in flight and collect the completions."""
    import httpx

    from pytest_sskj.httpopts import client_options

    if dialect_name not in TEXT_DIALECTS:
        raise ValueError(f"no text dialect {dialect_name!r} for accuracy; known: {', '.join(TEXT_DIALECTS)}")
    d = TEXT_DIALECTS[dialect_name]
    base = url.rstrip("/")
    out = Answers(dialect_name, concurrency, max_tokens, 0.0)
    t0 = time.perf_counter()
    with httpx.Client(timeout=timeout_s, **client_options(base)) as client:
        if dialect_name == "openai-token-ids" and not model:
            model = served_model(client, base)

        def one(it: Item) -> None:
            try:
                r = client.post(base + d.path, json=d.body(PROMPT.format(question=it.question), max_tokens, model))
                if r.status_code != 200:
                    raise ValueError(f"HTTP {r.status_code}: {r.text[:200]}")
                out.completions[it.index] = d.text(r.json())
            except (httpx.HTTPError, ValueError) as exc:
                out.errors[it.index] = f"{type(exc).__name__}: {exc}"

        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(items) or 1))) as ex:
            list(ex.map(one, items))
    out.wall_s = round(time.perf_counter() - t0, 4)
    return out


def served_model(client: Any, base: str) -> str | None:
    """The first model ``/v1/models`` lists (an OpenAI server wants one); ``None`` when it lists none.  Also what the
    output-agreement probes ask (:mod:`pytest_sskj.acceptance.agreement_dialects`)."""
    import httpx

    try:
        data = client.get(base + "/v1/models").json().get("data") or []
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def save_answers(path: Path, items: Sequence[Item], answers: Answers, graded: Sequence[Graded]) -> Path:
    """One JSON line per question: its index, prompt, completion (or error), extracted answer, reference, grade."""
    by_index = {g.index: g for g in graded}
    lines = []
    for it in items:
        g = by_index.get(it.index)
        lines.append(
            json.dumps(
                {
                    "index": it.index,
                    "prompt": PROMPT.format(question=it.question),
                    "completion": answers.completions.get(it.index),
                    "error": answers.errors.get(it.index),
                    "extracted": g.extracted if g else None,
                    "reference": it.reference,
                    "correct": g.correct if g else None,
                },
                ensure_ascii=False,
            )
        )
    from pytest_sskj.rundir import atomic_write_text

    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
