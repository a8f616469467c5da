"""Options: the row type (:class:`~pytest_sskj.options.row.Option`) and how rows become pytest flags and ini keys.

The rows themselves belong to the subsystems that own their meaning, as pytest plugins own theirs:
``server/options.py`` (engine, nodes, launcher, profile, server processes, ssh), ``deploy/options.py`` (parallel
sizes), ``acceptance/options.py`` (the matrix and the verdicts), ``gpu/options.py``, ``report/options.py`` (the run
folder) and ``history/options.py`` (database, baseline, dry run).  Each adds its rows to the option registry
(:mod:`pytest_sskj.registry`) in its ``register``; :func:`pytest_sskj.subsystems.build_registry` calls them in
order and ``subsystems.OPTIONS`` is the whole table.  ``pytest_addoption`` registers the flags (group ``sskj``)
and the ini keys of the registry's rows (:func:`register_options`); :mod:`pytest_sskj.settings` resolves each row
CLI > ``SSKJ_*`` > ``sskj_*`` ini > profile > engine default > default.  A new option is a row in its owner's
module and a :class:`~pytest_sskj.settings.Settings` field.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_sskj.options.row import DAY_S, MAX_CONCURRENCY, MAX_TOKENS, Kind, Option

__all__ = ["DAY_S", "MAX_CONCURRENCY", "MAX_TOKENS", "Kind", "Option", "check_raw_args", "register_options"]


_REPEATABLE = ("append", "env", "ssh_options")


def _help(opt: Option) -> str:
    from pytest_sskj.schema import bounds_text

    bounds = bounds_text(opt)
    return opt.help + (f" [{bounds}]" if bounds else "")


def register_options(parser: pytest.Parser, options: Sequence[Option]) -> None:
    """Register every row of ``options`` (the registry's) as a flag of group ``sskj`` and as an ini key."""
    group = parser.getgroup(
        "sskj",
        "pytest-sskj: LLM serving acceptance (settings: CLI > SSKJ_* env > sskj_* ini > --profile > default)",
    )
    for opt in options:
        text = (_help(opt) + f" [env {opt.env}, ini {opt.ini}]").replace("%", "%%")  # argparse %-formats help
        if opt.kind == "bool":
            group.addoption(*opt.flags, action="store_true", dest=f"sskj_{opt.dest}", default=None, help=text)
        else:
            group.addoption(
                *opt.flags,
                action="append" if opt.kind in _REPEATABLE else "store",
                dest=f"sskj_{opt.dest}",
                default=None,
                metavar=opt.metavar or ("VALUE" if opt.kind in _REPEATABLE else opt.dest.upper()),
                help=text,
            )
        if opt.kind in _REPEATABLE:
            parser.addini(opt.ini, help=_help(opt), type="linelist", default=None)
        else:
            parser.addini(opt.ini, help=_help(opt), type="string", default=None)


def check_raw_args(args: list[str]) -> None:
    """Refuse command-line spellings that pytest's own parser mangles before pytest-sskj sees them.

    ``--nodes @FILE``: pytest expands ``@FILE`` as an argument file (each line becomes an argument), so the
    inventory form is spelled ``--nodes inventory:FILE`` on the command line.
    """
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith("--nodes=") else None
        if arg == "--nodes" and i + 1 < len(args):
            value = args[i + 1]
        if value is not None and value.startswith("@"):
            raise pytest.UsageError(
                f"--nodes {value}: pytest reads @FILE on its command line as a file of arguments, so the node "
                "inventory never reaches pytest-sskj\n"
                "  accepted: --nodes inventory:FILE.toml (a TOML file with nodes = [...]), or @FILE.toml in "
                "SSKJ_NODES / the ini key sskj_nodes\n"
                f"  Hint: --nodes inventory:{value[1:]}"
            )
