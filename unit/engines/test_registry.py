"""Engines are units: one registry, one declared interface, no engine name outside ``pytest_sskj/engines/``."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from pytest_sskj.engines import DEFAULT_ENGINE, ENGINE_NAMES, ENGINES, UnknownEngine, get_engine, node_commands
from pytest_sskj.engines.base import CATEGORIES, SEVERITIES, Engine
from pytest_sskj.engines.embedded import VARIANTS
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.subsystems import build_registry
from unit.source_trees import parsed

PKG = Path(__file__).resolve().parents[2] / "pytest_sskj"
ENGINE_NAME_LITERAL = re.compile(r'"(sglang|vllm|embedded)"')
ENGINE_STAND_INS = {
    PKG / "twin": "the stand-in SGLang cluster (docs/twin.md) is SGLang's test double: it answers SGLang's own "
    "command line and HTTP surface, so it names SGLang and reads the SGLang engine's flag tables (its backends, "
    "its pinned version) instead of copying them",
}
"""Packages that stand in for one engine, with the reason; nothing else outside ``engines/`` names an engine."""


def test_engine_names_are_quoted_only_under_the_engines_package() -> None:
    """The check of ``git grep -nE '"(sglang|vllm|embedded)"' pytest_sskj``, without needing git."""
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if path.is_relative_to(PKG / "engines") or any(path.is_relative_to(p) for p in ENGINE_STAND_INS):
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if ENGINE_NAME_LITERAL.search(line):
                offenders.append(f"{path.relative_to(PKG.parent)}:{no}: {line.strip()}")
    assert not offenders, "engine names outside pytest_sskj/engines/ (ask the registry instead):\n" + "\n".join(
        offenders
    )


def _runtime_imports(path: Path) -> set[str]:
    tree = parsed(path)
    skip = {
        id(n)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for stmt in branch.body
        for n in ast.walk(stmt)
    }
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_sskj"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("pytest_sskj"))
    return out


@functools.cache  # parsed once per session: every test reads the same package
def _module_graph() -> dict[str, set[str]]:
    mods: dict[str, Path] = {}
    for p in PKG.rglob("*.py"):
        name = ".".join(p.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__")
        mods[name] = p
    return {m: {t for t in _runtime_imports(p) if t in mods and t != m} for m, p in mods.items()}


def _cycle_from(graph: dict[str, set[str]], start: str) -> list[str] | None:
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


@pytest.mark.parametrize("module", ["pytest_sskj.server.spec", "pytest_sskj.server.embedded", "pytest_sskj.engines"])
def test_no_import_circle_through_the_server_and_engine_modules(module: str) -> None:
    """Function-level imports count too (only ``if TYPE_CHECKING:`` blocks are left out)."""
    graph = _module_graph()
    assert module in graph, f"{module} not found under {PKG}"
    cycle = _cycle_from(graph, module)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_only_the_registry_imports_engine_modules() -> None:
    graph = _module_graph()
    engine_modules = {f"pytest_sskj.engines.{n}" for n in ("embedded", "sglang", "vllm")}
    stand_ins = tuple(".".join(p.relative_to(PKG.parent).parts) + "." for p in ENGINE_STAND_INS)
    importers = sorted(
        m
        for m, deps in graph.items()
        if deps & engine_modules and m != "pytest_sskj.engines.registry" and not m.startswith(stand_ins)
    )
    assert importers == [], f"engine modules imported outside the registry by {importers}"


def test_unknown_engine_fails_loudly_with_the_known_names() -> None:
    with pytest.raises(UnknownEngine, match=r"unknown engine 'tgi'; known engines: embedded, sglang, vllm"):
        get_engine("tgi")
    with pytest.raises(UnknownEngine):
        node_commands(ServerSpec(engine="tgi", backend="auto"))


def test_engine_option_choices_come_from_the_registry() -> None:
    (opt,) = [o for o in build_registry().options if o.dest == "engine"]
    assert opt.choices == ENGINE_NAMES == tuple(ENGINES), (opt.choices, ENGINE_NAMES)
    assert DEFAULT_ENGINE in ENGINE_NAMES


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_every_engine_fills_the_declared_interface(name: str) -> None:
    e = get_engine(name)
    assert isinstance(e, Engine) and e.name == name
    assert e.backends and len(set(e.backends)) == len(e.backends), e.backends
    default_backends = tuple(e.defaults["backends"])
    assert set(default_backends) <= set(e.backends), f"default backends {default_backends} not accepted by {name}"
    assert e.defaults["endpoint"] in e.endpoints, (e.defaults["endpoint"], e.endpoints)
    assert e.health_path.startswith("/")
    assert e.restart_cost in ("cheap", "expensive")
    assert e.point_budget_s > 0
    assert e.token_ids.strip(), "the token-id capability must be named"
    assert e.versions.distributions, "the manifest needs the engine's distribution"
    assert e.logs.healthy_markers, "a healthy start must be recognisable in the log"
    assert e.logs.rank0_only_markers <= set(e.logs.healthy_markers)
    for s in e.logs.signatures:
        assert s.category in CATEGORIES and s.severity in SEVERITIES, s
    if e.backend_switch.kind == "env":
        assert set(e.backend_switch.env) == set(e.backends), "every backend needs its environment (maybe empty)"
    if e.backend_switch.kind == "flag":
        assert e.backend_switch.flag and e.backend_switch.flag.startswith("--")


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_backend_reaches_the_command_as_the_switch_declares(name: str) -> None:
    e = get_engine(name)
    backend = e.defaults["backends"][-1]
    (cmd,) = node_commands(ServerSpec(engine=name, backend=backend, model_path="/m", chunk=512))
    if e.backend_switch.kind == "flag":
        i = cmd.argv.index(str(e.backend_switch.flag))
        assert cmd.argv[i + 1] == backend, cmd.argv
    elif e.backend_switch.kind == "env":
        assert set(e.backend_switch.env[backend]) <= set(cmd.env), (cmd.env, e.backend_switch.env[backend])
    else:
        slots = cmd.argv[cmd.argv.index("--parallel") + 1]
        assert int(slots) == VARIANTS[backend].slots, cmd.argv


def test_embedded_variant_table_drives_the_launch_parameters() -> None:
    assert set(VARIANTS) == set(get_engine(DEFAULT_ENGINE).backends)
    for name, v in VARIANTS.items():
        (cmd,) = node_commands(ServerSpec(engine=DEFAULT_ENGINE, backend=name, model_path="/m.gguf", chunk=256))
        argv = list(cmd.argv)
        assert argv[argv.index("--parallel") + 1] == str(v.slots)
        assert argv[argv.index("--batch") + 1] == "256"
        assert ("--threads" in argv) == (v.threads is not None)
        assert ("--ubatch" in argv) == (v.ubatch is not None)


def test_gpus_needed_come_from_the_engine() -> None:
    nodes = ("601", "602", "603", "604")
    assert get_engine("sglang").gpus_per_node(ServerSpec("sglang", "marlin", nodes=nodes, tp=32, ep=4)) == 8
    assert get_engine(DEFAULT_ENGINE).gpus_per_node(ServerSpec(DEFAULT_ENGINE, "parallel")) == 0


def test_an_endpoint_the_engine_does_not_serve_is_refused_at_parse_time(pytester: pytest.Pytester) -> None:
    served = get_engine(DEFAULT_ENGINE).endpoints
    assert "generate" not in served, "premise: llama.cpp has no SGLang /generate"
    with pytest.raises(pytest.UsageError) as info:
        pytester.parseconfigure("--sskj-endpoint", "generate")
    msg = str(info.value)
    assert "endpoint 'generate' is not served by engine 'embedded'" in msg, msg
    assert f"engine embedded serves: {', '.join(served)}" in msg, msg


def test_an_unknown_backend_names_the_accepted_ones_and_how_they_are_applied(pytester: pytest.Pytester) -> None:
    with pytest.raises(pytest.UsageError) as info:
        pytester.parseconfigure("--engine", "sglang", "--backend", "marlin,nope")
    msg = str(info.value)
    assert "backend(s) nope unknown to engine 'sglang'" in msg, msg
    assert "flashinfer_megamoe" in msg and "applied as flag --moe-runner-backend <backend>" in msg, msg
