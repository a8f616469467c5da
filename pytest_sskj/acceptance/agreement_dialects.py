"""Output agreement, the client side: request dialects that return exact output token ids, the probe set,
and one side's probe (run, stored, read back).  The figures and the verdict are in
:mod:`pytest_sskj.acceptance.agreement`, which re-exports everything here.

A dialect is how one engine family answers a greedy, non-streaming request with the generated token ids
themselves (never re-tokenized text): ``llamacpp`` (llama.cpp's native ``POST /completion`` with
``"return_tokens": true``: ``tokens``), ``openai-token-ids`` (``POST /v1/completions`` with
``"return_token_ids": true``: ``choices[0].token_ids``, vLLM >= 0.10) and ``sglang-generate`` (SGLang's
``POST /generate`` with ``input_ids``: ``output_ids``).  An engine names its dialect.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "DIALECTS",
    "METHOD_VERSION",
    "Dialect",
    "Probe",
    "ProbeSet",
    "dialect",
    "load_probe",
    "probe_osl",
    "probe_set",
    "run_probe",
    "save_probe",
]

METHOD_VERSION = "agreement-1"
"""Version of the probe set and the agreement figures (recorded in every verdict and stored probe)."""

_MIN_PROMPT, _MAX_PROMPT = 8, 128
_DEFAULT_OSL, _MAX_OSL = 16, 64
_SEED_SALT = 0x5A9EE  # probe prompts never coincide with a bench repeat's prompts


# -- request dialects ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dialect:
    """How one engine family returns exact output token ids for a greedy, non-streaming request."""

    name: str
    path: str
    describe: str
    body: Callable[[Sequence[int], int, int, str | None], dict[str, Any]]
    """``(prompt_ids, osl, seed, model) -> JSON body``."""
    tokens: Callable[[Any], list[int]]
    """The generated token ids of the JSON response (``ValueError`` naming what was seen otherwise)."""


def _int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise ValueError(f"{where} is not a list of token ids: {str(value)[:200]}")
    return list(value)


def _keys(d: Any) -> str:
    return ", ".join(map(str, d)) if isinstance(d, Mapping) else type(d).__name__


def _llamacpp_body(ids: Sequence[int], osl: int, seed: int, model: str | None) -> dict[str, Any]:
    return {
        "prompt": list(ids),
        "n_predict": osl,
        "temperature": 0.0,
        "top_k": 1,
        "seed": seed,
        "ignore_eos": True,
        "cache_prompt": False,
        "return_tokens": True,
        "stream": False,
    }


def _llamacpp_tokens(d: Any) -> list[int]:
    if not isinstance(d, Mapping) or "tokens" not in d:
        raise ValueError(f"llama.cpp /completion answer has no 'tokens' (keys: {_keys(d)})")
    return _int_list(d["tokens"], "'tokens'")


def _openai_body(ids: Sequence[int], osl: int, seed: int, model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": list(ids),
        "max_tokens": osl,
        "temperature": 0.0,
        "seed": seed,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream": False,
    }
    if model:
        body["model"] = model
    return body


def _openai_tokens(d: Any) -> list[int]:
    choices = d.get("choices") if isinstance(d, Mapping) else None
    if not choices or not isinstance(choices[0], Mapping) or choices[0].get("token_ids") is None:
        raise ValueError(f"/v1/completions answer has no choices[0].token_ids (keys: {_keys(d)})")
    return _int_list(choices[0]["token_ids"], "choices[0].token_ids")


def _sglang_body(ids: Sequence[int], osl: int, seed: int, model: str | None) -> dict[str, Any]:
    return {
        "input_ids": list(ids),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": osl, "ignore_eos": True},
        "stream": False,
    }


def _sglang_tokens(d: Any) -> list[int]:
    if not isinstance(d, Mapping) or "output_ids" not in d:
        raise ValueError(f"/generate answer has no 'output_ids' (keys: {_keys(d)})")
    return _int_list(d["output_ids"], "'output_ids'")


DIALECTS: Mapping[str, Dialect] = MappingProxyType(
    {
        "llamacpp": Dialect(
            "llamacpp",
            "/completion",
            "llama.cpp native POST /completion with return_tokens: true",
            _llamacpp_body,
            _llamacpp_tokens,
        ),
        "openai-token-ids": Dialect(
            "openai-token-ids",
            "/v1/completions",
            'OpenAI POST /v1/completions with "return_token_ids": true (vLLM)',
            _openai_body,
            _openai_tokens,
        ),
        "sglang-generate": Dialect(
            "sglang-generate",
            "/generate",
            "SGLang native POST /generate (output_ids)",
            _sglang_body,
            _sglang_tokens,
        ),
    }
)
"""Request adapters keyed by dialect name; an engine names its dialect."""


def dialect(name: str) -> Dialect:
    """The dialect called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ValueError(f"no output-agreement dialect {name!r}; known: {', '.join(DIALECTS)}") from None


# -- the probe set -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeSet:
    """The fixed greedy probe prompts of a run (identical for every side of a comparison)."""

    seed: int
    osl: int
    prompts: tuple[tuple[int, ...], ...]


def probe_osl(osl: int) -> int:
    """Probe output length: the point's OSL, 16 when it is 1 (prefill-only points), at most 64."""
    return _DEFAULT_OSL if osl <= 1 else min(osl, _MAX_OSL)


def probe_set(seed: int, n: int, *, isl: int, osl: int, vocab_low: int = 300, vocab_high: int = 500) -> ProbeSet:
    """``n`` prompts of 8..min(ISL, 128) token ids in ``[vocab_low, vocab_high)``, seeded by ``seed`` only."""
    import numpy as np

    rng = np.random.default_rng([seed, _SEED_SALT])
    hi = max(1, min(isl, _MAX_PROMPT))
    lo = min(_MIN_PROMPT, hi)
    lengths = rng.integers(lo, hi + 1, size=n)
    prompts = tuple(tuple(int(x) for x in rng.integers(vocab_low, vocab_high, size=int(k))) for k in lengths)
    return ProbeSet(seed, probe_osl(osl), prompts)


@dataclass
class Probe:
    """One side's answers to the probe set: token ids per prompt (``None`` where the request failed)."""

    role: str
    dialect: str
    concurrency: int
    osl: int
    seed: int
    wall_s: float
    tokens: list[list[int] | None]
    errors: list[str | None] = field(default_factory=list)
    point_id: str = ""

    @property
    def n(self) -> int:
        return len(self.tokens)

    def failed(self) -> list[int]:
        return [i for i, t in enumerate(self.tokens) if t is None]


def run_probe(
    url: str,
    dialect_name: str,
    probes: ProbeSet,
    *,
    concurrency: int,
    role: str = "ab",
    model: str | None = None,
    timeout_s: float = 120.0,
    point_id: str = "",
) -> Probe:
    """Send every probe prompt to ``url`` (``concurrency`` in flight) and collect the exact token ids."""
    import httpx

    from pytest_sskj.accuracy.client import served_model
    from pytest_sskj.httpopts import client_options

    d = dialect(dialect_name)
    base = url.rstrip("/")
    tokens: list[list[int] | None] = [None] * len(probes.prompts)
    errors: list[str | None] = [None] * len(probes.prompts)
    t0 = time.perf_counter()
    with httpx.Client(timeout=timeout_s, **client_options(base)) as client:
        if dialect_name == "openai-token-ids" and not model:
            model = served_model(client, base)

        def one(i: int) -> None:
            body = d.body(probes.prompts[i], probes.osl, probes.seed, model)
            try:
                r = client.post(base + d.path, json=body)
                if r.status_code != 200:
                    raise ValueError(f"HTTP {r.status_code}: {r.text[:200]}")
                tokens[i] = d.tokens(r.json())
            except (httpx.HTTPError, ValueError) as exc:
                errors[i] = f"{type(exc).__name__}: {exc}"

        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(probes.prompts) or 1))) as ex:
            list(ex.map(one, range(len(probes.prompts))))
    wall = time.perf_counter() - t0
    return Probe(role, dialect_name, concurrency, probes.osl, probes.seed, round(wall, 4), tokens, errors, point_id)


def save_probe(point_dir: Path, probe: Probe) -> Path:
    """Write ``agreement-<role>.json`` in the point's directory (atomically)."""
    from pytest_sskj.acceptance.store import atomic_write_json

    path = point_dir / f"agreement-{probe.role}.json"
    atomic_write_json(path, {"method": METHOD_VERSION, **asdict(probe)})
    return path


def load_probe(point_dir: Path, role: str) -> Probe | None:
    """The probe of ``role`` stored in ``point_dir``; ``None`` when absent, unreadable or of another method."""
    try:
        d = json.loads((point_dir / f"agreement-{role}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.pop("method", None) != METHOD_VERSION:
        return None
    try:
        return Probe(**d)
    except TypeError:
        return None
