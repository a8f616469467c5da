"""The seam between the option table and the subsystems that own a value's meaning.

:mod:`pytest_sskj.options` and :mod:`pytest_sskj.schema` import no subsystem: what only a subsystem knows --
the engine names (``--engine`` choices), the SLO and agreement gate grammars, the shape lists -- is asked for
here, lazily, when a value is parsed or ``--help`` is shown.  Each entry names the one function of the owning
subsystem; adding an engine changes nothing here (the engine registry lists it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["engine_names", "value_parsers"]


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
