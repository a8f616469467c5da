"""The architecture holds: layers run one way, seams are declared (no getattr on our own objects), and no
function of the contracts' files is above cyclomatic complexity 20.

The import graph is read from the source (``ast``; imports under ``if TYPE_CHECKING:`` are types only and do
not count).  A *unit* is a subpackage (``server``, ``engines``) or a top-level module (``settings``,
``nodes``).  :data:`LAYERS` is the order, bottom first; a unit may import units of its own layer or below.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from unit.source_trees import parsed

PKG = Path(__file__).resolve().parents[2] / "pytest_sskj"

LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "foundation",
        frozenset(
            {
                "errors",
                "nodes",
                "vocabulary",
                "rundir",
                "records",
                "markers",
                "interrupts",
                "rewrite",
                "parsing",
                "slo",
                "validate",
                "redact",
                "spec",
                "speculative",
                "stash",
                "hookspecs",
                "schema",
                "httpopts",
                "files",
                "names",
            }
        ),
    ),
    ("engines", frozenset({"engines"})),
    ("settings", frozenset({"options", "profile", "settings", "registry", "recording"})),
    ("server", frozenset({"server"})),
    ("clients", frozenset({"gpu", "bench", "numerics", "models", "testing", "identity", "telemetry", "accuracy"})),
    ("flows", frozenset({"acceptance", "deploy", "history", "report", "plan", "twin", "combination", "serve"})),
    ("entry", frozenset({"plugin", "fixtures", "subsystems", "__main__", "__init__"})),
)
"""Bottom first.  ``gpu`` and ``server`` are in different layers: gpu may use server types, never the reverse."""

ALLOWED_UP: frozenset[tuple[str, str]] = frozenset(
    {
        # the embedded engine's llama.cpp argv and model helpers live with the embedded server process
        ("engines", "server"),
    }
)
"""Upward arrows allowed by name (at most 3)."""

PENDING_UP: dict[tuple[str, str], str] = {}
"""Upward arrows of other streams' modules, named with the stream that removes them.  The test fails when one
disappears (delete its row) or a new one appears (fix it, or argue for it here)."""


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _imports(path: Path) -> Iterator[str]:
    tree = parsed(path)
    types_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in types_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pytest_sskj":
            if node.module == "pytest_sskj":
                yield from (f"pytest_sskj.{a.name}" for a in node.names if _is_module(a.name))
            else:
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "pytest_sskj")


def _is_module(name: str) -> bool:
    return (PKG / f"{name}.py").is_file() or (PKG / name / "__init__.py").is_file()


def _module(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@functools.cache  # parsed once per session: every test reads the same package
def import_graph() -> dict[str, set[str]]:
    """Unit -> units it imports at run time."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        src = _unit(_module(path))
        for target in _imports(path):
            dst = _unit(target)
            if dst != src:
                graph.setdefault(src, set()).add(dst)
    return graph


@functools.cache  # parsed once per session: every test reads the same package
def _layer_of() -> dict[str, int]:
    return {u: i for i, (_, units) in enumerate(LAYERS) for u in units}


def upward_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    layer = _layer_of()
    return {(a, b) for a, bs in graph.items() for b in bs if layer[b] > layer[a]}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_unit_has_a_layer() -> None:
    graph = import_graph()
    units = set(graph) | {b for bs in graph.values() for b in bs}
    missing = sorted(units - set(_layer_of()))
    assert not missing, f"units without a layer: {missing}; place each in LAYERS (unit/architecture/test_layers.py)"


def test_layers_run_one_way() -> None:
    up = upward_arrows(import_graph())
    assert len(ALLOWED_UP) <= 3, f"at most 3 allowed upward arrows, {len(ALLOWED_UP)} listed"
    new = sorted(up - ALLOWED_UP - set(PENDING_UP))
    assert not new, f"imports running up a layer (LAYERS is bottom first): {new}"
    gone = sorted(set(PENDING_UP) - up) + sorted(ALLOWED_UP - up)
    assert not gone, f"listed upward arrows that no longer exist (delete their rows): {gone}"


@functools.cache  # parsed once per session: every test reads the same package
def module_graph() -> dict[str, set[str]]:
    """Module -> modules it imports at run time (an imported name that is no module counts as its module)."""
    mods = {_module(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for m, p in mods.items():
        for d in _imports(p):
            while d not in mods and "." in d:
                d = d.rsplit(".", 1)[0]
            if d in mods and d != m:
                graph.setdefault(m, set()).add(d)
    return graph


PENDING_CYCLES: dict[tuple[str, ...], str] = {}
"""Module cycles of other streams' files, named with the stream that breaks them (the test fails when one goes)."""


def test_no_import_cycles_between_modules() -> None:
    found = {tuple(c) for c in cycles(module_graph())}
    new = sorted(found - set(PENDING_CYCLES))
    assert not new, f"import cycles between modules: {new}"
    gone = sorted(set(PENDING_CYCLES) - found)
    assert not gone, f"listed cycles that no longer exist (delete their rows): {gone}"


def test_gpu_and_server_do_not_import_each_other_both_ways() -> None:
    graph = import_graph()
    assert "gpu" not in graph.get("server", set()), "server/ imports gpu/ (the pre-launch comes through a hook)"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert upward_arrows({"engines": {"server"}, "server": {"engines"}}) == {("engines", "server")}


# -- declared seams: no getattr on our own objects -----------------------------------------------------------
FOREIGN_GETATTR: dict[str, str] = {
    "server/launcher.py": "the class a LAUNCHERS row names, on an imported module",
    "server/fixtures.py": "pytest's config.workerinput (xdist) and request.param (parametrized only)",
    "gpu/fixtures.py": "pytest items without fixtures (doctest items) have no fixturenames; xdist workerinput",
    "gpu/inventory.py": "NVML: process entries and constants differ between pynvml versions",
    "__main__.py": "argparse's Namespace: `name` exists only for the subcommands that take it",
    "acceptance/agreement.py": "Agreement.value(metric): its own figure fields by the gate's metric name",
    "acceptance/live.py": "pytest's TerminalReporter/TerminalWriter (isatty, the current line: private)",
    "acceptance/plugin.py": "pytest items' callspec (parametrized only), config.workerinput, signal.SIGALRM",
    "acceptance/resume.py": "the Settings fields MEASURED_SETTINGS names, by name (the resume fingerprint)",
    "acceptance/session.py": "config.workerinput (xdist) and the next item's callspec (parametrized only)",
    "bench/__init__.py": "the lazily imported name of a bench submodule (PEP 562 __getattr__)",
    "bench/progress.py": "config.workerinput (xdist)",
    "bench/records.py": "RequestRecord.to_dict: its own dataclass fields (asdict deep-copies the stamp lists)",
    "bench/transport.py": "httpx.Request._content (whether the body was read: private, version-dependent)",
    "deploy/plugin.py": "pytest items' callspec (parametrized only), signal.SIGALRM",
    "history/cli.py": "argparse's Namespace: the filter options by name",
    "history/plugin.py": "config.workerinput (xdist), pytest items' callspec",
    "identity/plugin.py": "config.workerinput (xdist)",
    "numerics/flashinfer_probe.py": "flashinfer's and sglang's modules: entry points differ between versions",
    "plugin.py": "config.workerinput (xdist), a report's `when` (collect reports have none)",
    "report/allure.py": "allure-pytest's listener's config; allure's attachment types by name; a PointSummary "
    "field by its metric's attribute name",
    "report/outcomes.py": "pytest reports: wasxfail and longrepr.reprcrash exist only for some outcomes",
    "report/plugin.py": "pytest's config.option (file_or_dir, keyword, ...) and xdist's workeroutput",
    "report/summary.py": "a PointSummary field by the MEDIANS_FIELDS name",
    "rewrite.py": "pytest's assertion-rewrite hook internals (private, version-dependent)",
    "settings.py": "pytest's config.invocation_params (a stand-in config in tests has none)",
    "validate.py": "pytest's config._inicfg / option.override_ini (the ini keys given; private)",
}
"""Files of the package that still call getattr, and why it is not on our own object's declared interface."""


def _own_files() -> list[Path]:
    """Every file of the package (h4-contracts started with the contracts' files; the rest joined them)."""
    return sorted(PKG.rglob("*.py"))


def _getattr_calls(path: Path) -> int:
    tree = parsed(path)
    return sum(
        1
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in ("getattr", "hasattr")
        and not (isinstance(n.func, ast.Name) and n.func.id == "hasattr" and _is_os_probe(n))
    )


def _is_os_probe(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Name) and call.args[0].id in ("os", "threading", "cls")


def test_no_getattr_on_our_own_objects_in_the_contracts_files() -> None:
    found = {str(p.relative_to(PKG)): n for p in _own_files() if (n := _getattr_calls(p))}
    unexplained = {k: v for k, v in found.items() if k not in FOREIGN_GETATTR}
    stale = sorted(set(FOREIGN_GETATTR) - set(found))
    assert not stale, f"FOREIGN_GETATTR rows for files without getattr (delete them): {stale}"
    assert not unexplained, (
        f"getattr/hasattr in {unexplained}: declare the member on the seam's Protocol instead "
        "(or, for a foreign object, say why in FOREIGN_GETATTR)"
    )


HTTPX_BUILDERS = frozenset({"get", "post", "stream", "request", "Client", "AsyncClient"})
OWN_TRANSPORTS = {"bench/client.py": "the benchmark client builds its own transports (LeanTransport, httpx's pool)"}


def _httpx_calls_without_options(path: Path) -> list[int]:
    """Lines of ``httpx.<builder>(...)`` calls that do not pass ``**client_options(...)``."""
    tree = parsed(path)
    bad = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in HTTPX_BUILDERS):
            continue
        if not (isinstance(n.func.value, ast.Name) and n.func.value.id == "httpx"):
            continue
        spread = [k.value for k in n.keywords if k.arg is None]
        if not any(isinstance(v, ast.Call) and getattr(v.func, "id", "") == "client_options" for v in spread):
            if not any(isinstance(v, ast.Name) for v in spread):  # ``opts = client_options(base)`` then ``**opts``
                bad.append(n.lineno)
    return bad


def test_every_short_lived_http_client_is_built_with_the_declared_options() -> None:
    """httpopts.client_options: no proxy from the environment, no certificate store for plain http (15-35 ms of
    CPU per client here, paid per health probe and config read beside the measured server)."""
    found = {str(p.relative_to(PKG)): lines for p in _own_files() if (lines := _httpx_calls_without_options(p))}
    unexplained = {k: v for k, v in found.items() if k not in OWN_TRANSPORTS}
    assert not unexplained, f"httpx calls without **client_options(url) (pytest_sskj/httpopts.py): {unexplained}"
    assert set(OWN_TRANSPORTS) <= set(found), (
        f"OWN_TRANSPORTS rows without such calls: {set(OWN_TRANSPORTS) - set(found)}"
    )


# -- complexity ---------------------------------------------------------------------------------------------
MAX_CC = 20


def mccabe(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """McCabe complexity as radon counts it: 1 + branches (if/for/while/except/assert/ternary, each boolean
    operand after the first, each comprehension and its ifs, match cases); nested functions count apart."""
    n = 1
    todo: list[ast.AST] = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.IfExp, ast.ExceptHandler, ast.Assert)):
            n += 1
        elif isinstance(node, ast.BoolOp):
            n += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            n += 1 + len(node.ifs)
        elif isinstance(node, ast.match_case):
            n += 1
        todo.extend(ast.iter_child_nodes(node))
    return n


def _functions(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(parsed(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{path.relative_to(PKG)}:{node.lineno} {node.name}", mccabe(node)


def test_no_function_of_the_contracts_files_is_above_complexity_20() -> None:
    over = sorted((cc, name) for p in _own_files() for name, cc in _functions(p) if cc > MAX_CC)
    assert not over, f"functions above cyclomatic complexity {MAX_CC}: {over}"


def test_the_complexity_count_counts_branches() -> None:
    fn = ast.parse("def f(a, b):\n    if a and b:\n        return [x for x in a if x]\n    return 0\n").body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert mccabe(fn) == 5, "1 + if + and + comprehension + its if"


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_layers_are_disjoint(layer: str) -> None:
    mine = dict(LAYERS)[layer]
    others = set().union(*(u for n, u in LAYERS if n != layer))
    assert not (mine & others), f"{layer} shares units with another layer: {sorted(mine & others)}"
