"""Probing the nodes of a spec and comparing what they run (see :mod:`pytest_sskj.identity`)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pytest_sskj.identity.probe_script import PROBE_PY
from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.spec import ServerSpec

__all__ = [
    "Difference",
    "NodeIdentity",
    "build_facts",
    "differences",
    "identity_lines",
    "mismatch_message",
    "modules_for",
    "parse_probe",
    "probe_nodes",
]

_MARK = "SSKJ-IDENTITY "
_PER_PACKAGE = ("version", "commit", "cuda")


def modules_for(engine: str) -> tuple[str, ...]:
    """The modules whose identity is probed for ``engine``: its version modules (``Engine.versions.modules``: the
    engine, its kernel packages, torch), else its distributions as module names."""
    from pytest_sskj.engines import get_engine

    facts = get_engine(engine).versions
    return facts.modules or tuple(dict.fromkeys(d.replace("-", "_") for d in facts.distributions))


@dataclass(frozen=True)
class NodeIdentity:
    """What one node runs, as its probe reported it (``error`` set when the probe did not answer)."""

    node: str
    rank: int
    hostname: str | None = None
    python: str | None = None
    packages: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    driver: Mapping[str, Any] = field(default_factory=dict)
    image: Mapping[str, Any] | None = None
    error: str | None = None

    def items(self) -> dict[str, Any]:
        """The compared items, flattened: ``sglang.version``, ``sglang.commit``, ``torch.cuda``, ``python``,
        ``driver``, ``driver.cuda``, ``image.digest`` (the image name where no digest is known)."""
        out: dict[str, Any] = {"python": self.python}
        for name, p in sorted(self.packages.items()):
            for key in _PER_PACKAGE:
                if p.get(key) is not None or key != "cuda":
                    out[f"{name}.{key}"] = p.get(key)
        out["driver"] = self.driver.get("version")
        out["driver.cuda"] = self.driver.get("cuda")
        img = self.image or {}
        out["image.digest"] = img.get("digest") or img.get("name")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "rank": self.rank,
            "hostname": self.hostname,
            "python": self.python,
            "packages": {k: dict(v) for k, v in self.packages.items()},
            "driver": dict(self.driver),
            "image": dict(self.image) if self.image else None,
            "error": self.error,
        }


def parse_probe(node: str, rank: int, returncode: int, stdout: str, stderr: str) -> NodeIdentity:
    """A :class:`NodeIdentity` from the probe's output (an ``error`` identity when it printed no answer)."""
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(_MARK)), None)
    if returncode != 0 or line is None:
        tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        return NodeIdentity(node, rank, error=f"identity probe exited {returncode}: {tail[:300]}")
    try:
        data = json.loads(line[len(_MARK) :])
    except json.JSONDecodeError as exc:
        return NodeIdentity(node, rank, error=f"identity probe printed invalid JSON: {exc}")
    return NodeIdentity(
        node=node,
        rank=rank,
        hostname=data.get("hostname"),
        python=data.get("python"),
        packages=data.get("packages") or {},
        driver=data.get("driver") or {},
        image=data.get("image"),
    )


def probe_nodes(launcher: Launcher, spec: ServerSpec, *, timeout_s: float = 60.0) -> list[NodeIdentity]:
    """Probe every node of ``spec`` (this machine when it names none) in parallel, rank order kept."""
    nodes = list(spec.nodes) or ["local"]
    python = spec.python or ("python3" if spec.nodes else sys.executable)
    argv = [python, "-c", PROBE_PY, *modules_for(spec.engine)]

    def one(rank_node: tuple[int, str]) -> NodeIdentity:
        rank, node = rank_node
        try:
            res = launcher.run(node, argv, timeout_s=timeout_s)
        except Exception as exc:  # an unreachable node is reported, not raised: the launch itself says why
            return NodeIdentity(node, rank, error=f"identity probe failed: {type(exc).__name__}: {exc}")
        return parse_probe(node, rank, res.returncode, res.stdout, res.stderr)

    with ThreadPoolExecutor(max_workers=min(16, len(nodes))) as ex:
        return list(ex.map(one, enumerate(nodes)))


@dataclass(frozen=True)
class Difference:
    """One compared item on which the nodes disagree: each node's value (``None``: not found there)."""

    item: str
    values: Mapping[str, Any]

    def text(self) -> str:
        groups: dict[str, list[str]] = {}
        for node, v in self.values.items():
            groups.setdefault("absent" if v is None else str(v), []).append(node)
        return f"{self.item}: " + "; ".join(f"{', '.join(ns)} = {v}" for v, ns in groups.items())


def differences(identities: Sequence[NodeIdentity]) -> list[Difference]:
    """Every compared item whose value is not the same on all probed nodes (nodes whose probe failed are left
    out: the failure is recorded on its own)."""
    ok = [i for i in identities if i.error is None]
    if len(ok) < 2:
        return []
    per = {i.node: i.items() for i in ok}
    keys = sorted({k for items in per.values() for k in items})
    out = []
    for k in keys:
        values = {n: items.get(k) for n, items in per.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            out.append(Difference(k, values))
    return out


def mismatch_message(label: str, diffs: Sequence[Difference]) -> str:
    """The refusal of a mixed launch: the nodes and the differing items, and how to allow it."""
    lines = "\n".join(f"  - {d.text()}" for d in diffs)
    return (  # "[environment]" is report.categories.ENVIRONMENT (the report layer sits above this one)
        f"[environment] server {label}: the nodes do not run the same build; nothing was launched:\n{lines}\n"
        "  Hint: install one build (one image) on every node, or pass --sskj-allow-mixed-builds for a deliberate mix"
    )


def build_facts(identities: Sequence[NodeIdentity]) -> dict[str, Any]:
    """The items every probed node shares (``sglang.commit``...), ``mixed_items`` for those they do not, and
    ``build``: a 12-hex digest of the shared items (what ``compare`` sees as "the same build")."""
    ok = [i for i in identities if i.error is None]
    if not ok:
        return {}
    diff = {d.item for d in differences(ok)}
    shared = {k: v for k, v in ok[0].items().items() if k not in diff and v is not None}
    out: dict[str, Any] = {f"build.{k}": v for k, v in shared.items()}
    out["build"] = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:12]
    if diff:
        out["build.mixed_items"] = sorted(diff)
    return out


def node_line(node: Mapping[str, Any]) -> str:
    """One node's identity in one line: ``sglang 0.5.23 @593b1a9c; flashinfer 0.6.18 @b525c513; torch 2.11.0+cu130
    (CUDA 13.0); driver 580.65 (CUDA 13.0); image sha256:...`` (its probe error where it did not answer)."""
    if node.get("error"):
        return f"unknown: {node['error']}"
    parts = []
    for name, p in sorted((node.get("packages") or {}).items()):
        text = f"{name} {p.get('version') or '?'}"
        if p.get("commit"):
            text += f" @{str(p['commit'])[:12]}"
        if p.get("cuda"):
            text += f" (CUDA {p['cuda']})"
        parts.append(text)
    drv = node.get("driver") or {}
    parts.append(f"driver {drv['version']} (CUDA {drv.get('cuda') or '?'})" if drv.get("version") else "no driver")
    img = node.get("image") or {}
    if img.get("digest") or img.get("name"):
        parts.append(f"image {img.get('name') or ''} {img.get('digest') or ''}".strip())
    return "; ".join(parts)


def identity_lines(identity: Any) -> dict[str, str]:
    """Allure environment entries from the manifest's ``identity``: ``identity.<node>`` = :func:`node_line` for
    every node (once, however many server labels probed it) and ``identity.same_build``."""
    out: dict[str, str] = {}
    if not isinstance(identity, Mapping):
        return out
    same = True
    for entry in identity.values():
        if not isinstance(entry, Mapping):
            continue
        same = same and bool(entry.get("same_build", True))
        for node in entry.get("nodes") or []:
            if isinstance(node, Mapping):
                out.setdefault(f"identity.{node.get('node')}", node_line(node))
    if out:
        out["identity.same_build"] = (
            "yes"
            if same
            else "NO: "
            + "; ".join(d for e in identity.values() if isinstance(e, Mapping) for d in e.get("differences") or [])
        )
    return out
