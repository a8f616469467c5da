"""An ssh configuration that maps numbered nodes to host names, as a user's ``~/.ssh/config`` does.

A real run and a dry run refuse bare node numbers that no ssh configuration maps (ssh would dial ``601``
as 0.0.2.89, :func:`pytest_sskj.validate.unmapped_numeric_nodes`); tests that plan the users' jobs on
numbered nodes (``--nodes 601-604``, the shipped profiles) give this file with ``--sskj-ssh-config``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["NUMBERED_NODES", "numbered_ssh_config"]

NUMBERED_NODES: tuple[str, ...] = tuple(str(n) for r in (range(601, 609), range(701, 709)) for n in r)
"""The node numbers the tests and the shipped profiles use."""


def numbered_ssh_config(
    directory: Path, nodes: Iterable[str] = NUMBERED_NODES, host: str = "gpu{}.cluster.test"
) -> Path:
    """Write ``directory/ssh_config`` with one ``Host N`` / ``HostName`` entry per node; return its path."""
    path = directory / "ssh_config"
    path.write_text("".join(f"Host {n}\n  HostName {host.format(n)}\n" for n in nodes), encoding="utf-8")
    return path
