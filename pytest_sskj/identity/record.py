"""The identity step of a launch: probe every node, record what it runs, refuse a mixed build.

:func:`identity_prelaunch` wraps the pool's pre-launch callable (GPU pre-flight): before a spec's
first rank starts, every node is probed over the same launcher; the result goes into the manifest
(``identity``: per server label, every node; ``engine``: the shared build facts and their ``build``
digest, which ``compare`` and the baseline gate compare) and a launch whose nodes differ is refused
with :class:`~pytest_sskj.errors.EnvironmentMismatch` (category ``environment``) naming the nodes and
the items, unless the session allows mixed builds (``--sskj-allow-mixed-builds``: then the mix is
recorded and every verdict of the run can see it in the manifest).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sskj.errors import EnvironmentMismatch
from pytest_sskj.identity.nodes import NodeIdentity, build_facts, differences, mismatch_message, probe_nodes
from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.stash import MANIFEST_KEY, SETTINGS_KEY

if TYPE_CHECKING:
    from pytest_sskj.report.manifest import RunManifest

__all__ = ["identity_prelaunch", "record_identity", "session_prelaunch"]

PrelaunchResult = tuple[Sequence[tuple[str, str]], "Callable[[], None] | None"]
Prelaunch = Callable[[ServerSpec, Launcher], PrelaunchResult]


def record_identity(
    manifest: RunManifest | None, spec: ServerSpec, identities: Sequence[NodeIdentity]
) -> dict[str, Any]:
    """Write the nodes' identities of ``spec`` into ``manifest`` (``identity.<label>``) and the shared build
    facts into its ``engine`` facts; returns the build facts."""
    facts = build_facts(identities)
    if manifest is None:
        return facts
    identity = dict(manifest.data.get("identity") or {})
    diffs = differences(identities)
    identity[spec.label] = {
        "nodes": [i.as_dict() for i in identities],
        "same_build": not diffs,
        "differences": [d.text() for d in diffs],
        **({"build": facts["build"]} if "build" in facts else {}),
    }
    engine = dict(manifest.data.get("engine") or {})
    engine.update(facts)
    manifest.update(identity=identity, engine=engine)
    return facts


def identity_prelaunch(
    inner: Prelaunch | None,
    *,
    allow_mixed: bool = False,
    record: Callable[[ServerSpec, Sequence[NodeIdentity]], object] | None = None,
) -> Prelaunch:
    """A pre-launch step: probe every node of the spec, ``record`` the identities, refuse a mixed build (unless
    ``allow_mixed``), then run ``inner`` (GPU pre-flight)."""

    seen: dict[tuple[object, ...], list[NodeIdentity]] = {}
    """Identities already probed in this session, by (launcher, engine, nodes, python): a restart of the same
    deployment (repeats, A/B interleaving) does not probe again."""

    def prelaunch(spec: ServerSpec, launcher: Launcher) -> PrelaunchResult:
        key = (id(launcher), spec.engine, spec.nodes, spec.python)
        identities = seen.get(key)
        if identities is None:
            identities = seen[key] = probe_nodes(launcher, spec)
        if record is not None:
            record(spec, identities)
        diffs = differences(identities)
        if diffs and not allow_mixed:
            raise EnvironmentMismatch(mismatch_message(spec.label, diffs))
        return inner(spec, launcher) if inner is not None else ((), None)

    return prelaunch


def session_prelaunch(config: pytest.Config, inner: Prelaunch | None) -> Prelaunch:
    """:func:`identity_prelaunch` for a pytest session: recorded in its manifest, ``--sskj-allow-mixed-builds``."""
    settings = config.stash.get(SETTINGS_KEY, None)
    return identity_prelaunch(
        inner,
        allow_mixed=settings is not None and settings.allow_mixed_builds,
        record=lambda spec, ids: record_identity(config.stash.get(MANIFEST_KEY, None), spec, ids),
    )
