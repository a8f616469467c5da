"""A running server as the pool hands it out (:class:`RunningServer`: URLs, commands, logs, the log oracle
window, liveness, PIDs, the effective config) and what the pool's ``close()`` reports (:class:`CloseReport`).

:mod:`pytest_sskj.server.pool` starts and stops these; callers use them through the
:class:`~pytest_sskj.server.serving.Serving` seam.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.engines import get_engine
from pytest_sskj.errors import ServerCrashed
from pytest_sskj.redact import redact_text
from pytest_sskj.server.launcher import ProcessHandle, on_each
from pytest_sskj.server.logscan import Finding, LogMark, LogOracle
from pytest_sskj.server.process import describe_exit, tail_lines
from pytest_sskj.server.spec import NodeCommand, ServerSpec

__all__ = ["CloseReport", "RunningServer", "rank_key"]


def rank_key(node: str, rank: int) -> str:
    """How a rank is named in log paths, PIDs and leftovers: ``node/rank<r>``."""
    return f"{node}/rank{rank}"


@dataclass(repr=False)
class RunningServer:
    """A healthy deployment of one spec (or an external one given by ``--target-url``)."""

    spec: ServerSpec
    urls: list[str]
    commands: list[NodeCommand] = field(default_factory=list)
    log_paths: dict[str, Path] = field(default_factory=dict)
    handles: list[ProcessHandle] = field(default_factory=list)
    oracle: LogOracle | None = None
    startup_s: float | None = None
    """Seconds from the first spawn to rank-0 health (``None`` for an external server)."""
    external: bool = False
    notes: list[str] = field(default_factory=list)
    release: Callable[[], None] | None = field(default=None, repr=False)
    """The pre-flight's release (GPU leases), called once when the server stops (the pool's own)."""
    spread: bool = field(default=False, repr=False)
    """On the client's cores too (``StartsEarly.spread``) until the pool settles it again (the pool's own)."""
    _info: dict[str, Any] | None = None

    def __repr__(self) -> str:
        where = "external" if self.external else f"{len(self.handles)} process(es)"
        return f"RunningServer({self.spec.engine} {self.spec.label}, key {self.spec.key()}, {self.urls}, {where})"

    # -- log oracle ----------------------------------------------------------------------------------
    def mark(self) -> LogMark:
        """The current position in every rank's log; pass it to :meth:`findings_since`."""
        return self.oracle.mark() if self.oracle else LogMark(0)

    def findings_since(self, mark: LogMark | None = None) -> list[Finding]:
        """Signatures found in any rank's log after ``mark`` (all of them when ``mark`` is ``None``)."""
        return self.oracle.findings_since(mark) if self.oracle else []

    def log_tail(self, n: int = 30) -> dict[str, list[str]]:
        """The last ``n`` lines of every rank's log, redacted, by ``node/rank``."""
        secrets = self.oracle.secrets if self.oracle else ()
        return {k: [redact_text(line, secrets) for line in tail_lines(p, n)] for k, p in self.log_paths.items()}

    # -- liveness ------------------------------------------------------------------------------------
    def check_alive(self) -> None:
        """Raise :class:`ServerCrashed` when a rank has exited or a fatal signature is in any log."""
        for h in self.handles:
            code = h.poll()
            if code is not None:
                raise ServerCrashed(
                    describe_exit(f"{self.spec.label}: {h.node} rank {h.rank}", code, h.log_path)
                    + "\n  the server died while serving"
                )
        if self.oracle is not None:
            self.oracle.scan()
            fatal = self.oracle.fatal()
            if fatal:
                f = fatal[0]
                raise ServerCrashed(
                    f"{self.spec.label}: fatal log signature on {f.node} rank {f.rank} ({f.category}): {f.line}\n"
                    f"  excerpt ({f.path}:{f.line_no}):\n" + "\n".join(f"    | {x}" for x in f.excerpt.splitlines())
                )

    def alive(self) -> bool:
        return all(h.poll() is None for h in self.handles)

    def pids(self) -> dict[str, list[int]]:
        """Live PIDs of every rank's process tree, by ``node/rank`` (every rank asked at once)."""
        found = on_each(lambda h: h.pids(), self.handles)
        return {rank_key(h.node, h.rank): pids for h, pids in zip(self.handles, found, strict=True)}

    # -- server info ---------------------------------------------------------------------------------
    def config_problems(self) -> list[str]:
        """Ask the server *now* what it runs against its spec (``Engine.live_config_problems``); an external
        server is not checked."""
        if self.external or not self.urls:
            return []
        return get_engine(self.spec.engine).live_config_problems(self.spec, self.urls[0].rstrip("/"))

    def server_info(self) -> dict[str, Any] | None:
        """Rank 0's effective config for engines whose pool verifies it (``Engine.verifies_config_at_start``:
        SGLang's ``/server_info``), else ``None``; cached once read."""
        engine = get_engine(self.spec.engine)
        if self._info is None and engine.verifies_config_at_start and self.urls:
            self._info = engine.read_config(self.urls[0])
        return self._info

    def describe(self) -> dict[str, Any]:
        """JSON-friendly summary (secrets redacted) for manifests and attachments."""
        return {
            "spec": self.spec.as_dict(),
            "key": self.spec.key(),
            "label": self.spec.label,
            "urls": list(self.urls),
            "external": self.external,
            "startup_s": self.startup_s,
            "commands": [{"node": c.node, "rank": c.rank, "command": c.shell()} for c in self.commands],
            "logs": {k: str(v) for k, v in self.log_paths.items()},
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class CloseReport:
    """What ``ServerPool.close()`` did: how many processes it launched and which PIDs (if any) survived."""

    launched: int
    leftover: dict[str, list[int]]
    elapsed_s: float

    @property
    def clean(self) -> bool:
        return not self.leftover

    def line(self) -> str:
        if self.clean:
            return (
                f"server pool closed in {self.elapsed_s:.2f} s: {self.launched} launched process(es), "
                "every PID on every node is gone"
            )
        left = "; ".join(f"{k}: {v}" for k, v in self.leftover.items())
        return f"server pool closed, but processes are STILL RUNNING: {left}; stop them by PID"
