"""``python -m pytest_sskj profiles``: list the shipped profiles, show one resolved.

``show`` loads the profile with its layers exactly as ``--profile`` does, then prints every setting it
supplies with the layer file it came from, the layer facts, its layouts (checked against the platform's
GPUs per node and the profile's nodes) and its deployment groups.  Settings the profile leaves unset
fall back to the engine default at run time (``pytest --profile NAME --sskj-dry-run`` shows the whole
resolution, command line and environment included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_sskj import parsing
from pytest_sskj.deploy.layouts import layout_problems, resolve_layouts
from pytest_sskj.profile import Profile, find_profile, list_profiles, load_profile

__all__ = ["profiles_command", "show_lines"]

Write = Callable[[str], None]


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def show_lines(prof: Profile) -> list[str]:
    """The resolved profile as printable lines; raises :class:`ValueError` on a bad layout or group."""
    lines = [f"profile {prof.name}: {_rel(prof.path)}"]
    if prof.description:
        lines.append(f"  {prof.description}")
    for kind, path in prof.layers.items():
        lines.append(f"layer {kind}: {_rel(path)}")
        for k, v in sorted(prof.facts.get(kind, {}).items()):
            lines.append(f"    {k} = {v}")
    lines.append("settings (the profile's level of the chain CLI > env > ini > profile > engine default > default):")
    for dest in sorted(prof.values):
        value = prof.values[dest]
        shown = ", ".join(e.partition("=")[0] + "=…" for e in value) if dest == "env" else value
        lines.append(f"    {dest} = {shown}    [{_rel(prof.origin(dest))}]")
    lines += _layout_lines(prof)
    lines += _deployment_lines(prof)
    return lines


def _layout_lines(prof: Profile) -> list[str]:
    layouts = resolve_layouts(None, prof.layouts, str(prof.path))
    if not layouts:
        return []
    nodes = parsing.expand_nodes(prof.values["nodes"]) if "nodes" in prof.values else ()
    gpn = int(prof.values.get("gpus_per_node", 8))
    out = [f"layouts ({len(layouts)}, checked against {max(1, len(nodes))} node(s) x {gpn} GPUs):"]
    for lay in layouts:
        bad = layout_problems(lay, nnodes=max(1, len(nodes)), gpus_per_node=gpn)
        extra = f" server args {' '.join(lay.server_args)}" if lay.server_args else ""
        out.append(f"    {lay.name}: {lay.sizes}{extra}{'  DOES NOT FIT: ' + '; '.join(bad) if bad else ''}")
    return out


def _deployment_lines(prof: Profile) -> list[str]:
    if prof.deployment is None:
        return []
    from pytest_sskj.deploy.topology import topology_from_table

    topo = topology_from_table(prof.deployment, str(prof.path))
    return ["deployment:", *(f"    {line}" for line in topo.describe())]


def profiles_command(action: str, name: str | None, out: Write, err: Write, keys: Sequence[str]) -> int:
    """Run ``profiles list`` / ``profiles show NAME``; 0 done, 2 bad input.  ``keys``: the setting keys a profile
    may set (:func:`pytest_sskj.profile.profile_keys` of the option table)."""
    if action == "list":
        found = list_profiles()
        if not found:
            err("no profiles/ folder found here or in this checkout")
            return 2
        for pname, path in found:
            try:
                desc = load_profile(path, keys).description
            except ValueError as exc:
                desc = f"BROKEN: {exc}"
            out(f"{pname}\t{desc}")
        return 0
    try:
        prof = load_profile(find_profile(name or ""), keys)
        lines = show_lines(prof)
    except ValueError as exc:
        err(str(exc))
        return 2
    for line in lines:
        out(line)
    return 0
