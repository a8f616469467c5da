"""The declared interface of a serving engine: everything callers may ask of one, and nothing else.

An engine module (``embedded.py``, ``sglang.py``, ``vllm.py``) defines one subclass of :class:`Engine`
and the :mod:`~pytest_sskj.engines.registry` instantiates it.  Callers (settings, options, the server
pool, health, the log oracle, the GPU pre-flight, the acceptance matrix and runner, the manifest) ask
the engine object; none of them names an engine.  The frozen dataclasses below are the vocabulary of
that interface:

* :class:`BackendSwitch` -- how ``--backend`` reaches the engine (a flag, environment variables, or a
  variant of the embedded engine);
* :class:`Signature` / :class:`LogRules` -- the engine's fatal/benign log lines and healthy-start markers;
* :class:`VersionFacts` -- which distributions and modules carry the engine's version;
* :class:`CacheReset` -- how a server's cache is reset between repeats.

Adding an engine = one module with one :class:`Engine` subclass, its tests, and a row in the registry.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pytest_sskj.server.spec import NodeCommand, ServerSpec

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = [
    "CATEGORIES",
    "SEVERITIES",
    "BackendSwitch",
    "CacheReset",
    "Engine",
    "LogRules",
    "RestartCost",
    "Signature",
    "VersionFacts",
    "host_of",
    "sig",
]

CATEGORIES = ("oom", "nccl", "crash", "watchdog", "traceback", "config")
SEVERITIES = ("fatal", "error", "warning")

RestartCost = Literal["cheap", "expensive"]


@dataclass(frozen=True)
class Signature:
    """One log signature: a name, its category and severity, and the regex that finds it in a line."""

    name: str
    category: str
    severity: str
    pattern: re.Pattern[str]


def sig(name: str, category: str, severity: str, regex: str) -> Signature:
    """A :class:`Signature`; the category and severity must be known ones."""
    if category not in CATEGORIES or severity not in SEVERITIES:
        raise ValueError(f"signature {name}: category {category!r} / severity {severity!r} unknown")
    return Signature(name, category, severity, re.compile(regex))


@dataclass(frozen=True)
class LogRules:
    """What an engine's logs say: its own signatures, lines that are never findings, healthy-start markers."""

    signatures: tuple[Signature, ...] = ()
    """Engine-specific signatures, checked before the shared generic set (first match wins)."""
    benign: tuple[re.Pattern[str], ...] = ()
    """Lines that are never findings although a signature would match them (an echoed request payload)."""
    benign_tracebacks: tuple[re.Pattern[str], ...] = ()
    """Known-benign tracebacks: a ``Traceback`` whose exception line (within the excerpt) matches one is no
    finding.  Every other traceback fails the point (the users' rule: no Traceback in any node's log)."""
    healthy_markers: tuple[str, ...] = ()
    """Healthy-start markers, in the order a healthy start logs them; an entry ``"A|B"`` is seen when either
    alternative is (a marker that changed wording between versions)."""
    rank0_only_markers: frozenset[str] = frozenset()
    """Markers that only the rank serving HTTP logs."""


@dataclass(frozen=True)
class BackendSwitch:
    """How a ``--backend`` value reaches the engine."""

    kind: Literal["flag", "env", "variant"]
    flag: str | None = None
    """``kind="flag"``: the command-line flag that takes the backend name (``--moe-runner-backend``)."""
    env: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """``kind="env"``: environment variables per backend name."""

    def describe(self) -> str:
        if self.kind == "flag":
            return f"flag {self.flag} <backend>"
        if self.kind == "env":
            return "environment: " + "; ".join(
                f"{b}: {' '.join(f'{k}={v}' for k, v in kv) or '(none)'}" for b, kv in self.env.items()
            )
        return "a variant of the engine's own launch parameters"


@dataclass(frozen=True)
class VersionFacts:
    """Where an engine's version is recorded."""

    distributions: tuple[str, ...]
    """Distributions whose installed version goes into the manifest's package list (``importlib.metadata``)."""
    modules: tuple[str, ...] = ()
    """Modules imported on node 0 to read ``__version__`` (empty: nothing is probed on the node)."""
    checked: str | None = None
    """The release whose behaviour (flags, resolution, markers, log lines) this module is contract-tested against;
    the manifest records it next to the version found on the node."""


@dataclass(frozen=True)
class CacheReset:
    """How a server's cache is reset before a repeat (``None`` on the engine: it has no reset)."""

    method: str
    path: str


def host_of(spec: ServerSpec, rank: int) -> str:
    """The host of ``rank`` in ``spec`` (``local`` when the spec names no nodes)."""
    return spec.nodes[rank] if spec.nodes else "local"


class Engine(ABC):
    """One serving engine.  Subclasses set the class attributes and implement :meth:`node_commands`."""

    name: ClassVar[str]
    description: ClassVar[str]
    backends: ClassVar[tuple[str, ...]]
    """Backend names the engine accepts (``--backend`` is checked against these at parse time)."""
    backend_switch: ClassVar[BackendSwitch]
    defaults: ClassVar[Mapping[str, Any]]
    """Default settings (shape, matrix, endpoint, port): the last step of the precedence chain."""
    endpoints: ClassVar[tuple[str, ...]]
    """Bench endpoints the engine serves (``--sskj-endpoint`` values that make sense for it)."""
    health_path: ClassVar[str]
    logs: ClassVar[LogRules]
    versions: ClassVar[VersionFacts]
    cache_reset: ClassVar[CacheReset | None] = None
    restart_cost: ClassVar[RestartCost] = "expensive"
    """``cheap``: repeats of several backends interleave A B A B (a restart per point is affordable)."""
    point_budget_s: ClassVar[float] = 900.0
    """Seconds one serving point may take (the acceptance test timeout is built from it)."""
    token_ids: ClassVar[str]
    """How exact output token ids are obtained from this engine (for output agreement)."""
    platform: ClassVar[str | None] = None
    """The platform label when the engine implies one (the CPU engine: ``cpu``)."""
    sends_model_name: ClassVar[bool] = True
    """Whether requests carry ``--sskj-model-name`` as the OpenAI ``model`` field."""
    binds_port_zero: ClassVar[bool] = False
    """Whether the engine binds port 0 itself and prints its address (else the pool picks a free port)."""
    verifies_config_at_start: ClassVar[bool] = False
    """Whether the pool reads the effective config after health and refuses a server that disagrees."""
    notes_missing_markers: ClassVar[bool] = True
    """Whether healthy-start markers not seen at health time are noted on the server."""
    config_facts: ClassVar[tuple[str, ...]] = ()
    """Keys of the effective config recorded in the manifest's engine facts."""

    # -- commands and resources ----------------------------------------------------------------------
    @abstractmethod
    def node_commands(self, spec: ServerSpec) -> list[NodeCommand]:
        """The exact command of every node for ``spec``, rank 0 first."""

    def world_size(self, spec: ServerSpec) -> int:
        """GPUs one server of ``spec`` takes in all (0: the engine needs no GPU)."""
        return spec.tp * spec.pp

    def gpus_per_node(self, spec: ServerSpec) -> int:
        """GPUs the spec takes on each node: the world split over the nodes for ``placement="ranks"``,
        whole on every node for ``"replicas"``; 0 when the engine needs none."""
        world = self.world_size(spec)
        if world == 0:
            return 0
        if spec.placement == "replicas" or spec.nnodes == 1:
            return world
        return max(1, world // spec.nnodes)

    def prepare_spec(self, spec: ServerSpec, model_cache_dir: Path) -> ServerSpec:
        """The spec as launched (a generated model filled in, for instance); the default changes nothing."""
        return spec

    # -- settings ------------------------------------------------------------------------------------
    def check_settings(self, settings: Settings) -> None:  # noqa: B027 - optional hook, accepts by default
        """Raise ``pytest.UsageError`` (what was wrong, what is accepted, a hint) for combinations the engine
        cannot run; the default accepts everything."""

    # -- the live server -----------------------------------------------------------------------------
    def read_config(self, url: str) -> dict[str, Any] | None:
        """The effective configuration the live server at ``url`` reports (``None``: it reports none)."""
        return None

    def verify_config(self, spec: ServerSpec, info: Mapping[str, Any]) -> list[str]:
        """Every disagreement between ``spec`` and the server's reported config, one sentence each."""
        return []

    def live_config_problems(self, spec: ServerSpec, url: str) -> list[str]:
        """Ask the server at ``url`` *now* what it runs (after a point); problems as sentences."""
        return []

    def config_mismatches(self, spec: ServerSpec, info: Mapping[str, Any] | None) -> list[str]:
        """The short form ``key=got (spec'd want)`` of what ``info`` reports differently from ``spec``."""
        return []
