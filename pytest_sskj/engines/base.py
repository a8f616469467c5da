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
* :class:`CacheReset` -- how a server's cache is reset between repeats;
* :class:`SpeculativeSupport` -- which speculative-decoding algorithms and keys the engine takes, and from where;
* :class:`EngineDefaults` -- the engine's default settings, a typed record: every required field must be
  given (a missing one is a ``TypeError`` when the engine module is imported, i.e. at registration), and
  :meth:`Engine.check_declaration` (run by the registry) checks it against the engine's endpoints and backends.

Adding an engine = one module with one :class:`Engine` subclass, its tests, and a row in the registry.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pytest_sskj.spec import NodeCommand, ServerSpec
from pytest_sskj.speculative import SPEC_SEP, SpecConfig

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = [
    "CATEGORIES",
    "SEVERITIES",
    "BackendSwitch",
    "CacheReset",
    "Engine",
    "EngineDefaults",
    "LogRules",
    "RestartCost",
    "Signature",
    "SpeculativeSupport",
    "VersionFacts",
    "host_of",
    "http_get",
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
class SpeculativeSupport:
    """Which speculative-decoding configurations (:class:`~pytest_sskj.speculative.SpecConfig`) an engine takes:
    its algorithms as its own parser spells them, the engine-neutral keys it maps, and the algorithms that
    need or refuse a draft model; ``source`` says where the lists were read (they are checked against the
    installed engine's own parser by the contract suites)."""

    algorithms: tuple[str, ...]
    keys: tuple[str, ...]
    source: str
    needs_draft: frozenset[str] = frozenset()
    no_draft: frozenset[str] = frozenset()
    needs_tokens: frozenset[str] = frozenset()
    """Algorithms refused without ``draft_tokens``."""

    def canonical(self, algorithm: str) -> str | None:
        """The engine's spelling of ``algorithm``, matched case-insensitively (``dflash`` -> ``DFLASH``), ``None``
        when it has none."""
        return next((a for a in self.algorithms if a.lower() == algorithm.lower()), None)

    def problems(self, cfg: SpecConfig) -> list[str]:
        """What the engine cannot take in ``cfg``: an unknown algorithm, a key it has no flag for, a draft
        missing or not wanted; one sentence each, with what is accepted."""
        algo = self.canonical(cfg.algorithm)
        if algo is None:
            return [f"algorithm {cfg.algorithm!r} is unknown (accepted: {', '.join(self.algorithms)}; {self.source})"]
        out = [
            f"key {k!r} has no flag here (accepted keys: {', '.join(self.keys)})"
            for k, _ in cfg.params
            if k not in self.keys
        ]
        if algo in self.needs_draft and cfg.draft is None:
            out.append(f"algorithm {algo} needs a draft model: add draft=PATH")
        if algo in self.no_draft and cfg.draft is not None:
            out.append(f"algorithm {algo} takes no draft model: drop draft={cfg.draft}")
        if algo in self.needs_tokens and cfg.get("draft_tokens") is None:
            out.append(f"algorithm {algo} needs the number of draft tokens per step: add draft_tokens=N")
        return out


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
    """How a server's cache is reset before a repeat (``None`` on the engine: it has no reset).

    The bench (``bench/client.py: BenchClient.flush_cache``) sends ``method path``; a 2xx answer is a reset,
    unless ``success_key`` names a JSON field that must be ``true``; a 405 is retried with
    ``method_on_405`` (older SGLang served ``GET /flush_cache`` only); a 404 means the server lacks it."""

    method: str
    path: str
    success_key: str | None = None
    method_on_405: str | None = None


@dataclass(frozen=True)
class EngineDefaults(Mapping[str, Any]):
    """An engine's default settings: the step of the precedence chain below the profile.

    The required fields are what every run needs (the shape, the matrix, the endpoint, the port and the
    start-up / stall bounds: ``health_timeout_s`` is never silently defaulted); the optional ones default
    to ``None``, meaning "no engine default" (the option's own default applies).  As a read-only mapping it
    holds exactly the fields that are set, keyed by the option's ``dest``.
    """

    backends: tuple[str, ...]
    chunks: tuple[int, ...]
    concurrencies: tuple[int, ...]
    isl: int
    osl: int
    requests: int
    repeats: int
    endpoint: str
    health_timeout_s: float
    stall_timeout_s: float
    port: int
    compare_expect: str | None = None
    slo: Any = None
    """A parsed SLO (``slo.parse_slo``), or ``None``."""
    search: str | None = None
    search_max: int | None = None

    def __post_init__(self) -> None:
        problems = [f"{k}={v!r}" for k, v in vars(self).items() if k in _POSITIVE and not _positive(v)]
        if not self.backends or not self.chunks or not self.concurrencies:
            problems.append("backends, chunks and concurrencies must not be empty")
        if problems:
            raise ValueError(f"engine defaults: {', '.join(problems)} (sizes, counts and timeouts must be > 0)")

    def _set(self) -> dict[str, Any]:
        return {f.name: v for f in fields(self) if (v := vars(self)[f.name]) is not None}

    def __getitem__(self, key: str) -> Any:
        found = self._set()
        if key not in found:
            raise KeyError(key)
        return found[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._set())

    def __len__(self) -> int:
        return len(self._set())


_POSITIVE = ("isl", "osl", "requests", "repeats", "health_timeout_s", "stall_timeout_s")


def _positive(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


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
    defaults: ClassVar[EngineDefaults]
    """Default settings (shape, matrix, endpoint, port, start-up and stall bounds), a typed record."""
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
    """How exact output token ids are obtained from this engine: the name of its output-agreement dialect
    (a key of :data:`pytest_sskj.acceptance.agreement.DIALECTS`: ``llamacpp``, ``openai-token-ids``,
    ``sglang-generate``)."""
    stream_token_ids: ClassVar[bool] = False
    """Whether the bench asks ``/v1/completions`` for each frame's token ids (``"return_token_ids": true``):
    exact output counts and per-token ITL where frames can merge tokens or carry ``"text": ""``."""
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
    speculative: ClassVar[SpeculativeSupport | None] = None
    """The speculative-decoding configurations the engine takes (``None``: none; a ``+NAME`` arm is refused)."""
    reference_job: ClassVar[str | None] = None
    """The job whose shape :attr:`defaults` carry (SGLang, vLLM: the users' Kimi-K3 prefill A/B, 16K in / 1 out),
    so that the users' short command is that job; a run that is not it (``--target-url``, a profile with its own
    job) gets the neutral shape (:data:`pytest_sskj.profile.NEUTRAL_SHAPE`) instead.  ``None``: the defaults are
    the engine's own (the embedded CPU engine's tiny model)."""

    _REQUIRED: ClassVar[tuple[str, ...]] = (
        "name",
        "description",
        "backends",
        "backend_switch",
        "defaults",
        "endpoints",
        "health_path",
        "logs",
        "versions",
        "token_ids",
    )

    @classmethod
    def check_declaration(cls) -> None:
        """Registration-time checks (the registry runs them): a concrete engine declares every required
        attribute, typed defaults whose endpoint it serves and whose backends it accepts; raises ``TypeError``."""
        declared = {a for k in cls.__mro__ for a in vars(k)}
        missing = [a for a in cls._REQUIRED if a not in declared]
        if missing:
            raise TypeError(f"engine {cls.__name__} does not declare {', '.join(missing)} (engines/base.py: Engine)")
        d = cls.defaults
        if not isinstance(d, EngineDefaults):
            raise TypeError(f"engine {cls.name}: defaults must be an EngineDefaults record, not {type(d).__name__}")
        if d.endpoint not in cls.endpoints:
            raise TypeError(f"engine {cls.name}: default endpoint {d.endpoint!r} is not one of {cls.endpoints}")
        unknown = [b for b in d.backends if b not in cls.backends]
        if unknown:
            raise TypeError(f"engine {cls.name}: default backends {unknown} are not in its backends {cls.backends}")
        joined = [b for b in cls.backends if SPEC_SEP in b]
        if joined:
            raise TypeError(f"engine {cls.name}: backends {joined} hold {SPEC_SEP!r}, which joins a speculative arm")
        if cls.speculative is not None and cls.speculative_args is Engine.speculative_args:
            raise TypeError(f"engine {cls.name} declares speculative decoding but no speculative_args")

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

    def speculative_args(self, cfg: SpecConfig) -> tuple[str, ...]:
        """The server flags of the speculative configuration ``cfg`` (already free of :attr:`speculative`'s
        problems); an engine that declares :attr:`speculative` overrides this."""
        raise NotImplementedError(f"engine {self.name} has no speculative decoding")

    def speculative_problems(self, cfg: SpecConfig, settings: Settings) -> list[str]:
        """What keeps ``cfg`` from running with ``settings`` (the run's, or one layout's): :attr:`speculative`'s
        problems, then the engine's own rules (an engine with extra rules extends this); one sentence each."""
        if self.speculative is None:
            return [f"engine {self.name} has no speculative decoding"]
        return self.speculative.problems(cfg)

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

    def served_labels(self, url: str, timeout_s: float = 10.0) -> tuple[dict[str, Any], dict[str, str]]:
        """What the live server at ``url`` reports about a run's labels (``--target-url`` verification,
        :mod:`pytest_sskj.identity.target`): ``served`` by label (``backend``, ``chunk``, ``tp``, ``ep``, ``dp``,
        ``pp``, ``model_path``) plus facts (``version``, ...), and why each label it does not report cannot be
        verified; the default reports nothing."""
        why = f"engine {self.name} defines no label verification"
        return {}, {k: why for k in ("backend", "chunk", "tp", "ep", "dp", "pp", "model_path")}

    def live_config_problems(self, spec: ServerSpec, url: str) -> list[str]:
        """Ask the server at ``url`` *now* what it runs (after a point); problems as sentences."""
        return []

    def config_mismatches(self, spec: ServerSpec, info: Mapping[str, Any] | None) -> list[str]:
        """The short form ``key=got (spec'd want)`` of what ``info`` reports differently from ``spec``."""
        return []

    # -- deployments (named groups; PD disaggregation) ------------------------------------------------
    def disaggregation_args(
        self,
        role: str,
        *,
        transfer_backend: str | None = None,
        bootstrap_port: int | None = None,
        ib_device: str | None = None,
        page_size: int | None = None,
    ) -> tuple[str, ...]:
        """Server flags of a deployment group with ``role`` (``serve``, ``prefill``, ``decode``); the default
        engine has no prefill/decode disaggregation and adds nothing to a plain group."""
        if role == "serve" and page_size is None:
            return ()
        raise ValueError(
            f"engine {self.name} has no prefill/decode disaggregation or page size flag (group role {role!r})"
        )


_HTTP_GET_MAX_BYTES = 16 << 20


def http_get(url: str, path: str, timeout_s: float, **params: str) -> Any:
    """The JSON (``/metrics``: the text) of a 200 answer to GET ``url + path``; ``None`` otherwise.

    ``timeout_s`` bounds the whole exchange, not each read: a server that drips its answer a byte at a time
    (a hung engine's half-open stream) ends here as ``None`` within it; bodies over 16 MiB likewise."""
    import time

    import httpx

    from pytest_sskj.httpopts import client_options

    deadline = time.perf_counter() + timeout_s
    body = bytearray()
    try:
        with httpx.stream(
            "GET", url.rstrip("/") + path, params=params or None, timeout=timeout_s, **client_options(url)
        ) as r:
            if r.status_code != 200:
                return None
            for chunk in r.iter_bytes():
                body += chunk
                if time.perf_counter() > deadline or len(body) > _HTTP_GET_MAX_BYTES:
                    return None
    except httpx.HTTPError:
        return None
    text = body.decode("utf-8", "replace")
    if path == "/metrics":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None
