"""A log pump that outlives the process that started the server (``serve start`` of a local rank with secrets).

A local rank whose command line carries a secret writes its output into a pipe, and a pump copies it into the log
with the secret values redacted (servers echo their arguments).  During a run the pump is a thread of the
session (:class:`~pytest_sskj.server.process.ManagedProcess`); a deployment must outlive ``serve start``, so its
pump is this small process instead, in its own session::

    python -m pytest_sskj.server.logpump LOG SECRETS_FILE

``SECRETS_FILE`` (mode 0600, in the log's private 0700 directory:
:func:`~pytest_sskj.server.secret_argv.write_private_json`) holds the secret values as a JSON list; the
pump reads it and deletes it before the first line, so no secret is on any command line, in any environment
or left on disk.  Standard input is the rank's output; the pump ends at its end of file (the rank's tree is
gone: ``serve stop``), each line redacted, appended and flushed as it comes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

__all__ = ["main", "pump"]


def _read_secrets(path: Path) -> tuple[str, ...]:
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    finally:
        path.unlink(missing_ok=True)
    return tuple(str(v) for v in values if v)


def pump(source: IO[bytes], log_path: Path, secrets: Sequence[str]) -> None:
    """Copy ``source`` (a binary stream) into ``log_path`` line by line, redacted, flushing every line (the
    session's own pump thread, :class:`~pytest_sskj.server.process.ManagedProcess`, runs this too)."""
    from pytest_sskj.redact import redact_text

    readline = source.readline
    with log_path.open("ab") as log:
        for raw in iter(readline, b""):
            log.write(redact_text(raw.decode("utf-8", errors="replace"), secrets).encode("utf-8"))
            log.flush()


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m pytest_sskj.server.logpump LOG SECRETS_FILE\n")
        return 2
    log, secrets_file = Path(argv[0]), Path(argv[1])
    pump(sys.stdin.buffer, log, _read_secrets(secrets_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
