"""The state file of a named deployment: ``<reports dir>/deployments/<name>.json``.

One JSON object (``schema`` 1) written atomically by ``serve start`` once every rank is healthy, read by
``serve status`` / ``serve stop`` and by ``pytest --sskj-deployment NAME``: the name, the client URL(s), the
engine, the effective server spec (secrets redacted), the nodes' build identity, the start time, the launcher
and, per rank, where its process tree lives (:class:`RankState`).  No secret is written: environment values
and secret arguments are redacted, the ssh identity path is left out (give it again to ``status``/``stop``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj import names
from pytest_sskj.files import read_json_file

if TYPE_CHECKING:
    from pytest_sskj.spec import ServerSpec

__all__ = [
    "SCHEMA",
    "DeploymentState",
    "RankState",
    "deployments_dir",
    "known_names",
    "read_state",
    "recorded_spec",
    "state_path",
]

SCHEMA = 1
_STATE_LIMIT = 4 * 1024 * 1024


def check_name(name: str) -> str:
    """``name`` when it is a valid deployment name (:func:`pytest_sskj.names.check_name`: it names a file under
    ``<reports dir>/deployments/``), else ``ValueError`` saying what is accepted."""
    return names.check_name(name, "deployment name")


def recorded_spec(spec: ServerSpec) -> dict[str, Any]:
    """A server spec as the state file records it: its extra arguments with every secret value redacted."""
    from pytest_sskj.redact import redact_argv

    out = spec.as_dict()
    out["extra_args"] = redact_argv(spec.extra_args)
    return out


def deployments_dir(reports_dir: Path) -> Path:
    return reports_dir / "deployments"


def state_path(reports_dir: Path, name: str) -> Path:
    return names.inside(deployments_dir(reports_dir), name, ".json", "deployment name")


def known_names(reports_dir: Path) -> list[str]:
    """Names of the deployments that have a state file under ``reports_dir``."""
    d = deployments_dir(reports_dir)
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


@dataclass(frozen=True)
class RankState:
    """Where one rank's process tree lives, enough to check and stop it from another process."""

    node: str
    rank: int
    kind: str
    """``local`` (a session leader here), ``ssh`` (a remote state directory) or either wrapped in a container."""
    pid: int | None
    """Session leader (PID = PGID = SID): here for ``local``, on the node for ``ssh``."""
    log: str
    create_time: float | None = None
    """``local``: the leader's start time (guards against a reused PID)."""
    state_dir: str | None = None
    """``ssh``: the rank's remote state directory (``pid``, ``out.log``, ``rc``)."""
    container: str | None = None
    """The container's name when the rank runs in one (``runtime rm -f`` on stop)."""
    runtime: str | None = None
    serves_http: bool = False
    group: str | None = None
    """A deployment's group (``prefill``, ``decode``, ...) or ``router``; ``None`` for a one-server deployment."""


@dataclass(frozen=True)
class DeploymentState:
    """Everything ``serve status`` / ``serve stop`` and ``--sskj-deployment`` need about a running deployment."""

    name: str
    engine: str
    urls: tuple[str, ...]
    ranks: tuple[RankState, ...]
    spec: dict[str, Any]
    started_at: str
    launcher: str
    health_path: str
    label: str = ""
    identity: dict[str, Any] = field(default_factory=dict)
    ssh: dict[str, Any] = field(default_factory=dict)
    """Non-secret ssh connection options (user, port, config file, ``-o`` options)."""
    profile: str | None = None
    log_dir: str = ""
    startup_s: float | None = None
    notes: tuple[str, ...] = ()
    topology: str | None = None
    """A ``[deployment]``'s label (groups, layouts, backends, router); ``None`` for one server group."""
    schema: int = SCHEMA

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: Path) -> Path:
        from pytest_sskj.rundir import atomic_write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeploymentState:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"state file schema {data.get('schema')!r} is not {SCHEMA} (written by another version)")
        ranks = tuple(RankState(**r) for r in data.get("ranks") or ())
        known = set(cls.__dataclass_fields__)
        rest = {k: v for k, v in data.items() if k in known and k not in ("ranks", "urls", "notes")}
        return cls(ranks=ranks, urls=tuple(data.get("urls") or ()), notes=tuple(data.get("notes") or ()), **rest)


def read_state(path: Path) -> DeploymentState:
    """The state in ``path``; ``FileNotFoundError`` when there is none, ``ValueError`` when it is unreadable."""
    data = read_json_file(path, what="deployment state file", limit=_STATE_LIMIT)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a deployment state file (a JSON object is expected)")
    try:
        return DeploymentState.from_dict(data)
    except TypeError as exc:
        raise ValueError(f"{path}: not a deployment state file ({exc})") from None
