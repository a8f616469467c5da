"""Speculative arms: ``--sskj-speculative NAME=ALGORITHM[:key=value,...]`` and ``--backend marlin,marlin+NAME``.

An arm ``BACKEND+NAME`` is the server of ``BACKEND`` with the speculative configuration ``NAME``
(:class:`~pytest_sskj.speculative.SpecConfig`), which the engine maps onto its own flags
(:meth:`~pytest_sskj.engines.base.Engine.speculative_args`): SGLang's ``--speculative-*`` flags, vLLM's
``--speculative-config`` JSON, the embedded engine's ``--draft``.  Everything is checked when the options are read:
an arm naming no defined configuration, an algorithm or key the engine does not take, a draft missing where the
engine requires one, a layout the engine cannot run it on (SGLang's DFLASH at PP > 1), or a run where the
engine is not launched by the tool (``--target-url``, a profile's ``[deployment]``) are usage errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pytest_sskj.options.row import Option
from pytest_sskj.spec import ServerSpec, SpecOverride
from pytest_sskj.speculative import FORM, SpecConfig, parse_speculative, split_arm

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = [
    "SPECULATIVE",
    "arm_override",
    "register",
    "speculative_config",
    "uncounted",
    "without_speculative",
]

SPECULATIVE = Option(
    "speculative",
    ("--sskj-speculative",),
    "speculative",
    "Speculative-decoding configurations for '+NAME' arms: NAME=ALGORITHM[:key=value,...], several joined by ';' "
    "(keys draft, steps, topk, draft_tokens, lookup_max, lookup_min; mapped per engine, docs/speculative.md); "
    "--backend marlin,marlin+NAME compares the server without and with it; default none",
    default="none",
    metavar="NAME=ALGO[:K=V,...]",
)


def speculative_config(settings: Settings, arm: str) -> SpecConfig | None:
    """The configuration an arm runs (``marlin+dflash`` -> ``dflash``'s; ``None`` for a plain arm)."""
    _, name = split_arm(arm.split("@", 1)[0])
    if name is None:
        return None
    return next(c for c in settings.speculative if c.name == name)


def _flags(settings: Settings, cfg: SpecConfig) -> tuple[str, ...]:
    from pytest_sskj.engines import get_engine

    return get_engine(settings.engine).speculative_args(cfg)


def arm_override(settings: Settings, arm: str, base: SpecOverride | None = None) -> SpecOverride | None:
    """``base`` (a layout's override, or none) with the arm's speculative flags added after its server args and
    the configuration as a label; ``base`` itself for a plain arm."""
    cfg = speculative_config(settings, arm)
    if cfg is None:
        return base
    from dataclasses import replace

    args = _flags(settings, cfg)
    o = base or SpecOverride()
    return replace(o, server_args=(*o.server_args, *args), labels=(*o.labels, ("speculative", str(cfg))))


def without_speculative(settings: Settings, arm: str, spec: ServerSpec) -> ServerSpec:
    """``spec`` (the server of ``arm``) without what :func:`arm_override` added: the server its plain backend
    would run.  Two arms that differ only in their speculative configuration then have equal specs -- the
    comparability check's view of an A/B whose one changed dimension is speculative decoding."""
    cfg = speculative_config(settings, arm)
    if cfg is None:
        return spec
    args = _flags(settings, cfg)
    n = len(args)
    if n and tuple(spec.extra_args[-n:]) != args:
        raise ValueError(f"server spec of arm {arm} does not end with its speculative flags {args}")
    labels = tuple((k, v) for k, v in spec.labels if k != "speculative")
    return spec.with_(extra_args=tuple(spec.extra_args[: len(spec.extra_args) - n]), labels=labels)


def uncounted(spec: ServerSpec, row: Mapping[str, object]) -> str | None:
    """Why a speculative server's point cannot be judged: the engine counted no draft token over it (``None``: it
    did, or the server runs no speculative decoding).  A configuration that did not take effect must not be
    credited with (or blamed for) a speed difference."""
    label = dict(spec.labels).get("speculative")
    if label is None or isinstance(row.get("spec_draft_tokens"), int):
        return None
    return (
        f"speculative arm {spec.label} ({label}): the engine reported no speculative decoding over the point (no "
        "draft tokens in its /metrics spec_decode counters, nor in SGLang's per-request meta_info, which only "
        "--sskj-endpoint generate returns): the configuration did not take effect or is not reported here; the "
        "point is not judged as a speed-up"
    )


def _refuse(what: str, accepted: str, hint: str) -> None:
    import pytest

    raise pytest.UsageError(f"{what}\n  accepted: {accepted}\n  Hint: {hint}")


def _check_defined(s: Settings, wanted: list[str]) -> None:
    names = [c.name for c in s.speculative]
    undefined = sorted({n for n in wanted if n not in names})
    if undefined:
        _refuse(
            f"--backend {','.join(s.backends)}: arm(s) name the speculative configuration(s) {', '.join(undefined)}, "
            f"which --sskj-speculative does not define ({', '.join(names) or 'none defined'})",
            f"BACKEND+NAME where NAME is defined by --sskj-speculative {FORM}",
            f"--sskj-speculative '{undefined[0]}=ALGORITHM:draft=PATH' (docs/speculative.md)",
        )
    if wanted and (s.target_url or s.deployment is not None):
        what = "--target-url (a server the tool does not launch)" if s.target_url else "a profile's [deployment]"
        _refuse(
            f"--backend {','.join(s.backends)}: speculative arms with {what}",
            "speculative arms on servers the acceptance matrix launches",
            "drop the +NAME arms, or run the matrix without --target-url / [deployment]",
        )


def _cells(s: Settings) -> list[tuple[str, Settings]]:
    """The run's settings as each of its servers sees them (one per layout, else the run's)."""
    from pytest_sskj.spec import narrowed_settings

    return [(f"layout {x.name}: ", narrowed_settings(s, x.override())) for x in s.layouts] or [("", s)]


def check_speculative(s: Settings, opts: Mapping[str, Option]) -> None:
    """Every ``+NAME`` arm names a defined configuration the engine can run on every server of the run (arms of
    a backend the engine does not know are left to the backend check)."""
    from pytest_sskj.engines import get_engine

    engine = get_engine(s.engine)
    wanted = list(dict.fromkeys(n for a, n in map(split_arm, s.backends) if n is not None and a in engine.backends))
    _check_defined(s, wanted)
    cells = _cells(s) if wanted else []
    for cfg in (c for c in s.speculative if c.name in wanted):
        problems = [f"{where}{p}" for where, cell in cells for p in engine.speculative_problems(cfg, cell)]
        if problems:
            sup = engine.speculative
            algos, keys = (", ".join(sup.algorithms), ", ".join(sup.keys)) if sup else ("(none)", "-")
            _refuse(
                f"--sskj-speculative {cfg}: engine {s.engine} cannot run it: " + "; ".join(dict.fromkeys(problems)),
                f"algorithms {algos}; keys {keys}",
                "fix the configuration, or see docs/speculative.md for each engine's algorithms and keys",
            )


def register(registry: Registry) -> None:
    """The ``--sskj-speculative`` row, its parser and the arms' check."""
    registry.add_options(SPECULATIVE)
    registry.add_parser("speculative", parse_speculative)
    registry.add_check(check_speculative)
