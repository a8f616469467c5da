"""How the ``ssh`` launcher reaches the nodes: :class:`SshOptions` (the pieces of every ``ssh`` command line) and
:func:`ssh_options_from_settings`.  Data only; :mod:`pytest_sskj.server.ssh` re-exports both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = ["SshOptions", "ssh_options_from_settings"]


@dataclass(frozen=True)
class SshOptions:
    """How to reach the nodes: the pieces of every ``ssh`` command line."""

    user: str | None = None
    port: int | None = None
    """``None``: whatever ssh_config (or 22) says."""
    identity: Path | None = None
    options: tuple[str, ...] = ()
    """Extra ``-o`` options, e.g. ``StrictHostKeyChecking=accept-new``."""
    config_file: Path | None = None
    """An ssh_config (``ssh -F``) that maps node names such as ``601`` to addresses, keys and users."""
    connect_timeout_s: float = 10.0
    ssh: str = "ssh"

    def argv(self, node: str, *remote: str, extra: Sequence[str] = ()) -> list[str]:
        """``ssh [options] node [remote command]`` (no pty, batch mode, keep-alives); ``extra`` options go after
        the user's own (ssh takes the first value it is given for an option, so the user's win)."""
        argv = [
            self.ssh,
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, round(self.connect_timeout_s))}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=6",
        ]
        if self.config_file is not None:
            argv += ["-F", str(self.config_file)]
        if self.user:
            argv += ["-l", self.user]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        if self.identity is not None:
            argv += ["-i", str(self.identity), "-o", "IdentitiesOnly=yes"]
        for opt in self.options:
            argv += ["-o", opt]
        return [*argv, *extra, "--", node, *remote]


def ssh_options_from_settings(settings: Settings) -> SshOptions:
    """:class:`SshOptions` from :class:`~pytest_sskj.settings.Settings` (``-p`` only when set explicitly)."""
    src = settings.sources.get("ssh_port")
    port = None if src == "default" or (src is None and settings.ssh_port == 22) else settings.ssh_port
    return SshOptions(
        user=settings.ssh_user,
        port=port,
        identity=settings.ssh_identity,
        options=tuple(settings.ssh_options),
        config_file=settings.ssh_config,
    )
