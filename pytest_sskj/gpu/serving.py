"""GPU checks for servers the pool launches: local leases and remote node pre-flight.

The server pool calls :func:`server_prelaunch`'s callable before a spec's first rank starts.  A CPU
engine needs nothing.  A local GPU server leases ``gpus_per_node(spec)`` idle devices from the same
ledger the ``gpu`` marker uses (so a kernel test on another xdist worker or session never lands on the
server's GPUs) and passes ``CUDA_VISIBLE_DEVICES`` to every rank; the lease ends when the server stops.
Remote nodes are queried over the launcher (:func:`~pytest_sskj.gpu.preflight.preflight_spec`) and a
node with too few GPUs, the wrong architecture or foreign processes refuses the launch with its name and
the processes.  A spec whose environment already pins ``CUDA_VISIBLE_DEVICES`` is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from pytest_sskj.gpu.preflight import gpus_per_node, preflight_spec
from pytest_sskj.markers import GpuRequest
from pytest_sskj.nodes import is_local_node
from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.spec import ServerSpec

__all__ = ["server_prelaunch"]


PrelaunchResult = tuple[Sequence[tuple[str, str]], "Callable[[], None] | None"]


def pytest_sskj_server_prelaunch(config: pytest.Config) -> Callable[[ServerSpec, Launcher], PrelaunchResult]:
    """The server pool's pre-launch step (this module is a sub-plugin: the server layer never imports gpu/)."""
    return server_prelaunch(config)


def server_prelaunch(config: pytest.Config) -> Callable[[ServerSpec, Launcher], PrelaunchResult]:
    """The pool's pre-launch callable for this session."""

    def prelaunch(spec: ServerSpec, launcher: Launcher) -> PrelaunchResult:
        need = gpus_per_node(spec)
        if need == 0 or "CUDA_VISIBLE_DEVICES" in dict(spec.env):
            return (), None
        if not spec.nodes or all(is_local_node(n) for n in spec.nodes):
            from pytest_sskj.gpu.fixtures import get_gpu_session

            lease = get_gpu_session(config).lease(GpuRequest(count=need), f"server {spec.label} ({spec.key()})")
            return tuple(lease.env().items()), lease.release
        preflight_spec(launcher, spec).check()
        return (), None

    return prelaunch
