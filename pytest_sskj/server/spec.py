"""The server package's name for the spec data (:mod:`pytest_sskj.spec`, which sits at the bottom layer so that
the engines can build commands from a spec without importing the server package)."""

from __future__ import annotations

from pytest_sskj.spec import NodeCommand, ServerSpec, SpecOverride, spec_from_settings

__all__ = ["NodeCommand", "ServerSpec", "SpecOverride", "spec_from_settings"]
