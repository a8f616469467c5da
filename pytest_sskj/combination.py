"""The checks of a resolved :class:`~pytest_sskj.settings.Settings` that need the engines and the layouts.

Layouts, shapes and deployments are derived from their options here (:func:`dimensions`); then every engine and
layout combination is checked (:func:`check_combination`), then the generic checks of :mod:`pytest_sskj.validate`.
:mod:`pytest_sskj.registry` hands these to settings, which imports none of the subsystems they need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sskj.deploy.layouts import build_shapes, layout_problems, parse_size_seq, resolve_layouts
from pytest_sskj.deploy.topology import bind_run, topology_from_table
from pytest_sskj.engines import get_engine
from pytest_sskj.settings import usage_error, where
from pytest_sskj.spec import narrowed_settings
from pytest_sskj.speculative import split_arm
from pytest_sskj.validate import check_settings

if TYPE_CHECKING:
    from pytest_sskj.options import Option
    from pytest_sskj.profile import Profile
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = ["check_all", "check_combination", "dimensions"]


def dimensions(
    values: dict[str, Any], profile: Profile | None, sources: Mapping[str, str], opts: Mapping[str, Option]
) -> None:
    """Layouts and shapes from their options (and the profile's ``[[layouts]]`` tables); first, the engine's
    reference-job defaults are dropped where they do not belong (:func:`pytest_sskj.profile.settle_matrix`)."""
    from pytest_sskj.profile import settle_matrix

    served_topology = _deployment_target(values, sources, opts)
    _container_check(values, profile, sources, opts)
    settle_matrix(values, dict(sources) if not isinstance(sources, dict) else sources,
                  get_engine(values["engine"]), profile)  # fmt: skip
    tables = profile.layouts if profile else ()
    origin = str(profile.path) if profile else "profile"
    src = sources.get("layouts", "default")
    try:
        values["layouts"] = resolve_layouts(values["layouts"], tables, origin)
    except ValueError as exc:
        raise usage_error(
            opts["layouts"], where(src, opts["layouts"], profile), str(exc), "e.g. --layout tp2dp4,tp4dp2,tp8dp1"
        ) from None
    isl, osl = parse_size_seq(values["isl"]), parse_size_seq(values["osl"])
    try:
        values["shapes"] = build_shapes(isl, osl, mode=values["shape_mode"], limit=values["grid_limit"])
    except ValueError as exc:
        raise usage_error(
            opts["shape_mode"],
            where(sources.get("shape_mode", "default"), opts["shape_mode"], profile),
            str(exc),
            "give as many --isl as --osl values, or use --sskj-shape-mode grid",
        ) from None
    values["isl"], values["osl"] = values["shapes"][0]
    if profile is not None and profile.deployment is not None:
        try:
            topo = topology_from_table(profile.deployment, origin, template=values["node_template"])
        except ValueError as exc:
            raise pytest.UsageError(
                f"{exc}\n  accepted: see pytest_sskj/deploy/topology.py (groups: name, role, nodes, tp/dp/ep/pp, "
                "backend, chunk, server_args, env; router: port, node, policy)\n  Hint: fix the key the message names"
            ) from None
        _bind_deployment(values, profile, sources, opts, topo)
    if values.get("serve_deployment"):
        _same_topology(values, served_topology, sources, opts)


def _same_topology(
    values: dict[str, Any], served: str | None, sources: Mapping[str, str], opts: Mapping[str, Option]
) -> None:
    """A run naming a deployment describes the deployment that runs: the same ``[deployment]`` (groups, nodes,
    layouts, backends, router) as ``serve start`` was given, or none when it started one server group."""
    planned = values["deployment"].label() if values.get("deployment") is not None else None
    if planned == served:
        return
    opt = opts["serve_deployment"]
    src = where(sources.get("serve_deployment", "cli"), opt, None)
    raise usage_error(
        opt, src,
        f"deployment {values['serve_deployment']!r} runs {served or 'one server group'}; this run describes "
        f"{planned or 'one server group (no [deployment] in its profile)'}",
        "give the profile (and --nodes) that `serve start` was given, so that every row is labelled with the "
        "deployment that served it",
    )  # fmt: skip


def _deployment_target(values: dict[str, Any], sources: Mapping[str, str], opts: Mapping[str, Option]) -> str | None:
    """``--sskj-deployment NAME``: the named deployment's URL is the run's ``--target-url``; returns the
    deployment's topology label (``None`` for one server group)."""
    name = values.get("serve_deployment")
    if not name:
        return None
    opt = opts["serve_deployment"]
    src = where(sources.get("serve_deployment", "cli"), opt, None)
    if values.get("target_url"):
        raise usage_error(opt, src, "--target-url is given too: both name the server to benchmark",
                          "give one of them")  # fmt: skip
    from pytest_sskj.serve import ServeError, load

    try:
        state = load(Path(values["reports_dir"]), str(name))
        if not state.urls:
            raise ServeError(f"deployment {name!r} records no URL")
    except ServeError as exc:
        raise pytest.UsageError(
            f"{opt.display} ({src}): {str(exc).splitlines()[0]}\n  accepted: the name of a deployment started by "
            "`python -m pytest_sskj serve start NAME` with the same --reports-dir\n  Hint: `python -m pytest_sskj "
            "serve status` lists them"
        ) from None
    if state.engine != values["engine"]:
        raise pytest.UsageError(
            f"{opt.display} ({src}): deployment {name!r} runs engine {state.engine}, the run is for engine "
            f"{values['engine']}\n  accepted: the deployment's engine\n  Hint: add --engine {state.engine} "
            f"(or its profile{': --profile ' + state.profile if state.profile else ''})"
        )
    values["target_url"] = state.urls[0]
    if isinstance(sources, dict):
        sources["target_url"] = sources.get("serve_deployment", "cli")
    return state.topology


def _container_check(
    values: dict[str, Any], profile: Profile | None, sources: Mapping[str, str], opts: Mapping[str, Option]
) -> None:
    """``--launcher container``: the platform layer's ``[container]`` table (and ``--sskj-container-image``) must
    make a launchable container at parse time (an image, known keys, absolute mounts)."""
    if values.get("launcher") != "container":
        return
    from pytest_sskj.server.container import container_config

    table = profile.facts.get("platform", {}).get("container") if profile else None
    try:
        values["container"] = container_config(table, values.get("container_image"))
    except ValueError as exc:
        opt = opts["launcher"]
        raise pytest.UsageError(
            f"{opt.display} container ({where(sources.get('launcher', 'cli'), opt, profile)}): {exc}\n  accepted: a "
            "platform layer [container] table: image, runtime (docker|podman), mounts ['SRC:DST[:ro]'], gpus "
            "(all|none|0,1), env {NAME = value}, args [...]\n  Hint: give --sskj-container-image IMAGE, or add "
            "[container] image = ... to the profile's platform layer"
        ) from None


def _bind_deployment(
    values: dict[str, Any], profile: Profile, sources: Mapping[str, str], opts: Mapping[str, Option], topo: Any
) -> None:
    """The run's nodes, backend and chunk bound into the deployment's groups (deploy/topology.py: bind_run)."""

    def given(dest: str) -> tuple[Any, str]:
        src = sources.get(dest, "default")
        return (values[dest] or ()) if src not in ("engine", "default") else (), where(src, opts[dest], profile)

    (nodes, nodes_from), (backends, b_from), (chunks, c_from) = given("nodes"), given("backends"), given("chunks")
    try:
        topo = bind_run(topo, nodes=nodes, nodes_from=nodes_from, backends=backends, backends_from=b_from,
                        chunks=chunks, chunks_from=c_from)  # fmt: skip
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    values["deployment"], values["nodes"] = topo, topo.nodes
    values["backends"], values["chunks"] = (topo.arm,), ()


def _target_nodes_check(s: Settings, opts: Mapping[str, Option]) -> None:
    """``--target-url`` launches nothing, so ``--nodes`` would contradict it (unless the run names a
    ``[deployment]``: its nodes bind the groups the run is held to)."""
    if s.target_url is None or (s.serve_deployment and s.deployment is not None):
        return
    if s.sources.get("nodes") in ("cli", "env", "ini"):
        nodes_where = where(s.sources["nodes"], opts["nodes"], None)
        raise pytest.UsageError(
            f"--target-url benchmarks a server that is already running; --nodes (from {nodes_where}) "
            "would launch one\n  accepted: one of them\n  Hint: drop --target-url, or unset the nodes "
            "(unset SSKJ_NODES / remove sskj_nodes from the ini)"
        )


def _check_layouts(s: Settings) -> None:
    nnodes = max(1, len(s.nodes))
    from pytest_sskj.server.spec import ServerSpec

    # GPU fit only for engines that take GPUs (the engine's own checks run per layout in _engine_checks)
    gpu_engine = get_engine(s.engine).world_size(ServerSpec(engine=s.engine, backend=s.baseline)) > 0
    problems = [
        p for lay in s.layouts if gpu_engine for p in layout_problems(lay, nnodes=nnodes, gpus_per_node=s.gpus_per_node)
    ]
    if problems:
        raise pytest.UsageError(
            "--layout: " + "; ".join(problems) + f"\n  accepted: layouts whose TPxPPxDP fits {nnodes} node(s) x "
            f"{s.gpus_per_node} GPUs ({', '.join(s.nodes) or 'local'})"
            "\n  Hint: drop the layout, add --nodes, or set --sskj-gpus-per-node / the platform profile"
        )
    given = [f"--{k}" for k in ("tp", "dp", "ep", "pp") if s.sources.get(k) == "cli"]
    if s.layouts and given:
        raise pytest.UsageError(
            f"{' '.join(given)} and --layout both set parallel sizes; each layout carries its own"
            "\n  accepted: --layout tp2dp4,tp4dp2 alone, or --tp/--dp/--ep/--pp without --layout"
            "\n  Hint: drop the size flags, or write the layout you mean, e.g. --layout tp8ep4"
        )
    if s.layouts and s.deployment is not None:
        raise pytest.UsageError(
            "--layout and a profile's [deployment] both place the servers; a deployment's groups carry their own sizes"
            "\n  Hint: use a profile without [deployment] for a layout matrix"
        )
    names = [lay.name for lay in s.layouts]
    if s.expect_layout is not None and s.expect_layout not in names:
        raise pytest.UsageError(
            f"--sskj-expect-layout {s.expect_layout} is not one of the layouts {', '.join(names) or '(none)'}"
            "\n  Hint: add it to --layout"
        )


def _cells(s: Settings) -> list[tuple[str, Settings]]:
    """One narrowed settings per server of the run's layouts or deployment groups, each through the ServerSpec
    builder's override (:class:`~pytest_sskj.spec.SpecOverride`, as ``acceptance/matrix.spec_for`` and
    ``deploy/deployment.group_spec`` build their specs)."""
    if s.layouts:
        return [(f"layout {x.name}", narrowed_settings(s, x.override())) for x in s.layouts]
    if s.deployment is None:
        return []
    return [
        (
            f"deployment group {g.name}",
            narrowed_settings(
                s,
                g.override(),
                backends=(g.backend,) if g.backend else (),
                chunks=(g.chunk,) if g.chunk else (),
            ),
        )
        for g in s.deployment.groups
    ]


def _engine_checks(s: Settings, info: Any) -> None:
    """The engine's checks, once per layout or deployment group when the run has them (each is a server)."""
    s = replace(s, backends=tuple(split_arm(b)[0] for b in s.backends))  # the engine's backends, not the arms
    cells = _cells(s)
    if not cells:
        info.check_settings(s)
        return
    for what, cell in cells:
        try:
            info.check_settings(cell)
        except pytest.UsageError as exc:
            raise pytest.UsageError(f"{what}: {exc}") from None


def check_combination(s: Settings, opts: Mapping[str, Option]) -> None:
    info = get_engine(s.engine)
    unknown = [b for b in s.backends if split_arm(b)[0] not in info.backends] if s.deployment is None else []
    if unknown:
        place = where(s.sources.get("backends", "cli"), opts["backends"], None)
        raise pytest.UsageError(
            f"{place}: backend(s) {', '.join(unknown)} unknown to engine {s.engine!r}\n"
            f"  accepted: {', '.join(info.backends)} (the backends of engine {s.engine}, applied as "
            f"{info.backend_switch.describe()}; BACKEND+NAME adds the --sskj-speculative configuration NAME)\n"
            f"  Hint: --backend {','.join(info.defaults.get('backends') or info.backends[:2])}, "
            "or pick another --engine"
        )
    _check_layouts(s)
    if s.endpoint not in info.endpoints:
        place = where(s.sources.get("endpoint", "cli"), opts["endpoint"], None)
        raise pytest.UsageError(
            f"{place}: endpoint {s.endpoint!r} is not served by engine {s.engine!r}\n"
            f"  accepted: {', '.join(info.endpoints)} (the endpoints of engine {s.engine})\n"
            f"  Hint: engine {s.engine} serves: {', '.join(info.endpoints)}; --sskj-endpoint {info.endpoints[0]}, "
            "or pick another --engine"
        )
    _engine_checks(s, info)
    if s.launcher == "ssh" and not s.nodes:
        raise pytest.UsageError("--launcher ssh needs --nodes\n  Hint: --nodes 601-604 --launcher ssh")
    _target_nodes_check(s, opts)
    if s.expect_best_chunk is not None and s.expect_best_chunk not in s.chunks:
        raise pytest.UsageError(
            f"--expect-best-chunk {s.expect_best_chunk} is not one of the chunks "
            f"{','.join(map(str, s.chunks))}\n  Hint: add it to --chunk"
        )
    if s.search_floor is not None and s.search_floor > s.search_max:
        raise pytest.UsageError(f"--sskj-search-floor {s.search_floor} is above --sskj-search-max {s.search_max}")
    if s.max_repeats is not None and s.max_repeats < s.repeats:
        raise pytest.UsageError(
            f"--sskj-max-repeats {s.max_repeats} is below --repeats {s.repeats}\n"
            f"  accepted: an integer >= --repeats (the first look)\n  Hint: --sskj-max-repeats {max(10, s.repeats)}"
        )
    if s.osl < 1 or s.isl < 1:
        raise pytest.UsageError("--isl and --osl must be at least 1")


def check_all(s: Settings, opts: Mapping[str, Option]) -> None:
    """The engine/layout combination checks, then the generic ones (:func:`check_settings`)."""
    check_combination(s, opts)
    check_settings(s)


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns:
    the derived dimensions and the engine/layout combination checks."""
    registry.add_dimensions(dimensions)
    registry.add_check(check_combination)
