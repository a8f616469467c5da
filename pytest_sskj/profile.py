"""Profiles: layered TOML files — platform, model and engine/deployment — combined by reference.

A *deployment* profile (``profiles/<platform>/<name>.toml``) names its layers and adds the engine,
layouts, server args, SLO tier and shapes::

    [layers]
    platform = "pro6000"          # profiles/platforms/pro6000.toml: chip, arch, GPUs per node, env
    model = "kimi-k3"             # profiles/models/kimi-k3.toml: path, quantization, trust-remote-code
    engine = 'sglang'
    nodes = "601-604"
    tp = 32
    ep = 4
    slo_tier = "S2"               # or slo = "p95_ttft_ms<3000,p95_tpot_ms<50" / "none"

    [[layouts]]                   # optional: the parallel layouts of a TP x DP matrix
    name = "tp4dp2"
    tp = 4
    dp = 2
    server_args = ["--flag=value"]

``--profile pro6000/kimi3-sglang-pd`` finds ``profiles/pro6000/kimi3-sglang-pd.toml`` under the
invocation directory, the rootdir or this checkout; a path to a file works too.  Layers combine
platform < model < deployment (later wins; ``env`` tables merge key by key, ``server_args`` add up), and
the combined profile sits at its usual place in the precedence chain (CLI > env > ini > profile >
engine default > default).  Unknown keys are refused per layer, naming the key, the accepted keys and
the file.  A file without ``[layers]`` is a flat profile (every key a setting name), as before.
"""

from __future__ import annotations

import datetime
import difflib
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.errors import ValueProblem
from pytest_sskj.files import file_kind, read_text_file

if TYPE_CHECKING:
    from pytest_sskj.engines.base import Engine
    from pytest_sskj.options import Option
    from pytest_sskj.registry import Registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "MATRIX_KEYS",
    "MODEL_KEYS",
    "NEUTRAL_SHAPE",
    "PLATFORM_KEYS",
    "SLO_TIERS",
    "Profile",
    "find_profile",
    "list_profiles",
    "load_profile",
    "neutral_shape_note",
    "profile_keys",
    "profile_roots",
    "settle_matrix",
]

_ALIASES = {"model": "model_name", "backend": "backends", "chunk": "chunks", "concurrency": "concurrencies"}
_NOT_IN_PROFILE = {"profile", "dry_run", "run_id", "resume"}

_PROFILE_LIMIT = 1024 * 1024
"""The size bound of a profile file (a profile is a page of TOML)."""


def profile_keys(options: Iterable[Option]) -> tuple[str, ...]:
    """Setting keys a deployment (or flat) profile may set: the option table's settings (the rows of the option
    registry) but the run's own (profile, dry run, run id, resume), and the users' singular spellings."""
    return tuple(sorted({o.dest for o in options if o.dest not in _NOT_IN_PROFILE} | set(_ALIASES)))


SLO_TIERS: Mapping[str, str] = {
    # the users' S2 tier for DSV4-Flash / GLM5.2 serving: TTFT P95 < 3 s, TPOT P95 < 50 ms, strictly (seed 004)
    "S2": "p95_ttft_ms<3000,p95_tpot_ms<50",
    "none": "none",
}
"""Named SLO tiers a profile can ask for with ``slo_tier``; only tiers with a source are listed."""

PLATFORM_KEYS: tuple[str, ...] = (
    "arch", "chip", "container", "env", "gpus_per_node", "interconnect", "memory_gib", "name", "notes"
)  # fmt: skip
MODEL_KEYS: tuple[str, ...] = (
    "activation",
    "architecture",
    "context_length",
    "env",
    "name",
    "notes",
    "path",
    "placeholder",
    "quantization",
    "tokenizer",
    "trust_remote_code",
)
_DEPLOYMENT_ONLY = ("deployment", "description", "layers", "layouts", "slo_tier")
_LAYER_KINDS = ("platform", "model")
_LAYER_DIRS = {"platform": "platforms", "model": "models"}
_PLATFORM_SETTINGS = {"name": "platform", "gpus_per_node": "gpus_per_node"}
_MODEL_SETTINGS = {"name": "model_name", "path": "model_path"}
_LIST_SETTINGS = ("server_args", "ssh_options")


@dataclass(frozen=True)
class Profile:
    """A loaded profile: the file named, its values keyed by setting name, and where each came from."""

    path: Path
    values: dict[str, Any] = field(default_factory=dict)
    """Setting name -> option text (as a command line would give it)."""
    origins: dict[str, Path] = field(default_factory=dict)
    """Setting name -> the layer file that supplied it."""
    layers: dict[str, Path] = field(default_factory=dict)
    """``platform`` / ``model`` -> the layer file used."""
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Descriptive facts per layer (chip, arch, quantization, tokenizer, ...), for reports."""
    layouts: tuple[dict[str, Any], ...] = ()
    """The ``[[layouts]]`` tables, checked by :mod:`pytest_sskj.deploy.layouts`."""
    deployment: dict[str, Any] | None = None
    """The ``[deployment]`` table (groups and router), checked by :mod:`pytest_sskj.deploy.topology`."""
    description: str = ""

    def origin(self, dest: str) -> Path:
        return self.origins.get(dest, self.path)

    @property
    def name(self) -> str:
        """``pro6000/kimi3-sglang-pd`` for a file under a profiles root, else the file name."""
        for root in profile_roots():
            try:
                return str(self.path.resolve().relative_to(root.resolve()).with_suffix(""))
            except ValueError:
                continue
        return self.path.stem


def profile_roots(extra: Sequence[Path] = ()) -> list[Path]:
    """Folders searched for profiles named by reference: ``extra`` dirs' ``profiles/``, cwd's, this checkout's."""
    cands = [*(Path(p) / "profiles" for p in extra), Path.cwd() / "profiles"]
    cands.append(Path(__file__).resolve().parent.parent / "profiles")
    out: list[Path] = []
    for c in cands:
        if c.is_dir() and all(c.resolve() != o.resolve() for o in out):
            out.append(c)
    return out


def find_profile(ref: str | Path, search: Sequence[Path] = ()) -> Path:
    """The file of ``ref``: an existing path, or ``<root>/<ref>.toml`` under :func:`profile_roots`."""
    p = Path(ref).expanduser()
    if p.is_file():
        return p
    if p.exists() and not p.is_dir():  # a FIFO, device or socket: never opened (a FIFO would block the read)
        kind = file_kind(p.stat().st_mode)
        raise ValueProblem(
            f"profile {str(p)!r} is {kind}, not a regular file",
            accepted="a profile name from profiles/ or a path to a regular .toml file",
            hint="`python -m pytest_sskj profiles` lists the profiles",
        )
    roots = profile_roots(search)
    name = str(ref)
    for root in roots:
        for cand in (root / name, root / f"{name}.toml"):
            if cand.is_file():
                return cand
    where = ", ".join(str(r) for r in roots) or "no profiles/ folder found"
    names = [n for n, _ in list_profiles(search)]
    known = ", ".join(names) or "none"
    problem = f"profile {name!r} does not exist (looked for the file and under {where})"
    close = difflib.get_close_matches(name.removesuffix(".toml"), names, n=1, cutoff=0.5)
    raise ValueProblem(
        problem,
        accepted=f"a profile name from profiles/ ({known}) or a path to a .toml file",
        hint=(f"did you mean --profile {close[0]}? " if close else "")
        + "`python -m pytest_sskj profiles` lists the profiles, `profiles show NAME` prints one resolved",
        detail=f"{problem}; known: {known}",
    )


def list_profiles(search: Sequence[Path] = ()) -> list[tuple[str, Path]]:
    """Every deployment profile under the profile roots as ``(name, file)`` (layer files excluded)."""
    out: dict[str, Path] = {}
    for root in profile_roots(search):
        for f in sorted(root.rglob("*.toml")):
            rel = f.relative_to(root)
            if rel.parts[0] in _LAYER_DIRS.values():
                continue
            out.setdefault(str(rel.with_suffix("")), f)
    return sorted(out.items())


def _read(path: Path) -> dict[str, Any]:
    try:
        text = read_text_file(path, what="profile", limit=_PROFILE_LIMIT)
    except FileNotFoundError:
        raise ValueError(f"profile {str(path)!r} does not exist") from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"profile {str(path)!r} is not valid TOML: {exc}") from None


def _refuse_unknown(raw: Mapping[str, Any], accepted: Sequence[str], path: Path, what: str) -> None:
    unknown = sorted(k for k in raw if k not in accepted)
    if unknown:
        raise ValueError(
            f"{what} {str(path)!r} has unknown key(s) {', '.join(unknown)}; known keys: {', '.join(accepted)}"
        )


def _as_option_text(key: str, value: Any) -> Any:
    if key == "env":
        if not isinstance(value, dict):
            raise ValueError("'env' must be a table of NAME = \"value\" pairs")
        bad = [k for k, v in value.items() if isinstance(v, (dict, list, datetime.date, datetime.time))]
        if bad:
            raise ValueError(
                f"env.{bad[0]} is a {type(value[bad[0]]).__name__}; an environment value is a string or a number, "
                f'e.g. {bad[0]} = "1"'
            )
        return [f"{k}={v}" for k, v in value.items()]
    if isinstance(value, bool):  # words, not 1/0: a boolean given to a number option is refused, not read as 1
        return "true" if value else "false"
    if key in _LIST_SETTINGS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f'{key!r} must be an array of strings, one argument each, e.g. {key} = ["--x", "1"]')
        return list(value)
    if isinstance(value, list):
        if not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
            raise ValueError(f"{key!r} must be a value or an array of values (strings or numbers), not nested")
        return ",".join(str(v) for v in value)
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"{key!r} has a value of type {type(value).__name__}, which a profile cannot hold")


class _Merge:
    """Accumulates setting values over the layers (later layers win; env merges; server args add up)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.origins: dict[str, Path] = {}

    def put(self, dest: str, value: Any, path: Path) -> None:
        try:
            text = _as_option_text(dest, value)
        except ValueError as exc:
            raise ValueError(f"profile {str(path)!r}: {exc}") from None
        if dest == "env" and "env" in self.values:
            merged = {e.partition("=")[0]: e for e in self.values["env"]}
            merged.update({e.partition("=")[0]: e for e in text})
            text = list(merged.values())
        elif dest in _LIST_SETTINGS and dest in self.values:
            text = [*self.values[dest], *[t for t in text if t not in self.values[dest]]]
        self.values[dest] = text
        self.origins[dest] = path


def _layer_file(kind: str, ref: Any, base: Path, path: Path) -> Path:
    if not isinstance(ref, str) or not ref.strip():
        raise ValueError(f'profile {str(path)!r}: layers.{kind} must be a layer name, e.g. "pro6000"')
    sub = _LAYER_DIRS[kind]
    tried = []
    for d in (base, *base.parents[:3]):
        cand = d / sub / f"{ref}.toml"
        tried.append(str(cand))
        if cand.is_file():
            return cand
    known = sorted({f.stem for d in (base, *base.parents[:3]) for f in (d / sub).glob("*.toml")})
    raise ValueError(
        f"profile {str(path)!r}: layers.{kind} = {ref!r} names no file (looked for {', '.join(tried[:2])}); "
        f"known {kind} layers: {', '.join(known) or 'none'}"
    )


def _apply_platform(m: _Merge, raw: Mapping[str, Any], path: Path) -> dict[str, Any]:
    _refuse_unknown(raw, PLATFORM_KEYS, path, "platform layer")
    for key, dest in _PLATFORM_SETTINGS.items():
        if key in raw:
            m.put(dest, raw[key], path)
    if "env" in raw:
        m.put("env", raw["env"], path)
    return {k: v for k, v in raw.items() if k != "env"}


def _apply_model(m: _Merge, raw: Mapping[str, Any], path: Path) -> dict[str, Any]:
    _refuse_unknown(raw, MODEL_KEYS, path, "model layer")
    for key, dest in _MODEL_SETTINGS.items():
        if key in raw:
            m.put(dest, raw[key], path)
    if raw.get("trust_remote_code") is True:  # the same flag for SGLang and vLLM
        m.put("server_args", ["--trust-remote-code"], path)
    if "env" in raw:
        m.put("env", raw["env"], path)
    return {k: v for k, v in raw.items() if k != "env"}


def _apply_deployment(m: _Merge, raw: Mapping[str, Any], path: Path) -> None:
    for key, value in raw.items():
        if key in _DEPLOYMENT_ONLY:
            continue
        m.put(_ALIASES.get(key, key), value, path)
    tier = raw.get("slo_tier")
    if tier is not None:
        if tier not in SLO_TIERS:
            raise ValueError(
                f"profile {str(path)!r}: slo_tier {tier!r} is unknown; known tiers: {', '.join(SLO_TIERS)}"
            )
        if "slo" in raw:
            raise ValueError(f"profile {str(path)!r}: give slo_tier or slo, not both")
        m.put("slo", SLO_TIERS[tier], path)


def load_profile(path: Path, keys: Sequence[str]) -> Profile:
    """Read a profile and its layers; raise :class:`ValueError` saying what is wrong and what is accepted.
    ``keys``: the setting keys it may set (:func:`profile_keys` of the option registry's rows)."""
    raw = _read(path)
    if not raw:
        raise ValueError(
            f'profile {str(path)!r} is empty: it sets nothing (e.g. nodes = "601-604", tp = 8, '
            "or [layers] platform = and model =)"
        )
    layered = "layers" in raw
    accepted = tuple(sorted({*keys, *_DEPLOYMENT_ONLY})) if layered else (*keys, *_DEPLOYMENT_ONLY)
    _refuse_unknown(raw, accepted, path, "profile")
    m = _Merge()
    layers: dict[str, Path] = {}
    facts: dict[str, dict[str, Any]] = {}
    if layered:
        refs = raw["layers"]
        if not isinstance(refs, dict):
            raise ValueError(f"profile {str(path)!r}: [layers] must be a table with platform = and model =")
        _refuse_unknown(refs, _LAYER_KINDS, path, "[layers] of profile")
        for kind in _LAYER_KINDS:
            if kind not in refs:
                continue
            lf = _layer_file(kind, refs[kind], path.parent, path)
            layers[kind] = lf
            apply = _apply_platform if kind == "platform" else _apply_model
            facts[kind] = apply(m, _read(lf), lf)
    _apply_deployment(m, raw, path)
    layouts = raw.get("layouts", [])
    if not isinstance(layouts, list) or not all(isinstance(t, dict) for t in layouts):
        raise ValueError(
            f"profile {str(path)!r}: layouts must be an array of tables ([[layouts]] name = ..., tp = ...)"
        )
    dep = raw.get("deployment")
    if dep is not None and not isinstance(dep, dict):
        raise ValueError(f"profile {str(path)!r}: [deployment] must be a table of groups and a router")
    if layouts:
        m.put("layouts", [str(t.get("name", "")) for t in layouts], path)
    return Profile(
        path=path,
        values=m.values,
        origins=m.origins,
        layers=layers,
        facts=facts,
        layouts=tuple(layouts),
        deployment=dep,
        description=str(raw.get("description", "")),
    )


MATRIX_KEYS: tuple[str, ...] = ("backends", "chunks", "concurrencies")
"""The engine's reference job (SGLang: the Kimi-K3 prefill A/B -- marlin,flashinfer_mxfp4, chunks 4K/8K/16K,
C=8,16): settings whose engine defaults describe one job, not the engine."""


def own_job(profile: Profile | None) -> bool:
    """Whether ``profile`` describes its own job: it sets a matrix key, or declares layouts or a deployment."""
    if profile is None:
        return False
    return bool(any(k in profile.values for k in MATRIX_KEYS) or profile.layouts or profile.deployment is not None)


NEUTRAL_SHAPE: tuple[int, int] = (1024, 128)
"""ISL and OSL of a run that is not an engine's reference job and names no shape: `vllm bench serve`'s random
dataset defaults (--random-input-len 1024, --random-output-len 128), stated by the dry run and the header."""


def neutral_shape_note(engine: Engine) -> str:
    """Why a run got :data:`NEUTRAL_SHAPE` (the dry run and the header show it beside the shape)."""
    return (
        f"neutral default: no --isl/--osl given, and {engine.name}'s defaults carry {engine.reference_job}, "
        "which is not this run's job"
    )


def settle_matrix(values: dict[str, Any], sources: dict[str, str], engine: Engine, profile: Profile | None) -> None:
    """Replace the engine's reference-job values of :data:`MATRIX_KEYS` where they do not belong.

    They apply to a run without a profile (the users' short command) and to a profile that sets none of
    them and declares no layouts or deployment.  A profile with its own job (a DSV4 layout matrix, a PD
    deployment) and a ``--target-url`` run get neutral values instead: the engine's own backend (``auto``),
    its own chunk size (no chunk flag), and no fixed concurrency when a concurrency search finds them (else
    C=1), and, where the engine's defaults carry a reference job's shape (:attr:`Engine.reference_job`), the
    neutral shape :data:`NEUTRAL_SHAPE` (source ``neutral``).  A value the user gave (command line, env, ini,
    profile) is never touched.
    """
    if not (own_job(profile) or values.get("target_url")):
        return
    backend = "auto" if "auto" in engine.backends else engine.backends[0]
    neutral: dict[str, Any] = {
        "backends": (backend,),
        "chunks": (),
        "concurrencies": (1,) if values.get("search") in (None, "none") else (),
    }
    for key, value in neutral.items():
        if sources.get(key) == "engine":
            values[key] = value
            sources[key] = "default"
    if engine.reference_job:
        for key, size in zip(("isl", "osl"), NEUTRAL_SHAPE, strict=True):
            if sources.get(key) == "engine":
                values[key] = size
                sources[key] = "neutral"


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns:
    how a ``--profile`` reference is found and loaded."""
    registry.set_profile_loader(
        lambda ref, search: load_profile(find_profile(ref, search), profile_keys(registry.options))
    )
