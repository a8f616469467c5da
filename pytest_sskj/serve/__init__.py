"""Deployments that outlive a session (seed 004's ``sskj.deploy start|stop|status``).

The interface (everything callers use):

- :func:`start` ``(config, name, say=) -> DeploymentState``: start the configured session's server (its
  settings: profile, nodes, backend, launcher, ini/env) through the server pool, wait for health and the
  effective-config check, write ``<reports dir>/deployments/<name>.json`` and leave the ranks running;
  a name whose deployment still runs is refused (:class:`ServeError`).
- :func:`status` ``(state, ssh_identity=) -> DeploymentStatus``: every rank's tree on its node and every
  URL's health, now (``alive``, ``healthy``, ``lines()``).
- :func:`stop` ``(state, reports_dir, ssh_identity=, timeout_s=) -> StopReport``: every tree stopped on every
  node (containers removed), verified gone; the state file is removed when ``clean``; ``was_alive`` says
  whether anything was still running.
- :func:`load` ``(reports_dir, name) -> DeploymentState``: a named deployment's state (:class:`ServeError`
  naming the known ones when there is none); :func:`target_url` ``(reports_dir, name) -> str``: its client URL
  (``pytest --sskj-deployment NAME``).
- :class:`DeploymentState` / :class:`RankState`: the state file (:mod:`pytest_sskj.serve.state`).
- :func:`main` ``(argv, options) -> int``: the ``python -m pytest_sskj serve`` command line
  (:mod:`pytest_sskj.serve.cli`); ``options`` is the option table whose flags may follow the action.
"""

from __future__ import annotations

from pathlib import Path

from pytest_sskj.serve.cli import main
from pytest_sskj.serve.control import DeploymentStatus, ServeError, StopReport, load, start, status, stop
from pytest_sskj.serve.state import DeploymentState, RankState, known_names, state_path

__all__ = [
    "DeploymentState",
    "DeploymentStatus",
    "RankState",
    "ServeError",
    "StopReport",
    "known_names",
    "load",
    "main",
    "start",
    "state_path",
    "status",
    "stop",
    "target_url",
]


def target_url(reports_dir: Path, name: str) -> str:
    """The client URL of deployment ``name`` (its first URL: rank 0, or the router)."""
    state = load(reports_dir, name)
    if not state.urls:
        raise ServeError(f"deployment {name!r} records no URL ({state_path(reports_dir, name)})")
    return state.urls[0]
