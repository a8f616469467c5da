"""What a point measures, written down once per run, so ``--resume`` cannot mix two measurements.

A fresh run writes ``<run dir>/measurement.json``: every setting that changes what a point measures
(shape, engine, model, backends, chunks, concurrencies, requests, repeats, warmup, endpoint, request
rate, seed, parallel layout, nodes, server arguments, server environment, endpoint URL, search).
``--resume RUN`` compares the current settings with it and refuses, with a usage error that lists
every difference (``isl: 512 in the run, 256 now``), instead of silently reusing points measured under
other settings.  Server arguments and environment values are stored as digests only (they may hold
secrets): a difference names the setting, never a value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_sskj.files import read_json_file
from pytest_sskj.settings import Settings

__all__ = ["MEASURED_SETTINGS", "MEASUREMENT_FILE", "differences", "fingerprint", "guard_resume", "write_fingerprint"]

MEASUREMENT_FILE = "measurement.json"
MEASURED_SETTINGS = (
    "engine",
    "model_path",
    "model_name",
    "backends",
    "chunks",
    "concurrencies",
    "isl",
    "osl",
    "requests",
    "repeats",
    "warmup",
    "endpoint",
    "request_rate",
    "seed",
    "tp",
    "ep",
    "dp",
    "pp",
    "nodes",
    "placement",
    "target_url",
    "search",
    "search_max",
    "server_args",
    "env",
)
_DIGESTED = frozenset({"server_args", "env"})


def _plain(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, float) and v == float("inf"):
        return "inf"
    return v


def _digest(v: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(_plain(v), sort_keys=True).encode()).hexdigest()[:16]


def fingerprint(settings: Settings) -> dict[str, Any]:
    """The settings that decide what a point measures (secret-bearing ones as digests)."""
    out: dict[str, Any] = {}
    for key in MEASURED_SETTINGS:
        value = getattr(settings, key, None)
        if key == "target_url" and value:
            from pytest_sskj.redact import url_without_userinfo

            value = url_without_userinfo(value)  # its credentials are sent by nothing and stored nowhere
        out[key] = _digest(value) if key in _DIGESTED else _plain(value)
    return out


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``["isl: 512 in the run, 256 now", ...]`` (values of digested settings are not shown)."""
    out = []
    for key in MEASURED_SETTINGS:
        if key not in stored and key not in current:
            continue
        a, b = stored.get(key), current.get(key)
        if a == b:
            continue
        if key in _DIGESTED:
            out.append(f"{key}: differs from the run's (values not shown)")
        else:
            out.append(f"{key}: {a!r} in the run, {b!r} now")
    return out


def write_fingerprint(settings: Settings) -> None:
    """Record the fingerprint of a fresh run (never overwritten by a resume)."""
    from pytest_sskj.acceptance.store import atomic_write_json

    path = settings.run_dir / MEASUREMENT_FILE
    if not path.exists():
        atomic_write_json(path, fingerprint(settings))


def guard_resume(settings: Settings) -> list[str]:
    """Differences between ``--resume``'s run and the current settings ([] when they measure the same)."""
    d = settings.reports_dir / str(settings.resume)
    stored: Any = None
    try:
        stored = read_json_file(d / MEASUREMENT_FILE, what="the run's measurement record")
    except (OSError, ValueError):
        try:  # a run from before the fingerprint: its manifest's settings
            manifest = read_json_file(d / "manifest.json", what="the run's manifest")
            stored = {k: v for k, v in (manifest.get("settings") or {}).items() if k in MEASURED_SETTINGS}
            stored = {k: (_digest(v) if k in _DIGESTED else v) for k, v in stored.items()}
        except (OSError, ValueError, AttributeError):
            return [f"{d} records neither {MEASUREMENT_FILE} nor manifest settings: cannot prove it measured the same"]
    if not isinstance(stored, dict):
        return [f"{d / MEASUREMENT_FILE} is not a JSON object"]
    current = fingerprint(settings)
    return differences(stored, {k: v for k, v in current.items() if k in stored or not stored})
