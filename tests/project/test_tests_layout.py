"""tests/ mirrors lbm/: a folder per package, helpers in tests/helpers/ (no test imports conftest), one copy of each
helper and no copies of lbm's packaged reference data."""

import ast
import hashlib
from collections import defaultdict

from helpers.paths import REPO, TESTS

OWN = {"helpers", "data", "fixtures", "project", "scripts"}
"""tests/ folders that mirror no package of lbm: helpers, data, fixtures, the project's own files (CI, install,
layers) and scripts/."""


def suite_modules() -> list:
    """Every test module under tests/."""
    return [p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts]


def test_every_test_folder_mirrors_a_package_of_lbm_and_the_top_level_tests_its_modules():
    folders = {p.relative_to(TESTS) for p in TESTS.rglob("*") if p.is_dir() and "__pycache__" not in p.parts}
    stray = sorted(str(f) for f in folders if f.parts[0] not in OWN and not (REPO / "lbm" / f / "__init__.py").is_file())
    assert not stray, f"tests/ folders with no lbm package of that path: {stray}"
    for path in TESTS.glob("test_*.py"):
        module = path.stem.removeprefix("test_")
        assert (REPO / "lbm" / f"{module}.py").is_file(), f"{path.name}: no lbm/{module}.py; move it under its package"
    for path in suite_modules():  # pytest imports test modules by their file name (no __init__.py): one of each
        where = path.parent.relative_to(TESTS)
        assert where == type(where)() or where.parts[0] in OWN or (REPO / "lbm" / where).is_dir(), path
    names = [p.name for p in suite_modules()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_no_test_imports_conftest():
    found = []
    for path in [*suite_modules(), *(TESTS / "helpers").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "conftest" or \
                    isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert not found, f"import helpers from tests/helpers/, not conftest: {found}"


def test_each_helper_is_written_once():
    """No module-level function (a helper, not a test) with the same body in two files of tests/."""
    bodies = defaultdict(list)
    for path in [*suite_modules(), *(TESTS / "helpers").glob("*.py"), TESTS / "conftest.py"]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("test_"):
                body = ast.dump(ast.Module(body=node.body, type_ignores=[]))
                bodies[hashlib.sha256(body.encode()).hexdigest()].append(f"{path.relative_to(TESTS)}:{node.name}")
    copies = [where for where in bodies.values() if len({w.split(":")[0] for w in where}) > 1]
    assert not copies, f"helpers written more than once (move one copy to tests/helpers/): {copies}"


def test_tests_hold_no_copy_of_the_packaged_reference_data():
    packaged = {hashlib.sha256(p.read_bytes()).hexdigest(): p.name for p in (REPO / "lbm" / "reference").glob("*.csv")}
    copies = [p.name for p in (TESTS / "data").rglob("*") if p.is_file()
              and hashlib.sha256(p.read_bytes()).hexdigest() in packaged]
    assert not copies, f"tests/data copies lbm/reference (read the packaged file): {copies}"
