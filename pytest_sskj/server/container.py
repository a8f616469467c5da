"""The ``container`` launch mode: every rank runs in ``docker run`` / ``podman run`` on its node.

:class:`ContainerLauncher` implements :class:`~pytest_sskj.server.launcher.Launcher` on top of another
launcher (``ssh`` for cluster nodes, ``local`` here): ``start`` wraps the node command in
``<runtime> run --name sskj-<tag>-<node>-r<rank> --network host --ipc host <gpu flags> -v <mounts>
-e NAME... <image> <argv>`` and starts *that* through the inner launcher, so the log goes to the same
``logs/<node>/`` file, is scanned by the same log oracle, and the process tree is the runtime client's.
Environment values never appear on a command line: the container gets ``-e NAME`` only and the runtime
client reads the value from its own environment (which the inner launcher sets: over ssh, through the
bootstrap script on stdin).  ``terminate`` stops the client's tree, then ``<runtime> rm -f <name>`` on the
node and checks ``<runtime> ps -a`` no longer lists it.  ``run`` (short queries: the identity probe, GPU
pre-flight) runs the command in a throw-away container of the same image (``run --rm``), with
``SSKJ_CONTAINER_IMAGE`` / ``SSKJ_CONTAINER_DIGEST`` (the image id from ``<runtime> image inspect`` on
that node) set, so every node's identity names the image it really ran.

``--launcher container`` selects it (:meth:`ContainerLauncher.from_settings`): the inner launcher is ``ssh`` when
the nodes are remote, else ``local``; :class:`ContainerConfig` is the profile's platform layer ``[container]``
table (resolved at parse time into ``Settings.container`` by :func:`container_config`; ``--sskj-container-image``
overrides its image): ``runtime`` (docker | podman),
``image``, ``mounts`` (``"SRC:DST[:ro]"``), ``gpus`` (``all``, ``none`` or a device list), ``env`` (names
and values added to every rank), ``args`` (extra ``run`` flags, e.g. ``["--ulimit", "nofile=65536:65536"]``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.errors import LauncherError
from pytest_sskj.server.launcher import CommandResult, Launcher, ProcessHandle, start_in_order
from pytest_sskj.server.spec import NodeCommand

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = ["ContainerConfig", "ContainerLauncher", "ContainerProcess", "container_config"]

RUNTIMES = ("docker", "podman")
_NAME_OK = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclass(frozen=True)
class ContainerConfig:
    """How a node runs a container: the platform layer's ``[container]`` table."""

    image: str
    runtime: str = "docker"
    mounts: tuple[str, ...] = ()
    gpus: str = "all"
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"container runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        if not self.image:
            raise ValueError("a container launch needs an image (platform layer [container] image = ...)")
        for m in self.mounts:
            if m.count(":") not in (1, 2) or not m.split(":")[0].startswith("/"):
                raise ValueError(f"container mount {m!r} must be 'SRC:DST' or 'SRC:DST:ro' with an absolute SRC")

    @classmethod
    def from_platform(cls, table: Mapping[str, Any]) -> ContainerConfig:
        """From a ``[container]`` table (unknown keys are refused by name)."""
        known = {"image", "runtime", "mounts", "gpus", "env", "args"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"[container]: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        env = table.get("env") or {}
        return cls(
            image=str(table.get("image") or ""),
            runtime=str(table.get("runtime") or "docker"),
            mounts=tuple(str(m) for m in table.get("mounts") or ()),
            gpus=str(table.get("gpus") or "all"),
            env=tuple((str(k), str(v)) for k, v in dict(env).items()),
            args=tuple(str(a) for a in table.get("args") or ()),
        )

    def gpu_flags(self) -> list[str]:
        if self.gpus == "none":
            return []
        if self.runtime == "podman":  # CDI names (nvidia-ctk cdi generate)
            devs = ["all"] if self.gpus == "all" else self.gpus.split(",")
            return [a for d in devs for a in ("--device", f"nvidia.com/gpu={d}")]
        return ["--gpus", "all" if self.gpus == "all" else f'"device={self.gpus}"']

    def run_argv(self, name: str | None, env_names: Sequence[str], argv: Sequence[str], *, rm: bool) -> list[str]:
        """``<runtime> run ... <image> <argv>``; env by name only (values come from the client's environment)."""
        out = [self.runtime, "run", "--network", "host", "--ipc", "host"]
        out += ["--rm"] if rm else []
        out += ["--name", name] if name else []
        out += self.gpu_flags()
        for m in self.mounts:
            out += ["-v", m]
        for k in dict.fromkeys(env_names):
            out += ["-e", k]
        return [*out, *self.args, self.image, *argv]


def container_config(table: Mapping[str, Any] | None, image: str | None = None) -> ContainerConfig:
    """The run's :class:`ContainerConfig`: the platform layer's ``[container]`` table, ``image`` overriding its image;
    ``ValueError`` saying what is wrong (no image, an unknown key, a relative mount)."""
    if table is not None and not isinstance(table, Mapping):
        raise ValueError("the platform layer's container must be a [container] table")
    merged = dict(table or {})
    if image:
        merged["image"] = image
    return ContainerConfig.from_platform(merged)


def container_name(tag: str, cmd: NodeCommand) -> str:
    """The container's name: ``sskj-<tag>-<node>-r<rank>`` where the runtime accepts it as is; else (a '+' in a
    deployment name or run id, or a name past 120 characters) the runtime's characters with a digest of the whole,
    so that two deployments never share a container (``a+b`` and ``a-b`` would)."""
    whole = f"sskj-{tag}-{cmd.node}-r{cmd.rank}"
    plain = _NAME_OK.sub("-", whole)
    if plain == whole and len(whole) <= 120:
        return whole
    import hashlib

    return f"{plain[:111]}-{hashlib.sha256(whole.encode()).hexdigest()[:8]}"


class ContainerProcess:
    """A :class:`ProcessHandle`: the runtime client's process tree on the node, and the named container."""

    def __init__(self, inner: ProcessHandle, launcher: ContainerLauncher, name: str) -> None:
        self.inner = inner
        self.launcher = launcher
        self.name = name
        self.node = inner.node
        self.rank = inner.rank
        self.log_path = inner.log_path
        self.log_offset = inner.log_offset
        self.removed: bool | None = None
        """After ``terminate``: whether the runtime no longer lists the container."""

    def poll(self) -> int | None:
        return self.inner.poll()

    def pids(self) -> list[int]:
        return self.inner.pids()

    def terminate(self, timeout_s: float = 10.0) -> int | None:
        rc = self.inner.terminate(timeout_s)
        self.removed = self.launcher.remove(self.node, self.name)
        return rc


@dataclass
class ContainerLauncher:
    """Runs node commands inside containers of one image, through ``inner`` (ssh or local)."""

    inner: Launcher
    config: ContainerConfig
    tag: str = "run"
    kind: str = "container"
    started: list[ContainerProcess] = field(default_factory=list)
    _digests: dict[str, str | None] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings, *, worker: str = "") -> ContainerLauncher:
        """``--launcher container``: the platform's ``[container]`` image and flags, through ssh for remote nodes
        (else the local launcher); containers are named by the run id (and ``worker``)."""
        from pytest_sskj.nodes import is_local_node
        from pytest_sskj.server.launcher import launcher_class

        config = settings.container
        if config is None:  # resolved (and checked) at parse time: pytest_sskj.combination
            raise LauncherError("--launcher container: no container resolved (give --sskj-container-image IMAGE)")
        kind = "ssh" if any(not is_local_node(n) for n in settings.nodes) else "local"
        inner = launcher_class(kind).from_settings(settings, worker=worker)
        return cls(inner=inner, config=config, tag="-".join(filter(None, (settings.run_id, worker))))

    def start_many(self, items: Sequence[tuple[NodeCommand, Path]]) -> list[ContainerProcess]:
        """Start every ``(command, log path)`` in order; a failure stops (and removes) what was already started."""
        return start_in_order(self.start, items)

    def address(self, node: str) -> str:
        return self.inner.address(node)

    def leftover_pids(self) -> dict[str, list[int]]:
        return self.inner.leftover_pids()

    def start(self, cmd: NodeCommand, log_path: Path) -> ContainerProcess:
        env = (*self.config.env, *cmd.env)
        name = container_name(self.tag, cmd)
        if any(h.name == name and h.removed is None for h in self.started):
            # that rank's container of another server still runs (the pool starts the next point's server before
            # it stops the current one): removing the name would kill it; this one gets its own name
            name = f"{name}-{len(self.started)}"
        self.remove(cmd.node, name)  # a leftover of a killed session would block the name
        argv = self.config.run_argv(name, [k for k, _ in env], cmd.argv, rm=False)
        wrapped = NodeCommand(cmd.node, cmd.rank, tuple(argv), env, cmd.serves_http, cmd.port)
        handle = ContainerProcess(self.inner.start(wrapped, log_path), self, name)
        self.started.append(handle)
        return handle

    def digest(self, node: str) -> str | None:
        """The image id on ``node`` (``<runtime> image inspect``), cached; ``None`` when the node lacks it."""
        if node not in self._digests:
            res = self.inner.run(
                node, [self.config.runtime, "image", "inspect", "--format", "{{.Id}}", self.config.image]
            )
            out = res.stdout.strip().splitlines()
            self._digests[node] = out[-1].strip() if res.returncode == 0 and out else None
        return self._digests[node]

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """``argv`` in a throw-away container of the image, its identity in ``SSKJ_CONTAINER_*``."""
        digest = self.digest(node)
        if digest is None:
            return CommandResult(
                node, 125, "", f"image {self.config.image!r} not found on {node} ({self.config.runtime})"
            )
        marks = [
            f"SSKJ_CONTAINER_IMAGE={self.config.image}",
            f"SSKJ_CONTAINER_DIGEST={digest}",
            f"SSKJ_CONTAINER_RUNTIME={self.config.runtime}",
        ]
        full = self.config.run_argv(None, [], argv, rm=True)
        i = full.index(self.config.image)
        full[i:i] = [a for m in marks for a in ("-e", m)]
        return self.inner.run(node, full, timeout_s)

    def remove(self, node: str, name: str) -> bool:
        """``rm -f`` the container and check the runtime no longer lists it."""
        rt = self.config.runtime
        self.inner.run(node, [rt, "rm", "-f", name], 60.0)
        res = self.inner.run(node, [rt, "ps", "-a", "-q", "--filter", f"name=^{name}$"], 30.0)
        if res.returncode != 0:
            raise LauncherError(f"{rt} ps on {node} failed ({res.returncode}): {res.stderr.strip()[-300:]}")
        return not res.stdout.strip()

    def close(self) -> None:
        self.inner.close()

    def describe(self, cmd: NodeCommand) -> str:
        """The node's container command line as the dry run shows it (env by name only)."""
        env = (*self.config.env, *cmd.env)
        return shlex.join(self.config.run_argv(container_name(self.tag, cmd), [k for k, _ in env], cmd.argv, rm=False))
