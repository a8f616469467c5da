"""One real vLLM CPU server for every slow test that only talks to a running server (issue 50: each of them used to
load its own, 75-120 s of a loaded 2-core box apiece).

Started by hand the way a user runs one (``python -m vllm.entrypoints.openai.api_server``, no
``VLLM_SERVER_DEV_MODE``), on the tiny model of the venv ``.ci/install_vllm.sh`` made (``SSKJ_VLLM_VENV``;
``SSKJ_VLLM_MODEL`` names another model dir), ``--max-model-len 2048``, bf16, eager, no prefix caching (the
agreement probes compare the same prompts twice and must compute them twice).  Tests that launch vLLM through the
plugin (the acceptance flow, a launch that must fail) start their own: that launch is what they check.

Without the venv the tests that use it skip with the reason; ``SSKJ_REQUIRE_VLLM=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_sskj.server.health import probe
from pytest_sskj.server.pool import free_port
from pytest_sskj.server.process import ManagedProcess

HEALTH_TIMEOUT_S = 600.0
"""Load time allowed before the fixture fails: 75-120 s here on an idle box, up to four minutes under load."""


@dataclass(frozen=True)
class RealVllm:
    """The running server: its URL, the model dir it serves, the venv's python, its process and log."""

    url: str
    model: Path
    python: Path
    pid: int
    log: Path


def vllm_venv() -> tuple[Path, Path]:
    """The vLLM venv's python and the tiny model dir; skips (fails under ``SSKJ_REQUIRE_VLLM=1``) naming what is
    missing."""
    venv = os.environ.get("SSKJ_VLLM_VENV", "")
    reason = None
    if not venv:
        reason = "SSKJ_VLLM_VENV is not set (a venv made by .ci/install_vllm.sh VENV)"
    elif not (Path(venv) / "bin" / "python").is_file():
        reason = f"SSKJ_VLLM_VENV={venv} has no bin/python (run .ci/install_vllm.sh {venv})"
    model = Path(os.environ.get("SSKJ_VLLM_MODEL") or Path(venv) / "tiny-llama")
    if reason is None and not (model / "config.json").is_file():
        reason = f"no tiny model at {model} (python -m pytest_sskj.models.tiny_llama --out {model})"
    if reason is not None:
        if os.environ.get("SSKJ_REQUIRE_VLLM", "") == "1":
            pytest.fail(f"SSKJ_REQUIRE_VLLM=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return Path(venv) / "bin" / "python", model


class SharedVllm:
    """Plugin (registered by unit/conftest.py) that owns the shared server: started by the first test that asks for
    ``real_vllm``, stopped (its whole process tree) as soon as the next test does not ask for it -- so no other test
    runs beside an idle vLLM -- and at the session's end.  Collection puts the tests that use it one after the
    other, at the place of the first of them, so the server starts once."""

    FIXTURE = "real_vllm"

    def __init__(self) -> None:
        self._failed: str | None = None
        self._proc: ManagedProcess | None = None
        self._server: RealVllm | None = None

    @pytest.fixture
    def real_vllm(self, tmp_path_factory: pytest.TempPathFactory) -> RealVllm:
        """The shared real vLLM server (started here if it is not running; a start that failed is not retried)."""
        if self._failed is not None:
            pytest.fail(self._failed, pytrace=False)
        if self._server is None:
            self._server = self._start(tmp_path_factory)
        return self._server

    def _start(self, factory: pytest.TempPathFactory) -> RealVllm:
        python, model = vllm_venv()
        port = free_port()
        argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
                "--port", str(port), "--max-model-len", "2048", "--dtype", "bfloat16", "--enforce-eager",
                "--no-enable-prefix-caching"]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
        env.pop("VLLM_SERVER_DEV_MODE", None)
        log = factory.mktemp("vllm-shared") / "vllm.log"
        self._proc = proc = ManagedProcess(argv, log, env=env)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while probe(url, "/health", 5.0)[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                why = f"exited ({proc.returncode})" if proc.returncode is not None else "not healthy in time"
                self._failed = f"the shared vLLM server {why} (log {log}):\n{log.read_text()[-3000:]}"
                pytest.fail(self._failed, pytrace=False)
            time.sleep(1)
        return RealVllm(url, model, python, proc.pid, log)

    def stop(self) -> None:
        proc, self._proc, self._server = self._proc, None, None
        if proc is not None:
            proc.terminate(60.0)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        users = [i for i in items if self.FIXTURE in getattr(i, "fixturenames", ())]
        if len(users) < 2:
            return
        first = items.index(users[0])
        rest = [i for i in items[first:] if self.FIXTURE not in getattr(i, "fixturenames", ())]
        items[first:] = [*users, *rest]

    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        if self._server is not None and (nextitem is None or self.FIXTURE not in getattr(nextitem, "fixturenames", ())):
            self.stop()

    def pytest_unconfigure(self) -> None:
        self.stop()
