"""The suite's hooks and fixtures: its settings (helpers/suite.py) applied, the ``native``, ``accel`` and
``slow`` markers, float64 scoped to a test. Helpers live in tests/helpers/, imported by the tests."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import jax
import pytest
from helpers.suite import (
    MAX_WORKERS,
    NATIVE_OPT_GIVEN,
    NATIVE_TEST_OPT,
    NO_XDIST,
    REQUIRE_ACCEL,
    REQUIRE_NATIVE,
    SUITE_CACHE,
    SUITE_CACHE_DEFAULT,
    SUITE_CACHE_LIMIT,
    SUITE_CACHE_ROOT,
    SUITE_SET_NATIVE_OPT,
    compose_once,
    keep_absl_off_the_capture,
    load_hypothesis_profile,
    native_test_opt,
    rewrite_only_the_suite,
    trim_cache,
    tune_gc,
)


def pytest_configure(config: pytest.Config) -> None:
    """Set the suite's native optimisation level (NATIVE_TEST_OPT) unless LBM_NATIVE_OPT names one; without
    pytest-xdist, declare its ``xdist_group`` marker; hypothesis's profile, its package not rewritten."""
    rewrite_only_the_suite(config)
    load_hypothesis_profile()
    if NATIVE_OPT_GIVEN is None:  # the default for what runs outside a test (module fixtures); tests set their own
        os.environ["LBM_NATIVE_OPT"] = NATIVE_TEST_OPT
        os.environ[SUITE_SET_NATIVE_OPT] = "1"
    if not config.pluginmanager.hasplugin("xdist"):  # the suite's xdist_group marks, known without xdist too
        config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's --dist loadgroup runs a group on one worker")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Trim the suite's own compilation cache (the controller, once per session); in each process that runs tests,
    keep absl off pytest's capture, compose each configuration once (compose_once), collect cycles less often
    (tune_gc)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and SUITE_CACHE == SUITE_CACHE_DEFAULT and SUITE_CACHE.is_dir():
        trim_cache(SUITE_CACHE, SUITE_CACHE_LIMIT)
        # earlier states' caches unused for a day (another tree may be testing with its own now)
        for other in SUITE_CACHE_ROOT.iterdir():
            if other == SUITE_CACHE or time.time() - other.stat().st_mtime < 86400:
                continue
            if other.is_dir():
                shutil.rmtree(other, ignore_errors=True)
            else:
                other.unlink(missing_ok=True)
    if session.config.pluginmanager.has_plugin("dsession"):  # pytest-xdist's controller: it runs no test
        return
    keep_absl_off_the_capture()
    compose_once()
    tune_gc()


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist, pluggy would reject it as unknown
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of pytest-xdist workers for ``-n auto``: the usable cores, at most MAX_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Without pytest-xdist, accept its ``-n`` and ``--dist`` (pyproject addopts names them) and ignore them."""
    if pluginmanager.hasplugin("xdist"):
        return
    group = parser.getgroup("xdist", "distributed testing (pytest-xdist not installed: accepted and ignored)")
    # _addoption: a lowercase short option, as pytest-xdist registers it (addoption reserves them for pytest)
    group._addoption("-n", "--numprocesses", dest="numprocesses", metavar="N", default=None,
                     help="ignored without pytest-xdist: the tests run in this one process")
    group.addoption("--dist", dest="dist", metavar="MODE", default="no", help="ignored without pytest-xdist")


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say so in the header when pytest-xdist is absent and the tests run in one process."""
    return None if config.pluginmanager.hasplugin("xdist") else NO_XDIST


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` first, the rest after, each group in collection order; xdist groups kept together."""
    # pytest-xdist (pyproject addopts: --dist loadfile) hands a worker the next file when it is nearly free, in the
    # order of the files' first tests: the files with long tests start first and the short ones fill the gaps, instead
    # of one worker starting a 90 s test at the end while the others idle (with --dist loadgroup, test by test).
    # Python's sort is stable.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if getattr(config.option, "loadgroup", False):
        keep_xdist_groups(items)


def keep_xdist_groups(items: list[pytest.Item]) -> None:
    """Give each test marked ``xdist_group`` the ``@group`` suffix by which ``--dist loadgroup`` sends a group to one
    worker (its module fixture then runs once). pytest-xdist sets ``item._nodeid``, which pytest 9.2 no longer reads
    (``nodeid`` comes from ``item._id``): without this, a group's tests spread over the workers."""
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``native`` need the native engine: skip without it, or fail when LBM_REQUIRE_NATIVE=1."""
    if item.get_closest_marker("native") is None:
        return
    from lbm.engines.native import build

    if build.available():
        return
    reason = "native kernels need the CPU backend and a C++ compiler (install g++)"
    if REQUIRE_NATIVE:
        pytest.fail(f"LBM_REQUIRE_NATIVE=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Under LBM_REQUIRE_ACCEL=1, a skipped ``accel`` test is reported as failed, with the skip's reason."""
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_ACCEL and report.skipped and item.get_closest_marker("accel") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"LBM_REQUIRE_ACCEL=1 but this accel test skipped: {reason}"


@pytest.fixture(autouse=True)
def _native_opt_of_the_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """LBM_NATIVE_OPT for this test (native_test_opt), here and in its subprocesses, unless the user named one."""
    if NATIVE_OPT_GIVEN is None:
        monkeypatch.setenv("LBM_NATIVE_OPT", native_test_opt(request.node))
    yield


@pytest.fixture(autouse=True)
def _x64_scoped_to_the_test():
    """A test (or a float64 run inside it) may switch float64 on; the next test starts as the command line does."""
    before = bool(jax.config.jax_enable_x64)
    yield
    jax.config.update("jax_enable_x64", before)


@pytest.fixture
def x64():
    """float64 for the test that asks for it; a module asks for every test with ``pytestmark = usefixtures("x64")``."""
    with jax.enable_x64(True):
        yield



@pytest.fixture
def simulate_in(tmp_path: Path):
    """Run a full simulation (all outputs) into a temporary run directory; returns (metrics, run_dir)."""

    from helpers.runs import run_config

    from lbm.simulation import simulate  # here, not at the top: the xdist controller runs no test

    def _run(*overrides: str) -> tuple[dict[str, Any], Path]:
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        metrics = simulate(run_config(*overrides), run_dir)
        return metrics, run_dir

    return _run
