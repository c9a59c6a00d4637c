"""The CI script's lanes (the accelerator lane fails when its environment cannot be built, unless skipped explicitly;
the Python 3.11 lane when it finds no Python 3.11); the suite's own settings (tests/conftest.py): native kernels at
-O1, JAX's compilation cache and its size cap; the suite without pytest-xdist."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.fake_python import fake_python
from helpers.paths import REPO


def _lane(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "ci_accel.sh")], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)


def test_the_accel_lane_fails_when_its_environment_cannot_be_built() -> None:
    done = _lane(LBM_ACCEL_ENV_CMD="false", LBM_SKIP_ACCEL="")
    assert done.returncode == 1
    assert "could not be built" in done.stderr and "LBM_SKIP_ACCEL=1" in done.stderr


def test_the_accel_lane_is_skipped_only_when_asked_and_says_so() -> None:
    done = _lane(LBM_ACCEL_ENV_CMD="false", LBM_SKIP_ACCEL="1")
    assert done.returncode == 0
    assert "NOT run" in done.stderr


def test_ci_runs_the_readme_test_command_and_the_accel_lane() -> None:
    readme_test = (REPO / "README.md").read_text().split("```")[1].strip().splitlines()[1].strip()
    ci_lines = [line.split() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    without_env = [" ".join(w for w in words if not w.startswith("LBM_REQUIRE_")) for words in ci_lines]
    assert readme_test in without_env
    assert "bash scripts/ci_py311.sh" in without_env
    assert "bash scripts/ci_accel.sh" in without_env


def _py311_lane(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """scripts/ci_py311.sh with nothing on PATH, no pyenv and no home: only what ``env`` names can be found."""
    bare = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "no-pyenv")}
    (tmp_path / "bin").mkdir(exist_ok=True)
    return subprocess.run(["/bin/bash", str(REPO / "scripts" / "ci_py311.sh")], capture_output=True, text=True,
                          env=bare | env, timeout=60)


def test_the_python_311_lane_fails_in_one_line_without_a_python_311(tmp_path: Path) -> None:
    done = _py311_lane(tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "ci_py311: error: no Python 3.11 on PATH or in pyenv (install one, e.g. 'pyenv install 3.11', or set LBM_PYTHON311)"]


def test_the_python_311_lane_takes_only_a_python_311(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    fake_python(tmp_path / "bin" / "python3.11", (3, 12, 1))  # a python3.11 that is not: not taken
    assert "no Python 3.11" in _py311_lane(tmp_path).stderr
    fake = fake_python(tmp_path / "python3.13", (3, 13, 0))
    done = _py311_lane(tmp_path, LBM_PYTHON311=str(fake))
    assert done.returncode == 1 and done.stderr.strip() == f"ci_py311: LBM_PYTHON311={fake} is not a Python 3.11"


@pytest.mark.parametrize("optimised", [False, pytest.param(True, marks=pytest.mark.native_optimised)])
def test_the_suite_builds_at_its_tests_level_and_caches_its_compiles_here_and_in_subprocesses(optimised: bool) -> None:
    """Set in the environment, so that every ``python -m lbm`` a test starts gets them too."""
    import jax
    from helpers.suite import NATIVE_OPT_GIVEN, NATIVE_TEST_OPT, OPTIMISED_TEST_OPT, SUITE_CACHE, SUITE_SET_NATIVE_OPT

    from lbm.engines.native.build import cxxflags

    assert (NATIVE_TEST_OPT, OPTIMISED_TEST_OPT) == ("0", "1")
    # the suite's default, inherited by an xdist worker, is not the user's choice (else every test would keep it)
    assert (NATIVE_OPT_GIVEN is None) == (os.environ.get(SUITE_SET_NATIVE_OPT) == "1")
    level = NATIVE_OPT_GIVEN or (OPTIMISED_TEST_OPT if optimised else NATIVE_TEST_OPT)
    assert os.environ["LBM_NATIVE_OPT"] == level and f"-O{level}" in cxxflags()
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(SUITE_CACHE) == jax.config.jax_compilation_cache_dir
    assert os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"


def test_a_test_process_collects_cycles_at_the_suites_thresholds() -> None:
    """tests/helpers/suite.py's GC_THRESHOLD is set in the process that runs the tests (each xdist worker, or -n 0)."""
    import gc

    from helpers.suite import GC_THRESHOLD

    assert gc.get_threshold() == GC_THRESHOLD and GC_THRESHOLD[0] > 700  # above Python's default


def test_the_suite_cache_is_one_per_state_of_the_sources(tmp_path: Path) -> None:
    """A changed source (a renamed stage scope) gets a cache of its own: JAX's key leaves the op names out."""
    import shutil

    from helpers.suite import SUITE_CACHE_DEFAULT, source_digest

    package = REPO / "lbm"
    assert SUITE_CACHE_DEFAULT.name == source_digest(package)
    copy = tmp_path / "lbm"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    assert source_digest(copy) == source_digest(package)
    stages = copy / "stages.py"
    stages.write_text(stages.read_text() + "\n# a comment\n")
    assert source_digest(copy) != source_digest(package)


def test_the_suite_cache_is_trimmed_oldest_first(tmp_path: Path) -> None:
    from helpers.suite import trim_cache

    for age, name in enumerate(["new", "mid", "old"]):
        (tmp_path / name).write_bytes(b"x" * 100)
        os.utime(tmp_path / name, (1e9 - age, 1e9 - age))
    trim_cache(tmp_path, 250)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid", "new"]
    trim_cache(tmp_path, 100)
    assert [p.name for p in tmp_path.iterdir()] == ["new"]


@pytest.mark.xdist_group("suite_groups")
def test_each_xdist_group_stays_on_one_worker(request: pytest.FixtureRequest) -> None:
    """Each ``xdist_group`` (a module fixture shared by its tests: the sharded fast-lane runs, the profiled runs, the
    real benches, the layer map) lies in one test file, so under ``--dist loadfile`` (pyproject addopts: a worker runs
    a file whole) its fixture runs once. Under ``--dist loadgroup`` a group's tests carry the ``@group`` suffix by
    which the scheduler sends the group to one worker (tests/conftest.py keep_xdist_groups)."""
    files: dict[str, set[Path]] = {}
    for item in request.session.items:
        for mark in item.iter_markers("xdist_group"):
            name = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            files.setdefault(name, set()).add(Path(item.path))
    assert files["suite_groups"] == {Path(__file__)}
    assert all(len(paths) == 1 for paths in files.values()), files
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@suite_groups"), request.node.nodeid


def _pytest_without_xdist(*args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a subprocess with pytest-xdist blocked (as where it is not installed: the TPU machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--strict-markers",
                           *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


@pytest.mark.parametrize("options", [(), pytest.param(("-n", "0", "--dist", "loadgroup"), marks=pytest.mark.slow)],
                         ids=["addopts", "n0"])
def test_the_suite_runs_without_pytest_xdist(options: tuple[str, ...]) -> None:
    """pyproject's addopts (-n auto --dist loadfile), an explicit -n 0 with --dist loadgroup, the xdist hook and the
    xdist_group marks of tests/conftest.py: none stops pytest where pytest-xdist is absent; the tests run in one
    process."""
    from helpers.suite import NO_XDIST

    nodes = ["tests/project/test_ci.py::test_the_suite_cache_is_trimmed_oldest_first",
             "tests/project/test_ci.py::test_each_xdist_group_stays_on_one_worker"]
    done = _pytest_without_xdist(*options, "-rs", *nodes)
    assert done.returncode == 0, done.stdout + done.stderr
    assert NO_XDIST in done.stdout and "2 passed" in done.stdout, done.stdout


def test_the_readme_names_the_jax_of_the_python_311_lane() -> None:
    """The set-up paragraph names the pair the Python 3.11 lane tests: pyproject's jax floor (scripts/ci_py311.sh)."""
    import re

    floor = re.search(r'^ *"jax>=([0-9][0-9.]*)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    setup = " ".join((REPO / "README.md").read_text().split("\n## ")[0].split())
    assert re.search(rf"Python 3\.11\.\d+ with jax {re.escape(floor)} ", setup), setup
