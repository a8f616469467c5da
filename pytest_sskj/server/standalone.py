"""One embedded server outside the pool: start it, wait for health, yield its URL, tear the tree down.

A convenience for tests and benchmarks that need a real llama.cpp server without a pytest session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from pytest_sskj.engines import DEFAULT_ENGINE, get_engine
from pytest_sskj.server.embedded import DEFAULT_BATCH, serve_argv
from pytest_sskj.server.health import address_from_log, wait_healthy
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.spec import NodeCommand

__all__ = ["embedded_server"]


@contextlib.contextmanager
def embedded_server(
    model: Path,
    *,
    slots: int = 8,
    batch: int = DEFAULT_BATCH,
    log_path: Path,
    port: int = 0,
    threads: int | None = None,
    timeout_s: float = 60.0,
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """Run the embedded server on ``model`` and yield its base URL (``http://127.0.0.1:PORT``).

    The process starts in its own session and logs to ``log_path``; it is healthy (``/health`` 200) when the
    URL is yielded, and its whole process tree is gone when the block exits.
    """
    engine = get_engine(DEFAULT_ENGINE)  # the embedded CPU engine
    argv = [*serve_argv(model, port=port, slots=slots, batch=batch, threads=threads), *extra_args]
    handle = LocalLauncher().start(NodeCommand("local", 0, tuple(argv), port=port), log_path)
    try:
        oracle = LogOracle(engine.name)
        oracle.add(log_path, "local", 0, offset=handle.log_offset)
        report = wait_healthy(
            engine.name,
            [handle],
            [lambda: address_from_log(log_path, handle.log_offset)],
            timeout_s=timeout_s,
            oracle=oracle,
            label="embedded server",
        )
        yield report.urls[0]
    finally:
        handle.terminate(10.0)
