"""The package's drawn structure: no import from a lower layer to a higher one, no circles, profiling reads data only.

Layers, lowest first (DESIGN.md): the leaf modules (errors, stages, lattice, environment, hlo, roofline, parallel,
reference: the published data and its readers), io and kernels, config (it reads the collision kinds), boundaries,
cases, engines (and profiling beside them), simulation, diff, the commands (bench, validate) and api, cli. Every
``import lbm...`` statement is read, also those inside functions.
"""

import ast
import collections
import functools
from pathlib import Path

import pytest
from helpers.switches import condition_classes, type_switches

import lbm

ROOT = Path(lbm.__file__).parent
LAYER = {"errors": 0, "stages": 0, "lattice": 0, "environment": 0, "hlo": 0, "roofline": 0, "reference": 0,
         "parallel": 0,
         "io": 1, "kernels": 1, "config": 2, "boundaries": 3, "cases": 4, "engines": 5, "profiling": 5,
         "simulation": 6, "diff": 7, "bench": 8, "validate": 8, "api": 8, "cli": 9, "__main__": 10, "__init__": 10}
"""Top-level module or package -> layer; an import may only go to the same or a lower layer."""

pytestmark = pytest.mark.xdist_group("layers")  # one worker parses the package once (_trees) for every test here


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    """Every module of the package, parsed (once per process: each test here reads them all)."""
    return {path: ast.parse(path.read_text()) for path in sorted(ROOT.rglob("*.py"))}


@functools.cache
def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for path, tree in _trees().items():
        rel = path.relative_to(ROOT).with_suffix("")
        module = rel.parts[0]
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "lbm" and len(parts) > 1 and parts[1] != module:
                    edges[module].add(parts[1])
    return edges


def test_every_module_has_a_layer():
    modules = {p.relative_to(ROOT).with_suffix("").parts[0] for p in ROOT.rglob("*.py")}
    assert modules <= set(LAYER), sorted(modules - set(LAYER))


def test_no_import_runs_up_the_layers():
    upward = sorted((a, b) for a, deps in _edges().items() for b in deps if LAYER[b] > LAYER[a])
    assert upward == []


def test_no_import_circles_between_packages():
    graph = _edges()
    seen: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for nxt in sorted(graph[node]):
            if seen.get(nxt) == 1:
                cycles.append(path + [nxt])
            elif nxt not in seen:
                visit(nxt, path + [nxt])
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node, [node])
    assert cycles == []


@pytest.mark.parametrize("package", ["profiling", "hlo", "io"])
def test_beside_modules_take_data_not_objects_of_the_layers_above(package):
    assert not _edges()[package] & {"cases", "engines", "bench", "simulation", "config", "cli", "boundaries"}


def test_engines_ask_boundary_conditions_and_never_switch_on_their_type():
    """Engines ask a condition for its forms (DESIGN.md, "Ask the component, never its type")."""
    classes = condition_classes()
    assert {"HalfwayBounceBack", "Inlet", "Forces", "OnEdge"} <= classes
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "engines").rglob("*.py"))
             if (hits := type_switches(ast.parse(p.read_text()), classes))}
    assert found == {}
    assert type_switches(ast.parse("type(bc) is Inlet\nisinstance(bc, Forces)\nbc.kind == 'zou_he'"), classes)


def test_no_caller_outside_the_engines_probes_an_engine_with_getattr() -> None:
    """Callers use the Engine interface; ``getattr``/``hasattr`` on an engine is for lbm/engines/ alone."""
    import re

    probe = re.compile(r"\b(?:getattr|hasattr)\(\s*(?:self\.)?eng(?:ine)?\b")
    found = [f"{path.relative_to(ROOT.parent)}:{n}" for path in ROOT.rglob("*.py") if "engines" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1) if probe.search(line)]
    assert found == []


MAX_FUNCTION_LINES = 80
"""DESIGN.md, "Modules a reader can hold": functions about 80 lines at most (def to last line, decorators apart)."""


def _long_functions(tree: ast.AST, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (lines)`` of every function or method in a module's tree longer than ``limit`` lines."""
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_runs_over_80_lines() -> None:
    found = {str(p.relative_to(ROOT)): hits for p, tree in _trees().items() if (hits := _long_functions(tree))}
    assert found == {}

    def function(lines: int) -> str:
        return "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(lines - 1))

    assert _long_functions(ast.parse(function(80))) == []
    assert _long_functions(ast.parse(function(81))) == ["f (81 lines, line 1)"]


MAX_MODULE_LINES = 600
"""DESIGN.md, "Modules a reader can hold": about 600 lines at most."""


def _long_module(text: str, limit: int = MAX_MODULE_LINES) -> int | None:
    """A module's line count where it is over ``limit``, else None."""
    n = len(text.splitlines())
    return n if n > limit else None


def test_no_module_runs_over_600_lines() -> None:
    found = {str(p.relative_to(ROOT)): n for p in sorted(ROOT.rglob("*.py")) if (n := _long_module(p.read_text()))}
    assert found == {}
    assert _long_module("x = 1\n" * 600) is None and _long_module("x = 1\n" * 601) == 601


CIRCLES_ALLOWED: set[frozenset[str]] = set()
"""Import circles tolerated (none: the last, native codegen <-> collisions, went with the collisions as components)."""
"""Import circles among lbm's modules that are known and being removed (each with the reason it still stands)."""


@functools.cache
def _module_trees() -> dict[str, ast.Module]:
    """Every module of the package by its dotted name (a package by its own name, not ``__init__``)."""
    trees = {}
    for path, tree in _trees().items():
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        trees[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = tree
    return trees


def module_edges(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Module -> the modules among ``trees`` it imports, read from every import statement: at module level, inside
    functions and under ``if TYPE_CHECKING`` alike. ``from a import b`` names the module a.b where that is one, else
    a; the ``__init__`` of a package that Python runs first is not counted (every package with re-exports would close
    a circle with its own modules)."""
    edges: dict[str, set[str]] = {name: set() for name in trees}
    for here, tree in trees.items():
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in trees else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[here] |= {t for t in targets if t in trees and t != here}
    return edges


def import_circles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected sets of more than one module in ``edges`` (Tarjan): each holds at least one circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = {stack.pop()}
            while node not in group:
                group.add(stack.pop())
            if len(group) > 1:
                found.add(frozenset(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_reads_every_kind_of_import():
    """A circle closed by a function-level import and one held apart by TYPE_CHECKING are found; a chain is not."""
    modules = {
        "lbm.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lbm.b import B\n",
        "lbm.b": "def f():\n    from lbm import c\n",
        "lbm.c": "import lbm.a\n",
        "lbm.d": "from lbm.a import x\n",
        "lbm": "from lbm.d import y\n",
    }
    trees = {name: ast.parse(text) for name, text in modules.items()}
    assert module_edges(trees) == {"lbm.a": {"lbm.b"}, "lbm.b": {"lbm.c"}, "lbm.c": {"lbm.a"}, "lbm.d": {"lbm.a"},
                                   "lbm": {"lbm.d"}}
    assert import_circles(module_edges(trees)) == {frozenset({"lbm.a", "lbm.b", "lbm.c"})}
    trees["lbm.c"] = ast.parse("import json\n")  # the chain is left
    assert import_circles(module_edges(trees)) == set()


def test_no_import_circles_between_modules():
    """No module of lbm imports, directly or through others, one that imports it back (module-level, function-level
    and TYPE_CHECKING imports alike), apart from CIRCLES_ALLOWED."""
    edges = module_edges(_module_trees())
    assert "lbm.simulation.state" in edges["lbm.simulation.start"]
    circles = import_circles(edges)
    assert circles - CIRCLES_ALLOWED == set(), sorted(map(sorted, circles - CIRCLES_ALLOWED))


def test_the_run_loop_flows_one_way():
    """lbm.simulation's start, chunks and finish import none of each other (simulate hands each one's result to the
    next), and what lies beneath them (state, health, outputs, signals, progress) imports none of them."""
    edges = module_edges(_module_trees())
    stages = {f"lbm.simulation.{name}" for name in ("start", "chunks", "finish")}
    beneath = {f"lbm.simulation.{name}" for name in ("state", "health", "outputs", "signals", "progress")}
    assert stages | beneath <= set(edges)
    assert {(a, b) for a in stages | beneath for b in edges[a] & (stages | {"lbm.simulation"})} == set()
