"""The twin platform's seam: how the unchanged SGLang commands start stand-in ranks on the twin's nodes.

A profile whose platform layer is ``profiles/platforms/twin.toml`` (platform name ``twin``) runs on the
stand-in cluster.  Its node commands are exactly the ones :func:`pytest_sskj.engines.node_commands` builds
(``python3 -m sglang.launch_server ...``, every flag unchanged); this hook only adds to each node's
environment (exported by the launcher's bootstrap script, never on a command line):

- ``PYTHONPATH`` = the shim folder ``pytest_sskj/twin/shim`` (its ``sglang`` package has one module,
  ``launch_server``, which runs :func:`pytest_sskj.twin.rank.main`; the netns nodes share this machine's
  file system, as the real nodes share their NFS);
- ``SSKJ_TWIN_MODEL`` = the performance model the ranks serve (``--sskj-twin-model`` / ``SSKJ_TWIN_MODEL``:
  a file, or the name of a shipped one in ``pytest_sskj/twin/data``; default :data:`DEFAULT_MODEL`);
- ``SSKJ_TWIN_ANSWERS`` = the run's ``--sskj-accuracy-set`` file when it asks accuracy questions (the stand-in's
  answer key; the model file's ``[accuracy]`` says how many each backend gets right);
- ``SSKJ_TWIN_SGLANG_PYTHON`` = ``SSKJ_SGLANG_PYTHON`` when it is set: rank 0 then parses and resolves its
  argv with the real sglang package and serves sglang's own resolved values as ``/server_info``.

Any other platform: the hook returns ``None`` and the built-in commands are used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.server.spec import NodeCommand, ServerSpec
from pytest_sskj.stash import SETTINGS_KEY

__all__ = [
    "DATA",
    "DEFAULT_MODEL",
    "PLATFORM",
    "SHIM",
    "clock_note",
    "model_path",
    "shipped_models",
    "time_scale",
    "twin_env",
]

HERE = Path(__file__).resolve().parent
SHIM = HERE / "shim"
DATA = HERE / "data"
PLATFORM = "twin"
DEFAULT_MODEL = "kimi3-pro6000"


def shipped_models() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.toml"))


def model_path(ref: str | None) -> Path:
    """The model file of ``ref``: an existing file, or a shipped model's name; ``ValueError`` naming both."""
    ref = ref or DEFAULT_MODEL
    p = Path(ref).expanduser()
    if p.is_file():
        return p.resolve()
    cand = DATA / f"{ref}.toml"
    if cand.is_file():
        return cand
    raise ValueError(
        f"twin model {ref!r} is neither a file nor a shipped model; shipped: {', '.join(shipped_models())} "
        "(or give a TOML/JSON file of the same shape, docs/twin.md)"
    )


def time_scale(settings: Mapping[str, Any]) -> float | None:
    """The model's ``time_scale`` (wall seconds per modelled second) when ``settings`` (a run's resolved settings, as
    its manifest stores them) are a twin run's; ``None`` for any other run or an unreadable model."""
    if settings.get("platform") != PLATFORM:
        return None
    from pytest_sskj.twin.model import load_model

    try:
        return load_model(model_path(settings.get("twin_model"))).time_scale
    except (ValueError, OSError):
        return None


def clock_note(settings: Mapping[str, Any]) -> str | None:
    """What a twin run's absolute figures are (docs/twin.md): the terminal, summary.md and the export say it."""
    scale = time_scale(settings)
    if scale is None:
        return None
    return (
        f"absolute figures are in twin time (time_scale {scale:g}: wall seconds per modelled second): a throughput "
        f"is the modelled one / {scale:g}, a latency the modelled one x {scale:g}; every ratio (A/B gains, chunk "
        "curve, C steps) is the model's"
    )


def twin_env(model_ref: str | None, answers: Path | None = None) -> tuple[tuple[str, str], ...]:
    """The stand-in ranks' environment: the shim, the model file and, when the run asks accuracy questions, their
    file as the answer key (``SSKJ_TWIN_ANSWERS``; :mod:`pytest_sskj.twin.answers`)."""
    env = [("PYTHONPATH", str(SHIM)), ("SSKJ_TWIN_MODEL", str(model_path(model_ref)))]
    if answers is not None:
        env.append(("SSKJ_TWIN_ANSWERS", str(answers.resolve())))
    real = os.environ.get("SSKJ_SGLANG_PYTHON", "")
    if real:
        env.append(("SSKJ_TWIN_SGLANG_PYTHON", real))
    return tuple(env)


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings.platform != PLATFORM:
        return
    from pytest_sskj.validate import usage

    try:
        model_path(settings.twin_model)
    except ValueError as exc:
        raise usage(str(exc), "a model file or " + ", ".join(shipped_models()), "see docs/twin.md") from None


@pytest.hookimpl(tryfirst=True)
def pytest_sskj_server_commands(config: pytest.Config, spec: ServerSpec) -> list[NodeCommand] | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings.platform != PLATFORM or spec.engine != "sglang":
        return None
    from pytest_sskj.engines import node_commands

    answers = settings.accuracy_set.path if settings.accuracy_set is not None else None
    extra = twin_env(settings.twin_model, answers)
    names = {k for k, _ in extra}
    return [replace(c, env=(*[(k, v) for k, v in c.env if k not in names], *extra)) for c in node_commands(spec)]
