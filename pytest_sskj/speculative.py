"""Speculative-decoding configurations, engine-neutral: what ``--sskj-speculative`` names and a ``+NAME`` arm runs.

``--sskj-speculative 'dflash=DFLASH:draft=/models/K3-DFlash,steps=3,topk=1,draft_tokens=4'`` defines the
configuration ``dflash``; ``--backend marlin,marlin+dflash`` then compares the default server (``marlin``) with the
same server and that configuration (``marlin+dflash``).  Several configurations are separated by ``;``.

The keys are engine-neutral; each engine maps them onto its own flags
(:meth:`~pytest_sskj.engines.base.Engine.speculative_args`) and says which algorithms and keys it takes
(:class:`~pytest_sskj.engines.base.SpeculativeSupport`):

=================  =========================================  =================================================
key                SGLang                                     vLLM (``--speculative-config`` JSON)
=================  =========================================  =================================================
(the algorithm)    ``--speculative-algorithm``                ``method``
``draft``          ``--speculative-draft-model-path``         ``model``
``steps``          ``--speculative-num-steps``                --
``topk``           ``--speculative-eagle-topk``               --
``draft_tokens``   ``--speculative-num-draft-tokens``         ``num_speculative_tokens``
``lookup_max``     --                                         ``prompt_lookup_max`` (ngram)
``lookup_min``     --                                         ``prompt_lookup_min`` (ngram)
=================  =========================================  =================================================

Data and parsing only: no engine is imported here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "FORM",
    "INT_KEYS",
    "KEYS",
    "MAX_INT",
    "SPEC_SEP",
    "SpecConfig",
    "parse_speculative",
    "split_arm",
]

SPEC_SEP = "+"
"""Joins an engine backend and a speculative configuration's name in an arm: ``marlin+dflash``."""

KEYS: Mapping[str, str] = {
    "draft": "the draft model's path on the nodes (a folder or file)",
    "steps": "draft steps per verify (SGLang --speculative-num-steps)",
    "topk": "draft tree width per step (SGLang --speculative-eagle-topk)",
    "draft_tokens": "draft tokens verified per step",
    "lookup_max": "longest n-gram looked up in the prompt (vLLM ngram prompt_lookup_max)",
    "lookup_min": "shortest n-gram looked up in the prompt (vLLM ngram prompt_lookup_min)",
}
"""The engine-neutral keys of a configuration, and what each means."""
INT_KEYS = frozenset({"steps", "topk", "draft_tokens", "lookup_max", "lookup_min"})
MAX_INT = 1024
"""Largest whole-number value (a draft tree of 1,024 tokens is beyond any engine's verify batch)."""

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}", re.ASCII)
_ALGO_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}", re.ASCII)
_SHELL = re.compile(r"[$`;|&<>\\\s'\"]")
FORM = "NAME=ALGORITHM[:key=value,...][;NAME=...]"


@dataclass(frozen=True)
class SpecConfig:
    """One named speculative-decoding configuration: its algorithm (as given) and its keys' values."""

    name: str
    algorithm: str
    params: tuple[tuple[str, str | int], ...] = ()

    def get(self, key: str) -> str | int | None:
        return dict(self.params).get(key)

    @property
    def draft(self) -> str | None:
        v = self.get("draft")
        return None if v is None else str(v)

    def __str__(self) -> str:
        keys = ",".join(f"{k}={v}" for k, v in self.params)
        return f"{self.name}={self.algorithm}" + (f":{keys}" if keys else "")

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "algorithm": self.algorithm, **dict(self.params)}


def split_arm(arm: str) -> tuple[str, str | None]:
    """``marlin+dflash`` -> ``("marlin", "dflash")``; ``marlin`` -> ``("marlin", None)`` (no ``@n`` here)."""
    backend, sep, name = arm.partition(SPEC_SEP)
    return backend, (name if sep else None)


def _value(entry: str, key: str, raw: str) -> str | int:
    if key not in KEYS:
        raise ValueError(
            f"{entry!r}: unknown key {key!r}; accepted keys: {', '.join(KEYS)}; hint: draft=PATH,draft_tokens=4"
        )
    if key in INT_KEYS:
        if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_INT:
            raise ValueError(f"{entry!r}: {key}={raw!r} is not a whole number 1-{MAX_INT}; hint: {key}=4")
        return int(raw)
    if not raw or _SHELL.search(raw) or raw.startswith("-"):
        raise ValueError(
            f"{entry!r}: {key}={raw!r} is not a plain path (empty, a leading '-', blanks, quotes or shell syntax); "
            "hint: draft=/models/draft"
        )
    return raw


def _entry(entry: str) -> SpecConfig:
    head, _, tail = entry.partition(":")
    name, sep, algo = (p.strip() for p in head.partition("="))
    if not sep or not _NAME_RE.fullmatch(name) or not _ALGO_RE.fullmatch(algo):
        raise ValueError(
            f"{entry!r} is not {FORM} (NAME: letters, digits, '_.-', at most 40; ALGORITHM: a word); "
            "hint: dflash=DFLASH:draft=/models/draft,draft_tokens=4"
        )
    params: dict[str, str | int] = {}
    for item in (i.strip() for i in tail.split(",")) if tail.strip() else ():
        key, eq, raw = (p.strip() for p in item.partition("="))
        if not eq:
            raise ValueError(f"{entry!r}: {item!r} is not key=value; hint: draft_tokens=4")
        if key in params:
            raise ValueError(f"{entry!r}: key {key!r} given twice")
        params[key] = _value(entry, key, raw)
    return SpecConfig(name, algo, tuple(params.items()))


def parse_speculative(text: str) -> tuple[SpecConfig, ...]:
    """``dflash=DFLASH:draft=/m,draft_tokens=4;ngram=ngram:draft_tokens=4`` -> the configurations; ``none`` or
    empty -> ``()``; ``ValueError`` saying what is wrong otherwise (a name given twice included)."""
    if text.strip().lower() in ("", "none"):
        return ()
    out = tuple(_entry(e.strip()) for e in text.split(";") if e.strip())
    names = [c.name for c in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"configuration name(s) {', '.join(twice)} defined twice; hint: one NAME=... per name")
    return out
