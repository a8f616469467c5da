"""Allure's results-directory extras, built from the run manifest: ``environment.properties``,
``categories.json`` and ``executor.json``.

``environment.properties`` lists what a reader of the report needs to trust the numbers: GPU,
driver and CUDA (the ``gpu`` fact of the manifest), engine and FlashInfer versions/commits (the
``engine`` fact and the package versions), model, platform, parallel sizes and the test matrix.  The
categories sort failures by the message tags of :mod:`pytest_sskj.report.categories`.  Everything is
redacted before it is written; each file is written atomically.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_sskj.report.categories import CATEGORIES
from pytest_sskj.report.scrub import scrub
from pytest_sskj.rundir import atomic_write_text

__all__ = ["categories_json", "environment_properties", "executor_json", "write_allure_extras"]


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        if value and all(isinstance(v, Mapping) for v in value):
            for i, v in enumerate(value):
                _flatten(f"{prefix}.{i}", v, out)
        elif value:
            out[prefix] = ",".join(str(v) for v in value)
    elif value is not None and value != "":
        out[prefix] = str(value)


def _gpu_facts(gpu: Any, out: dict[str, str]) -> None:
    """The ``gpu`` fact without per-device noise: count, summary, driver, CUDA, and the distinct device
    names, architectures and memory sizes (one line each, not one per GPU)."""
    if not isinstance(gpu, Mapping):
        _flatten("gpu", gpu, out)
        return
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, Mapping)]
    _flatten("gpu", {k: v for k, v in gpu.items() if k not in ("devices", "notes")}, out)
    for key, label in (("name", "names"), ("arch", "archs"), ("capability", "capabilities")):
        values = sorted({str(d[key]) for d in devices if d.get(key) not in (None, "")})
        if values:
            out[f"gpu.{label}"] = ",".join(values)
    mem = sorted({int(d["memory_total_mib"]) for d in devices if isinstance(d.get("memory_total_mib"), int)})
    if mem:
        out["gpu.memory_total_mib"] = ",".join(map(str, mem))


def environment_facts(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The ordered key/value facts of ``environment.properties`` (already redacted)."""
    m: Mapping[str, Any] = scrub(dict(manifest))
    s: Mapping[str, Any] = m.get("settings") or {}
    pk: Mapping[str, Any] = m.get("packages") or {}
    sskj: Mapping[str, Any] = m.get("pytest_sskj") or {}
    out: dict[str, str] = {}
    _flatten("run_id", m.get("run_id"), out)
    _flatten("model", s.get("model_name") or s.get("model_path"), out)
    _flatten("model_path", s.get("model_path"), out)
    _flatten("platform", s.get("platform"), out)
    _flatten("engine", s.get("engine"), out)
    dep = s.get("deployment")
    if isinstance(dep, Mapping) and dep.get("groups"):  # each group's own sizes, never the run's unused TP1/...
        from pytest_sskj.history.layout import deployment_config

        out["parallel"] = deployment_config(dep)
    elif s.get("tp"):
        out["parallel"] = f"TP{s.get('tp')}/EP{s.get('ep')}/DP{s.get('dp')}/PP{s.get('pp')}"
    _flatten("nodes", s.get("nodes"), out)
    _flatten("backends", s.get("backends"), out)
    _flatten("chunks", s.get("chunks"), out)
    _flatten("concurrencies", s.get("concurrencies"), out)
    if s.get("isl"):
        out["shape"] = f"ISL {s.get('isl')} / OSL {s.get('osl')}, {s.get('requests')} req x {s.get('repeats')}"
    _flatten("slo", s.get("slo"), out)
    _gpu_facts(m.get("gpu"), out)
    _flatten("engine", m.get("engine") if isinstance(m.get("engine"), Mapping) else None, out)
    from pytest_sskj.identity.nodes import identity_lines

    out.update(identity_lines(m.get("identity")))
    for name in _version_packages():
        _flatten(f"{name}.version", pk.get(name), out)
    _flatten("pytest_sskj.version", sskj.get("version"), out)
    _flatten("pytest_sskj.commit", sskj.get("git_commit"), out)
    _flatten("python", (m.get("python") or {}).get("version"), out)
    _flatten("host", (m.get("host") or {}).get("hostname"), out)
    return out


def _version_packages() -> tuple[str, ...]:
    """Every engine's version-carrying distributions, then the kernel library and torch."""
    from pytest_sskj.engines import ENGINES

    engines = (d for e in ENGINES.values() for d in e.versions.distributions)
    return tuple(dict.fromkeys((*engines, "flashinfer-python", "torch")))


def _prop_escape(text: str, key: bool = False) -> str:
    t = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if key:
        t = t.replace(" ", "_").replace("=", "\\=").replace(":", "\\:")
    return t


def environment_properties(manifest: Mapping[str, Any]) -> str:
    """Java-properties text of :func:`environment_facts`."""
    facts = environment_facts(manifest)
    return "".join(f"{_prop_escape(k, key=True)}={_prop_escape(v)}\n" for k, v in facts.items())


def categories_json() -> list[dict[str, Any]]:
    """Allure categories: one per message tag of :mod:`pytest_sskj.report.categories`."""
    return [
        {
            "name": c.name,
            "matchedStatuses": list(c.statuses),
            "messageRegex": c.message_regex,
            "traceRegex": c.message_regex,
        }
        for c in CATEGORIES
    ]


def executor_json(manifest: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Who ran it: CI job URL/name when the CI exports one, else this host; build name = run id."""
    env = os.environ if environ is None else environ
    run_id = str(manifest.get("run_id", ""))
    url = env.get("BUILD_URL") or env.get("CI_JOB_URL")
    if not url and env.get("GITHUB_RUN_ID"):
        url = (
            f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{env.get('GITHUB_REPOSITORY', '')}"
            f"/actions/runs/{env['GITHUB_RUN_ID']}"
        )
    s = manifest.get("settings") or {}
    model = s.get("model_name") if isinstance(s, Mapping) else None
    info: dict[str, Any] = {
        "name": env.get("CI_NAME") or ("CI" if env.get("CI") else socket.gethostname()),
        "type": "pytest-sskj",
        "buildName": run_id,
        "buildOrder": int(manifest.get("start_time") or 0),
        "reportName": " ".join(x for x in ("pytest-sskj", str(model or ""), run_id) if x),
    }
    if url:
        info["buildUrl"] = url
    return dict(scrub(info))


def write_allure_extras(alluredir: Path, manifest: Mapping[str, Any]) -> list[Path]:
    """Write the three files into ``alluredir``; returns their paths."""
    alluredir.mkdir(parents=True, exist_ok=True)
    files = [
        (alluredir / "environment.properties", environment_properties(manifest)),
        (alluredir / "categories.json", json.dumps(categories_json(), indent=2) + "\n"),
        (alluredir / "executor.json", json.dumps(executor_json(manifest), indent=2) + "\n"),
    ]
    for path, text in files:
        atomic_write_text(path, text)
    return [p for p, _ in files]
