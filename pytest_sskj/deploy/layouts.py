"""Parallel layouts and request shapes as matrix dimensions.

A *layout* is one way to spread the model over the GPUs: ``tp2dp4`` (TP 2 x DP 4), ``tp32ep4``,
``pp8tp4ep4``; from a profile it can also carry its own server args and environment.  A *shape* is one
(ISL, OSL) pair; ``--isl 1K,16K --osl 128,1`` is a grid (every ISL with every OSL, like the users'
``ISL_LIST`` x ``OSL_LIST``) or, with ``--sskj-shape-mode pairs``, the pairs (1K, 128), (16K, 1); a
grid limit keeps the first N shapes (their ``GRID_LIMIT``).  Pure data and parsing: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_sskj import parsing
from pytest_sskj.spec import SpecOverride

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = [
    "LAYOUT_TABLE_KEYS",
    "Layout",
    "build_shapes",
    "layout_gpus",
    "layout_problems",
    "parse_layout",
    "parse_size_seq",
    "resolve_layouts",
    "shape_id",
]

_TOKEN = re.compile(r"(tp|dp|ep|pp)(\d+)")
LAYOUT_TABLE_KEYS = ("dp", "env", "ep", "name", "notes", "pp", "server_args", "tp")


@dataclass(frozen=True)
class Layout:
    """One parallel layout: sizes, and the server args / env it adds to the run's."""

    name: str
    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1
    server_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    notes: str = ""

    @property
    def sizes(self) -> str:
        return f"TP{self.tp}/DP{self.dp}/EP{self.ep}/PP{self.pp}"

    def override(self) -> SpecOverride:
        """What this layout changes of the run's server spec: its sizes, args and env, labelled with its name (the
        one narrowing of a layout, for the spec builder and the settings checks alike)."""
        return SpecOverride(tp=self.tp, dp=self.dp, ep=self.ep, pp=self.pp, server_args=self.server_args,
                            env=self.env, labels=(("layout", self.name),))  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tp": self.tp,
            "dp": self.dp,
            "ep": self.ep,
            "pp": self.pp,
            "server_args": list(self.server_args),
            "env": sorted(k for k, _ in self.env),  # names only: values may be secrets
            "notes": self.notes,
        }


def parse_layout(token: str) -> Layout:
    """``tp2dp4`` -> Layout(tp=2, dp=4); sizes in any order, each at most once, each >= 1."""
    text = token.strip().lower()
    parts = _TOKEN.findall(text)
    if not text or "".join(f"{k}{v}" for k, v in parts) != text:
        raise ValueError(
            f"{token!r} is not a layout: write sizes as tp<N>, dp<N>, ep<N>, pp<N> run together, e.g. tp2dp4, tp32ep4"
        )
    sizes: dict[str, int] = {}
    for key, num in parts:
        if key in sizes:
            raise ValueError(f"layout {token!r} gives {key} twice")
        if int(num) < 1:
            raise ValueError(f"layout {token!r}: {key} must be at least 1")
        sizes[key] = int(num)
    return Layout(name=text, tp=sizes.get("tp", 1), dp=sizes.get("dp", 1), ep=sizes.get("ep", 1), pp=sizes.get("pp", 1))


def _from_table(t: Mapping[str, Any], where: str) -> Layout:
    unknown = sorted(k for k in t if k not in LAYOUT_TABLE_KEYS)
    if unknown:
        raise ValueError(
            f"{where}: layout table has unknown key(s) {', '.join(unknown)}; known keys: {', '.join(LAYOUT_TABLE_KEYS)}"
        )
    name = str(t.get("name") or "").strip()
    if not name or not re.match(r"^[A-Za-z0-9_.-]+$", name):
        raise ValueError(f"{where}: every [[layouts]] table needs a name (letters, digits, '_', '.', '-')")
    sizes = {}
    for k in ("tp", "dp", "ep", "pp"):
        v = t.get(k, 1)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{where}: layout {name!r}: {k} must be a whole number >= 1, not {v!r}")
        sizes[k] = v
    args = t.get("server_args", [])
    env = t.get("env", {})
    if not isinstance(args, list) or not isinstance(env, dict):
        raise ValueError(f"{where}: layout {name!r}: server_args is a list of strings, env a table")
    return Layout(
        name=name,
        server_args=tuple(str(a) for a in args),
        env=tuple((str(k), str(v)) for k, v in env.items()),
        notes=str(t.get("notes", "")),
        tp=sizes["tp"],
        dp=sizes["dp"],
        ep=sizes["ep"],
        pp=sizes["pp"],
    )


def resolve_layouts(
    text: str | None, tables: Sequence[Mapping[str, Any]] = (), where: str = "profile"
) -> tuple[Layout, ...]:
    """The run's layouts: ``text`` (``tp2dp4,tp4dp2``) selects profile layouts by name or parses tokens.

    ``text`` ``None`` means every profile layout (none without a profile).  Raises :class:`ValueError`.
    """
    named = {}
    for t in tables:
        lay = _from_table(t, where)
        if lay.name in named:
            raise ValueError(f"{where}: layout {lay.name!r} is declared twice")
        named[lay.name] = lay
    if text is None:
        return tuple(named.values())
    names = parsing.parse_name_list(text)
    return tuple(named.get(n) or named.get(n.lower()) or parse_layout(n) for n in names)


def layout_gpus(layout: Layout) -> int:
    """GPUs one deployment of ``layout`` occupies: TP x PP per replica, DP replicas (EP lives inside TP)."""
    return layout.tp * layout.pp * layout.dp


def layout_problems(layout: Layout, *, nnodes: int, gpus_per_node: int) -> list[str]:
    """Why ``layout`` does not fit ``nnodes`` x ``gpus_per_node`` GPUs ([] when it fits)."""
    need = layout_gpus(layout)
    have = nnodes * gpus_per_node
    out = []
    if need > have:
        out.append(
            f"layout {layout.name} ({layout.sizes}) needs TPxPPxDP = {need} GPUs, but {nnodes} node(s) x "
            f"{gpus_per_node} GPUs = {have}"
        )
    elif nnodes > 1 and need % nnodes:
        out.append(f"layout {layout.name} ({layout.sizes}): {need} GPUs cannot be split evenly over {nnodes} nodes")
    if layout.ep > 1 and layout.tp % layout.ep:
        out.append(f"layout {layout.name}: EP {layout.ep} must divide TP {layout.tp} (MoE TP = TP / EP)")
    return out


def parse_size_seq(text: Any) -> tuple[int, ...]:
    """``1K,16K`` -> (1024, 16384); a single int stays one; duplicates allowed (shapes may pair them)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return (parsing.parse_size(str(text)),)
    if isinstance(text, (tuple, list)):
        items = [str(t) for t in text]
    else:
        items = [t for t in str(text).split(",") if t.strip()]
    if not items:
        raise ValueError("the list is empty; give at least one size, e.g. 1K,16K")
    return tuple(parsing.parse_size(t.strip()) for t in items)


def build_shapes(
    isl: Sequence[int], osl: Sequence[int], *, mode: str = "grid", limit: int | None = None
) -> tuple[tuple[int, int], ...]:
    """The (ISL, OSL) shapes: a grid (ISL-major) or pairs, duplicates dropped, the first ``limit`` kept."""
    if mode == "pairs":
        if len(isl) != len(osl):
            raise ValueError(
                f"--sskj-shape-mode pairs needs as many ISLs as OSLs, got {len(isl)} ISL(s) and {len(osl)} OSL(s)"
            )
        shapes = list(zip(isl, osl, strict=True))
    elif mode == "grid":
        shapes = [(i, o) for i in isl for o in osl]
    else:
        raise ValueError(f"shape mode {mode!r} is not grid or pairs")
    unique = tuple(dict.fromkeys(shapes))
    return unique[:limit] if limit else unique


def shape_id(shape: tuple[int, int]) -> str:
    return f"isl{shape[0]}-osl{shape[1]}"


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns:
    the ``size_seq`` value kind's parser (``--isl``, ``--osl``)."""
    registry.add_parser("size_seq", parse_size_seq)
