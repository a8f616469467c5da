"""Fixtures of the GPU tests: a fake ``pynvml`` in ``sys.modules`` and a private lease ledger directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpu_fakes import FakeNvml


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A fake ``pynvml`` in ``sys.modules`` (tests set ``fake_nvml.gpus``); CUDA_* env cleared."""
    state = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", state.module())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    return state


@pytest.fixture
def ledger_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private lease ledger directory (``SSKJ_GPU_LEDGER_DIR``), so tests never touch the host's."""
    d = tmp_path / "leases"
    monkeypatch.setenv("SSKJ_GPU_LEDGER_DIR", str(d))
    return d
