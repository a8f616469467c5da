"""One row of the option table: :class:`Option` (flags, value schema, help) and the value kinds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["DAY_S", "MAX_CONCURRENCY", "MAX_TOKENS", "Kind", "Option"]

Kind = Literal[
    "str",
    "int",
    "int0",
    "port",
    "port1",
    "float",
    "bool",
    "size",
    "size_list",
    "int_list",
    "name_list",
    "backend_list",
    "nodes",
    "path",
    "choice",
    "append",
    "env",
    "ssh_options",
    "slo",
    "agreement",
    "accuracy_set",
    "accuracy_margin",
    "size_range",
    "speculative",
    "metric_list",
    "size_seq",
    "layouts",
    "url",
    "db",
    "run_id",
    "ref",
    "name",
    "user",
    "template",
    "command",
]
"""The value kinds of :mod:`pytest_sskj.schema` (each kind's rules are written there)."""

MAX_TOKENS = 10 * 1024 * 1024
"""Longest prompt or output of any model (Llama 4 Scout's 10M-token context); sizes above it cannot run."""
MAX_CONCURRENCY = 65536
"""A client holds one connection per request in flight; one box has at most ~64K ephemeral ports."""
DAY_S = 86400.0


@dataclass(frozen=True)
class Option:
    """One setting of the option table: its flags, its value's schema (kind, bounds, unit) and its help."""

    dest: str
    flags: tuple[str, ...]
    kind: Kind
    help: str
    default: object = None
    choices_of: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    """The accepted words of a ``choice`` row, or a function giving them (asked only when needed)."""
    metavar: str | None = None
    lo: float | None = None
    """Smallest accepted number (``lo_open``: the number must be greater)."""
    hi: float | None = None
    """Largest accepted number: what the system can do (``bound_why`` says why)."""
    unit: str = ""
    lo_open: bool = False
    allow_inf: bool = False
    bound_why: str = ""
    verbatim: bool = False
    """The value reaches the server's command line verbatim, never through a shell: shell syntax in it
    (``$(...)``, backticks, ``;``, ``|``, ``&``, redirections) is a usage error, not a command that never runs."""

    @property
    def choices(self) -> tuple[str, ...]:
        return self.choices_of() if callable(self.choices_of) else self.choices_of

    @property
    def ini(self) -> str:
        return f"sskj_{self.dest}"

    @property
    def env(self) -> str:
        return f"SSKJ_{self.dest.upper()}"

    @property
    def display(self) -> str:
        return self.flags[0]
