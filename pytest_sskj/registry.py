"""The seam between settings and the subsystems that own a value's meaning: the one file that lists it.

:mod:`pytest_sskj.options`, :mod:`pytest_sskj.schema` and :mod:`pytest_sskj.settings` import no subsystem.
What only a subsystem knows -- the engine names (``--engine`` choices) and each engine's defaults and checks,
the SLO and agreement gate grammars, the shape lists, profiles, layouts and deployments, the cross-setting
checks -- settings asks a :class:`Registry` for.  :func:`default_registry` fills it from the subsystems, each
slot with the one function of its owner (imported when first asked for), so that this module is the only place
where the foundation meets the layers above it.  Adding an engine changes nothing here (the engine registry
lists it); a new value kind owned by a subsystem is one entry of :func:`value_parsers`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from pytest_sskj.engines.base import Engine
    from pytest_sskj.options import Option
    from pytest_sskj.profile import Profile
    from pytest_sskj.settings import Settings

__all__ = ["Registry", "default_registry", "engine_names", "value_parsers"]


def engine_names() -> tuple[str, ...]:
    """The ``--engine`` choices: every engine of :mod:`pytest_sskj.engines`' registry, in its order."""
    from pytest_sskj.engines import ENGINE_NAMES

    return ENGINE_NAMES


def _slo(text: str) -> Any:
    from pytest_sskj.slo import parse_slo

    return parse_slo(text)


def _agreement(text: str) -> Any:
    from pytest_sskj.acceptance.agreement import parse_gates
    from pytest_sskj.slo import check_agreement_text

    check_agreement_text(text)
    return parse_gates(text)


def _size_seq(text: str) -> Any:
    from pytest_sskj.deploy.layouts import parse_size_seq

    return parse_size_seq(text)


def value_parsers() -> Mapping[str, Callable[[str], Any]]:
    """The parsers of the kinds a subsystem owns, by kind: ``slo``, ``agreement``, ``size_seq``."""
    return {"slo": _slo, "agreement": _agreement, "size_seq": _size_seq}


@dataclass(frozen=True)
class Registry:
    """Everything :func:`pytest_sskj.settings.resolve_settings` uses of the subsystems, typed."""

    parsers: Mapping[str, Callable[[str], Any]]
    """Value parsers by option kind, for the kinds a subsystem owns (:func:`value_parsers`)."""
    default_engine: str
    engine: Callable[[str], Engine]
    """The engine of a name: its defaults (the engine-default layer of the precedence) and checks."""
    load_profile: Callable[[str | Path, Sequence[Path]], Profile]
    """A ``--profile`` reference (a file, or a name under the search folders' ``profiles/``) loaded."""
    check_ini_keys: Callable[[pytest.Config, Iterable[str]], None]
    dimensions: Callable[[dict[str, Any], Profile | None, Mapping[str, str], Mapping[str, Option]], None]
    """Fill ``layouts``, ``shapes`` (and ``isl``/``osl``) and ``deployment`` of the resolved values."""
    check_settings: Callable[[Settings, Mapping[str, Option]], None]
    """Every cross-setting check of the resolved settings (engines, layouts, files, nodes)."""


def _load_profile(ref: str | Path, search: Sequence[Path]) -> Profile:
    from pytest_sskj.profile import find_profile, load_profile

    return load_profile(find_profile(ref, search))


def _engine(name: str) -> Engine:
    from pytest_sskj.engines import get_engine

    return get_engine(name)


def _check_ini_keys(config: pytest.Config, known: Iterable[str]) -> None:
    from pytest_sskj.validate import check_ini_keys

    check_ini_keys(config, known)


def _dimensions(
    values: dict[str, Any], profile: Profile | None, sources: Mapping[str, str], opts: Mapping[str, Option]
) -> None:
    from pytest_sskj.combination import dimensions

    dimensions(values, profile, sources, opts)


def _check_settings(s: Settings, opts: Mapping[str, Option]) -> None:
    from pytest_sskj.combination import check_all

    check_all(s, opts)


def default_registry() -> Registry:
    """The registry of this package's subsystems."""
    from pytest_sskj.engines import DEFAULT_ENGINE

    return Registry(
        parsers=value_parsers(),
        default_engine=DEFAULT_ENGINE,
        engine=_engine,
        load_profile=_load_profile,
        check_ini_keys=_check_ini_keys,
        dimensions=_dimensions,
        check_settings=_check_settings,
    )
