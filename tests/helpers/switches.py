"""Readers of lbm's source for switches on a boundary condition's type or a case's name (DESIGN.md, "Ask the
component, never its type"), for tests/project."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import lbm

ROOT = Path(lbm.__file__).parent


def condition_classes() -> set[str]:
    """Names of every boundary condition class of lbm.boundaries (and the block forms)."""
    import lbm.boundaries as boundaries
    from lbm.boundaries.base import BoundaryCondition

    names = set()
    for path in (ROOT / "boundaries").glob("*.py"):
        module = __import__(f"lbm.boundaries.{path.stem}", fromlist=["_"])
        names |= {n for n, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, BoundaryCondition)}
    return names | {n for n in dir(boundaries) if n[:1].isupper()}


def case_names() -> set[str]:
    """The config names of every case (lbm.cases.CASES)."""
    from lbm.cases import CASES

    return set(CASES)


def collision_kinds() -> set[str]:
    """The names of every collision kind (lbm.kernels.collisions.COLLISION_KINDS)."""
    from lbm.kernels.collisions import COLLISION_KINDS

    return set(COLLISION_KINDS)


def _one_of(names: set[str]):
    """Whether a node is a string constant in ``names``."""
    return lambda node: isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names


def _compares(node: ast.Compare, named) -> bool:
    """Whether a comparison has a side, or an element of a listed side, that ``named`` accepts."""
    sides = [node.left, *node.comparators]
    listed = [e for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts]
    return any(named(s) for s in [*sides, *listed])


def kind_switches(tree: ast.AST, kinds: set[str]) -> list[str]:
    """Comparisons with a collision kind's name (``run.collision == "bgk"``, ``... in ("trt", "mrt")``) and a kind's
    name chosen in place (``"trt" if two else "bgk"``, ``collision or "bgk"``) in a module's tree."""
    found = []
    is_kind = _one_of(kinds)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _compares(node, is_kind):
            found.append(f"line {node.lineno}: a collision kind's name compared")
        if isinstance(node, ast.IfExp) and (is_kind(node.body) or is_kind(node.orelse)):
            found.append(f"line {node.lineno}: a collision kind chosen by a condition")
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and any(map(is_kind, node.values)):
            found.append(f"line {node.lineno}: a collision kind written in place as a fallback")
    return found


def type_switches(tree: ast.AST, classes: set[str]) -> list[str]:
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


def _names_a_case(node: ast.AST) -> bool:
    """``case.name``, ``param.case.name``, ``self.name`` of a case...: an attribute ``name`` of something called case."""
    if not (isinstance(node, ast.Attribute) and node.attr == "name"):
        return False
    owner = node.value
    return (isinstance(owner, ast.Name) and owner.id == "case") or (isinstance(owner, ast.Attribute)
                                                                     and owner.attr == "case")


def case_name_switches(tree: ast.AST, names: set[str]) -> list[str]:
    """Comparisons with a case's name (``case.name == ...``, ``... in BUILDERS``, ``case == "cylinder"``), lookups by it
    (``KEYS[case.name]``) and tables keyed by case names (``{"cavity": ...}``, ``{("cavity", 2): ...}``) in a module's
    tree."""
    found = []
    is_case_name = _one_of(names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and (_compares(node, is_case_name)
                                              or any(map(_names_a_case, [node.left, *node.comparators]))):
            found.append(f"line {node.lineno}: a case's name compared")
        if isinstance(node, ast.Subscript) and _names_a_case(node.slice):
            found.append(f"line {node.lineno}: a table looked up by a case's name")
        if isinstance(node, ast.Dict) and any(is_case_name(e) for k in node.keys if k is not None
                                              for e in (k.elts if isinstance(k, ast.Tuple) else [k])):
            found.append(f"line {node.lineno}: a table keyed by case names")
    return found


def switches_in(folder: str, find: object) -> dict[str, list[str]]:
    """``find(tree)``'s hits per module of lbm/``folder`` (a package, or one module's path; relative paths), modules
    without any left out."""
    paths = [ROOT / folder] if folder.endswith(".py") else sorted((ROOT / folder).rglob("*.py"))
    return {str(p.relative_to(ROOT)): hits for p in paths
            if (hits := find(ast.parse(p.read_text())))}  # type: ignore[operator]
