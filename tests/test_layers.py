"""The package's drawn structure: no import from a lower layer to a higher one, no circles, profiling reads data only.

Layers, lowest first (DESIGN.md): the leaf modules (errors, stages, lattice, environment, hlo, roofline, progress),
io and kernels, config (it reads the collision kinds), boundaries, cases, engines (and profiling beside them),
simulation, the commands (bench, validate), api, cli. Every ``import lbm...`` statement is read, also those inside
functions.
"""

import ast
import collections
import functools
from pathlib import Path

import pytest

import lbm

ROOT = Path(lbm.__file__).parent
LAYER = {"errors": 0, "stages": 0, "lattice": 0, "environment": 0, "hlo": 0, "roofline": 0, "progress": 0,
         "parallel": 0,
         "io": 1, "kernels": 1, "config": 2, "boundaries": 3, "cases": 4, "engines": 5, "profiling": 5,
         "simulation": 6, "stopping": 6, "bench": 7, "validate": 7, "diff": 7, "api": 8, "cli": 9, "__main__": 10, "__init__": 10}
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


def _condition_classes() -> set[str]:
    """Names of every boundary condition class of lbm.boundaries (and the block forms)."""
    import inspect

    import lbm.boundaries as boundaries
    from lbm.boundaries.base import BoundaryCondition

    names = set()
    for path in (ROOT / "boundaries").glob("*.py"):
        module = __import__(f"lbm.boundaries.{path.stem}", fromlist=["_"])
        names |= {n for n, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, BoundaryCondition)}
    return names | {n for n in dir(boundaries) if n[:1].isupper()}


def _type_switches(tree: ast.AST, classes: set[str]) -> list[str]:
    """``type(x) is/in ...``, ``isinstance(x, <condition class>)`` and ``... .kind == ...`` in a module's tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            left = node.left
            if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "type":
                found.append(f"line {node.lineno}: type(...) compared")
            sides = [left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides) and any(
                    isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                found.append(f"line {node.lineno}: .kind compared")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass"):
            second = node.args[1] if len(node.args) > 1 else None
            names = [e.id for e in (second.elts if isinstance(second, ast.Tuple) else [second]) if isinstance(e, ast.Name)]
            if set(names) & classes:
                found.append(f"line {node.lineno}: isinstance on {sorted(set(names) & classes)}")
    return found


def test_engines_ask_boundary_conditions_and_never_switch_on_their_type():
    """Engines ask a condition for its forms (DESIGN.md, "Ask the component, never its type")."""
    classes = _condition_classes()
    assert {"HalfwayBounceBack", "Inlet", "Forces", "OnEdge"} <= classes
    found = {str(p.relative_to(ROOT)): hits for p in sorted((ROOT / "engines").rglob("*.py"))
             if (hits := _type_switches(ast.parse(p.read_text()), classes))}
    assert found == {}
    assert _type_switches(ast.parse("type(bc) is Inlet\nisinstance(bc, Forces)\nbc.kind == 'zou_he'"), classes)


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
