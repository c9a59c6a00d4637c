"""The package's drawn structure: no import from a lower layer to a higher one, no circles, profiling reads data only.

Layers, lowest first (DESIGN.md): the leaf modules (errors, stages, lattice, environment, hlo, roofline, progress),
io and config, kernels, boundaries, cases, engines (and profiling beside them), simulation, the commands
(bench, validate), api, cli. Every ``import lbm...`` statement is read, also those inside functions.
"""

import ast
import collections
from pathlib import Path

import pytest

import lbm

ROOT = Path(lbm.__file__).parent
LAYER = {"errors": 0, "stages": 0, "lattice": 0, "environment": 0, "hlo": 0, "roofline": 0, "progress": 0,
         "parallel": 0,
         "io": 1, "config": 1, "kernels": 2, "boundaries": 3, "cases": 4, "engines": 5, "profiling": 5,
         "simulation": 6, "bench": 7, "validate": 7, "diff": 7, "api": 8, "cli": 9, "__main__": 10, "__init__": 10}
"""Top-level module or package -> layer; an import may only go to the same or a lower layer."""


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        module = rel.parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
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
