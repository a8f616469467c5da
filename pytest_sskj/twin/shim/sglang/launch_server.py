"""``python -m sglang.launch_server`` on a twin node: the stand-in rank, with the repository that holds this
shim importable (the nodes share this machine's file system)."""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[4]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from pytest_sskj.twin.rank import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
