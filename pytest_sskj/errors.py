"""Exception hierarchy of pytest-sskj.

Every error the framework raises on purpose derives from :class:`SskjError`, so callers can
catch "anything sskj said" in one clause while keeping the specific kinds apart::

    SskjError
    ├── ConfigError                 bad settings found after option parsing (profile content, inventory files)
    ├── ServerError
    │   ├── ServerLaunchError       a rank could not be started, or exited before it was healthy
    │   ├── HealthTimeout           no healthy answer before the deadline
    │   ├── ServerConfigMismatch    /server_info disagrees with the spec that was launched
    │   ├── EnvironmentMismatch     the nodes of one launch do not run the same build (category environment)
    │   └── ServerCrashed           a rank died (or a fatal log signature appeared) while serving
    ├── LauncherError               the launcher itself failed (ssh unreachable, unknown kind, ...)
    ├── StreamProtocolError         a server stream that does not follow the protocol
    ├── GpuUnavailable              a GPU request that cannot be met on this host
    ├── NumericsMismatch            a kernel result outside its tolerance
    ├── ReportError                 reports/ could not be written or read back
    └── ReleaseRefused              a release cannot be marked; carries the reasons

Usage errors on the command line are *not* part of this tree: they are raised as
``pytest.UsageError`` at option-parse time (see :mod:`pytest_sskj.settings`).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EnvironmentMismatch",
    "GpuUnavailable",
    "HealthTimeout",
    "LauncherError",
    "NumericsMismatch",
    "ReleaseRefused",
    "ReportError",
    "ServerConfigMismatch",
    "ServerCrashed",
    "ServerError",
    "ServerLaunchError",
    "SskjError",
    "StreamProtocolError",
    "ValueProblem",
]


class SskjError(Exception):
    """Base class of every error raised by pytest-sskj on purpose."""


class ConfigError(SskjError):
    """Settings content that is wrong (a profile or inventory file), found after parsing."""


class ServerError(SskjError):
    """Base class of server lifecycle errors."""


class ServerLaunchError(ServerError):
    """A rank could not be started, or exited before it became healthy."""


class HealthTimeout(ServerError):
    """No healthy answer from rank 0 before the deadline."""


class ServerConfigMismatch(ServerError):
    """The running server reports a configuration different from the spec that was launched."""


class EnvironmentMismatch(ServerError):
    """The nodes of one launch do not run the same build (engine, commits, torch/CUDA, driver, image)."""


class ServerCrashed(ServerError):
    """A rank died, or a fatal log signature appeared, while the server was serving."""


class LauncherError(SskjError):
    """The launcher itself failed (unknown kind, ssh unreachable, ...)."""


class StreamProtocolError(SskjError):
    """A response stream that does not follow the SSE / endpoint protocol."""


class GpuUnavailable(SskjError):
    """A GPU request that cannot be met on this host."""


class NumericsMismatch(SskjError, AssertionError):
    """A numeric result outside its tolerance (an AssertionError, so pytest reports it as a failure)."""


class ReportError(SskjError):
    """The reports directory could not be written or read back."""


class ReleaseRefused(SskjError):
    """A release cannot be marked; ``reasons`` lists every blocking fact."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = list(reasons)
        super().__init__("release refused:\n" + "\n".join(f"  - {r}" for r in self.reasons))


class ValueProblem(ValueError):
    """A bad option value whose owner knows what is accepted and a hint: :mod:`pytest_sskj.settings` puts
    ``problem`` after the value's source and ``accepted`` and ``hint`` on the usage error's own lines.
    ``str()`` is ``detail`` (default ``problem``), for callers that print it alone."""

    def __init__(self, problem: str, accepted: str, hint: str, detail: str | None = None) -> None:
        super().__init__(detail or problem)
        self.problem = problem
        self.accepted = accepted
        self.hint = hint
