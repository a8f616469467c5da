"""Build identity of every node: what each rank runs, recorded and checked to be one build.

The interface (everything callers use):

- :func:`probe_nodes` ``(launcher, spec) -> list[NodeIdentity]``: runs :data:`~.probe_script.PROBE_PY` on
  every node of ``spec`` over the session's launcher (ssh, local, container) and parses its answer.
- :class:`NodeIdentity`: one node's engine and package versions, source commits (git checkout,
  ``direct_url.json`` vcs_info, build-meta attributes), torch + CUDA, the driver, the container image.
- :func:`differences` ``(identities) -> list[Difference]``: every compared item (``sglang.commit``,
  ``torch.cuda``, ``driver``, ``image.digest``...) on which the nodes do not agree, with each node's value.
- :func:`build_facts` ``(identities) -> dict``: the items all nodes share, flattened, plus a ``build`` digest
  of them: the manifest's engine facts, so ``compare`` and the baseline gate see a different build as a
  different environment.
- :func:`identity_prelaunch` ``(inner, allow_mixed=, record=) -> Prelaunch``: the server pool's pre-launch step
  that probes, records and refuses a mixed launch with :class:`~pytest_sskj.errors.EnvironmentMismatch`
  (category ``environment``); :func:`session_prelaunch` ``(config, inner)`` binds it to a pytest session
  (manifest ``identity``, ``--sskj-allow-mixed-builds``); :func:`record_identity` writes the manifest.
"""

from __future__ import annotations

from pytest_sskj.identity.nodes import (
    Difference,
    NodeIdentity,
    build_facts,
    differences,
    mismatch_message,
    modules_for,
    probe_nodes,
)
from pytest_sskj.identity.record import identity_prelaunch, record_identity, session_prelaunch

__all__ = [
    "Difference",
    "NodeIdentity",
    "build_facts",
    "differences",
    "identity_prelaunch",
    "mismatch_message",
    "modules_for",
    "probe_nodes",
    "record_identity",
    "session_prelaunch",
]
