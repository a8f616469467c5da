"""The parallel layout of one stored point, from its row and its run's settings: one definition for ``export``,
the ``points`` table's layout columns and ``history``.

A point of a layout matrix (``--layout tp2dp4,tp4dp2``) carries its layout's name in the row; its sizes come
from that layout of the run's settings.  A point of a run without layouts has the run's own TP/EP/DP/PP.  A
point of a deployment (PD) has the deployment's groups instead: ``layout`` is the deployment kind, ``config``
names every group's sizes, backend and chunk, and the single-server size columns are ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LAYOUT_FIELDS", "config_text", "deployment_config", "point_layout"]

LAYOUT_FIELDS = ("layout", "config", "tp", "ep", "dp", "pp", "deployment")
"""The keys :func:`point_layout` returns (the ``points`` table's layout columns)."""

_SIZES = ("tp", "ep", "dp", "pp")


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def config_text(sizes: Mapping[str, Any]) -> str | None:
    """``TP4/EP1/DP2/PP1`` (the users' ``config`` column); ``None`` when a size is unknown."""
    vals = [_int(sizes.get(k)) for k in _SIZES]
    if any(v is None for v in vals):
        return None
    return "/".join(f"{k.upper()}{v}" for k, v in zip(_SIZES, vals, strict=True))


def deployment_config(dep: Mapping[str, Any]) -> str:
    """``PD prefill TP4/EP4/DP1/PP8 flashinfer_mxfp4 chunk 8192 + decode TP32/EP32/DP1/PP1 marlin``."""
    parts = []
    for g in dep.get("groups") or []:
        if not isinstance(g, Mapping):
            continue
        chunk = f" chunk {g['chunk']}" if g.get("chunk") else ""
        parts.append(f"{g.get('name')} {config_text(g) or '?'} {g.get('backend') or 'engine default'}{chunk}")
    return f"{str(dep.get('kind') or '').upper()} " + " + ".join(parts)


def point_layout(row: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """:data:`LAYOUT_FIELDS` of the point ``row`` of a run whose resolved settings are ``settings``."""
    dep = settings.get("deployment")
    if isinstance(dep, Mapping) and dep.get("groups"):
        return {
            "layout": str(dep.get("kind")),
            "config": deployment_config(dep),
            **dict.fromkeys(_SIZES),
            "deployment": row.get("deployment"),
        }
    name = row.get("layout")
    layouts = [x for x in settings.get("layouts") or [] if isinstance(x, Mapping)]
    lay = next((x for x in layouts if x.get("name") == name), None) if name else None
    src: Mapping[str, Any] = lay if lay is not None else settings
    sizes = {k: _int(src.get(k)) for k in _SIZES}
    return {"layout": name, "config": config_text(sizes), **sizes, "deployment": row.get("deployment")}
