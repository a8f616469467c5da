"""The identity sub-plugin: every server's pre-launch step probes and compares its nodes' builds first.

It wraps whatever ``pytest_sskj_server_prelaunch`` implementation answers (the GPU plugin's leases and node
pre-flight), so the server layer asks one hook and imports neither the GPU nor the identity layer.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_sskj.identity.record import Prelaunch, session_prelaunch


@pytest.hookimpl(wrapper=True)
def pytest_sskj_server_prelaunch(config: pytest.Config) -> Generator[None, Prelaunch | None, Prelaunch]:
    inner = yield
    return session_prelaunch(config, inner)


TARGET_NOTE = "target_labels_note"
"""``config.stash[EXTRA_KEY]`` key: the "labels not verified: ..." sentence of a ``--target-url`` run."""


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """A ``--target-url`` / ``--sskj-deployment`` run: verify the server's effective config and identity against the
    run's labels before anything is measured (:mod:`pytest_sskj.identity.target`)."""
    from pytest_sskj.stash import EXTRA_KEY, MANIFEST_KEY, SETTINGS_KEY

    config = session.config
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.target_url or settings.dry_run or hasattr(config, "workerinput"):
        return
    from pytest_sskj.identity.target import check_target

    check = check_target(settings, settings.target_url)
    manifest = config.stash.get(MANIFEST_KEY, None)
    if manifest is not None:
        manifest.update(target=check.as_dict())
    if check.contradictions:
        raise pytest.UsageError(
            "environment: the running server contradicts the run's labels (nothing was measured):\n"
            + "\n".join(f"  - {c}" for c in check.contradictions)
            + "\n  accepted: labels (--backend, --chunk, --tp/--ep/--dp/--pp, --model-path, the profile) that the "
            "server serves\n  Hint: fix the label, or point --target-url / --sskj-deployment at the server you meant"
        )
    config.stash[EXTRA_KEY][TARGET_NOTE] = check.note()
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        ok = f"verified {', '.join(check.verified)}" if check.verified else "no label verified"
        served = ", ".join(f"{k}={v}" for k, v in check.served.items() if k not in ("sources", "source"))
        tr.write_line(f"sskj: target {settings.target_url}: {ok}; serves {served or 'nothing it reports'}")
        if check.note():
            tr.write_line(f"sskj: {check.note()}", yellow=True)
