"""The option registry: the seam between settings and the subsystems that own a value's meaning.

:mod:`pytest_sskj.settings` resolves every option row through a :class:`Registry` and imports no subsystem.
The subsystems fill it, each with what it owns, the way pytest plugins fill pytest's parser in
``pytest_addoption``: a module-level ``register(registry)`` function per subsystem --

- ``server/options.py``, ``deploy/options.py``, ``acceptance/options.py``, ``gpu/options.py``,
  ``report/options.py``, ``history/options.py`` -- the option rows (flags, kind, bounds, help);
- :mod:`pytest_sskj.engines` -- ``--engine``'s choices, the default engine and the engine of a name (its
  defaults and checks);
- :mod:`pytest_sskj.slo`, :mod:`pytest_sskj.acceptance.agreement`, :mod:`pytest_sskj.deploy.layouts` -- the
  parsers of the value kinds they own (``slo``, ``agreement``, ``size_seq``);
- :mod:`pytest_sskj.profile` -- how a ``--profile`` reference is loaded;
- :mod:`pytest_sskj.combination` -- the derived dimensions (layouts, shapes, deployment) and the engine and
  layout combination checks; :mod:`pytest_sskj.validate` -- the ini-key check and the generic checks.

:func:`pytest_sskj.subsystems.build_registry` (the entry layer) lists the subsystems in order and calls each
``register``; this module imports none of them.  A new value kind owned by a subsystem is one ``add_parser``
call in that subsystem's ``register``; a new engine changes nothing here (the engine registry lists it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from pytest_sskj.engines.base import Engine
    from pytest_sskj.options import Option
    from pytest_sskj.profile import Profile
    from pytest_sskj.settings import Settings

__all__ = ["Check", "Dimensions", "ProfileLoader", "Registry", "RegistryError"]

ProfileLoader = Callable[[str | Path, Sequence[Path]], "Profile"]
"""A ``--profile`` reference (a file, or a name under the search folders' ``profiles/``) loaded."""
Dimensions = Callable[[dict[str, Any], "Profile | None", Mapping[str, str], Mapping[str, "Option"]], None]
"""Fills derived values of the resolved ``values`` in place (``layouts``, ``shapes``, ``deployment``)."""
Check = Callable[["Settings", Mapping[str, "Option"]], None]
"""A cross-setting check of the resolved settings; raises ``pytest.UsageError``."""
IniCheck = Callable[["pytest.Config", Iterable[str]], None]


class RegistryError(LookupError):
    """A slot that no subsystem filled, or one filled twice (a wiring error of the package, not a user's)."""


class Registry:
    """Everything :func:`pytest_sskj.settings.resolve_settings` uses of the subsystems, filled by them.

    Settings reads: :attr:`options`, :attr:`parsers`, :attr:`default_engine`, :meth:`engine`,
    :meth:`load_profile`, :meth:`check_ini_keys`, :meth:`dimensions`, :meth:`check_settings`.
    Subsystems write with the ``add_*`` / ``set_*`` methods (each slot once; parsers and checks many)."""

    def __init__(self, options: Sequence[Option] = ()) -> None:
        self.options: tuple[Option, ...] = tuple(options)
        """The option rows, in resolution (and ``--help``) order: the subsystems' in registration order."""
        self.parsers: dict[str, Callable[[str], Any]] = {}
        """Value parsers by option kind, for the kinds a subsystem owns."""
        self._default_engine: str | None = None
        self._engine: Callable[[str], Engine] | None = None
        self._profiles: ProfileLoader | None = None
        self._ini_checks: list[IniCheck] = []
        self._dimensions: list[Dimensions] = []
        self._checks: list[Check] = []

    # -- filled by the subsystems ---------------------------------------------------------------------
    def add_options(self, *rows: Option) -> None:
        """A subsystem's option rows (its ``pytest_addoption``); a setting name, flag or ini key is one row's."""
        taken = {o.dest for o in self.options} | {f for o in self.options for f in o.flags}
        clash = sorted({o.dest for o in rows if o.dest in taken} | {f for o in rows for f in o.flags if f in taken})
        if clash or len({o.dest for o in rows}) != len(rows):
            raise RegistryError(f"option rows registered twice: {', '.join(clash) or 'within one subsystem'}")
        self.options = (*self.options, *rows)

    def set_choices(self, dest: str, choices: Sequence[str]) -> None:
        """The accepted words of the ``choice`` row ``dest`` that its owner knows (``--engine``: the engines)."""
        rows = [o for o in self.options if o.dest == dest]
        if len(rows) != 1 or rows[0].kind != "choice":
            raise RegistryError(f"no choice row {dest!r} to set the choices of")
        if rows[0].choices:
            raise RegistryError(f"the choices of {dest!r} are set twice")
        self.options = tuple(replace(o, choices_of=tuple(choices)) if o.dest == dest else o for o in self.options)

    def add_parser(self, kind: str, parse: Callable[[str], Any]) -> None:
        if kind in self.parsers:
            raise RegistryError(f"value kind {kind!r} has two parsers")
        self.parsers[kind] = parse

    def set_engines(self, default: str, lookup: Callable[[str], Engine]) -> None:
        if self._engine is not None:
            raise RegistryError("the engines are registered twice")
        self._default_engine, self._engine = default, lookup

    def set_profile_loader(self, load: ProfileLoader) -> None:
        if self._profiles is not None:
            raise RegistryError("two profile loaders are registered")
        self._profiles = load

    def add_ini_check(self, check: IniCheck) -> None:
        self._ini_checks.append(check)

    def add_dimensions(self, fill: Dimensions) -> None:
        self._dimensions.append(fill)

    def add_check(self, check: Check) -> None:
        """A cross-setting check; checks run in registration order, the first failure is the user's error."""
        self._checks.append(check)

    # -- read by settings --------------------------------------------------------------------------------
    @property
    def default_engine(self) -> str:
        if self._default_engine is None:
            raise RegistryError("no subsystem registered the engines (pytest_sskj.engines.register)")
        return self._default_engine

    def engine(self, name: str) -> Engine:
        """The engine of a name: its defaults (the engine-default layer of the precedence) and checks."""
        if self._engine is None:
            raise RegistryError("no subsystem registered the engines (pytest_sskj.engines.register)")
        return self._engine(name)

    def load_profile(self, ref: str | Path, search: Sequence[Path]) -> Profile:
        if self._profiles is None:
            raise RegistryError("no subsystem registered a profile loader (pytest_sskj.profile.register)")
        return self._profiles(ref, search)

    def check_ini_keys(self, config: pytest.Config, known: Iterable[str]) -> None:
        keys = tuple(known)
        for check in self._ini_checks:
            check(config, keys)

    def dimensions(
        self, values: dict[str, Any], profile: Profile | None, sources: Mapping[str, str], opts: Mapping[str, Option]
    ) -> None:
        for fill in self._dimensions:
            fill(values, profile, sources, opts)

    def check_settings(self, settings: Settings, opts: Mapping[str, Option]) -> None:
        for check in self._checks:
            check(settings, opts)
