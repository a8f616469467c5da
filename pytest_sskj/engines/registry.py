"""The engine registry: the only place that imports the engine modules.

It feeds ``--engine`` choices and every "unknown engine" message; :func:`get_engine` fails loudly for a
name it does not know (never a silent default).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pytest_sskj.engines.base import CacheReset, Engine
from pytest_sskj.engines.embedded import EmbeddedEngine
from pytest_sskj.engines.sglang import SGLangEngine
from pytest_sskj.engines.sglang import router_argv as router_argv
from pytest_sskj.engines.vllm import VllmEngine
from pytest_sskj.spec import NodeCommand, ServerSpec

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENGINE_NAMES",
    "UnknownEngine",
    "cache_resets",
    "get_engine",
    "node_commands",
    "router_argv",
]
"""``router_argv``: a deployment's router is SGLang's ``sglang_router`` whatever engine its groups run."""


def register(*engines: type[Engine]) -> Mapping[str, Engine]:
    """Check every engine's declaration (:meth:`Engine.check_declaration`) and instantiate it, by name."""
    for cls in engines:
        cls.check_declaration()
    return MappingProxyType({cls.name: cls() for cls in engines})


ENGINES: Mapping[str, Engine] = register(EmbeddedEngine, SGLangEngine, VllmEngine)
"""Every engine by name, in ``--engine`` choice order."""

ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)

DEFAULT_ENGINE: str = EmbeddedEngine.name
"""The engine a plain ``pytest acceptance/`` runs: the embedded CPU engine."""


class UnknownEngine(ValueError):
    """An engine name the registry does not know."""


def cache_resets(name: str | None = None) -> tuple[CacheReset, ...]:
    """The cache reset of engine ``name`` (empty: it has none); ``None``: every engine's, in registry order
    (for a server whose engine the caller does not know)."""
    engines = [get_engine(name)] if name is not None else list(ENGINES.values())
    out: list[CacheReset] = []
    for e in engines:
        if e.cache_reset is not None and e.cache_reset not in out:
            out.append(e.cache_reset)
    return tuple(out)


def get_engine(name: str) -> Engine:
    """The engine called ``name``; the error lists the known engines."""
    try:
        return ENGINES[name]
    except KeyError:
        raise UnknownEngine(f"unknown engine {name!r}; known engines: {', '.join(ENGINE_NAMES)}") from None


def node_commands(spec: ServerSpec) -> list[NodeCommand]:
    """The exact command of every node for ``spec`` (rank 0 first), from the spec's engine."""
    return get_engine(spec.engine).node_commands(spec)
