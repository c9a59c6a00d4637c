"""Shared helpers: compose and validate configs, run cases in-process; the ``native`` marker."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import settings

from lbm.cases.base import Snapshot
from lbm.config import RunConfig, load
from lbm.engines import make_engine
from lbm.lattice import LATTICES
from lbm.profiling.breakdown import STEADY_MARK, WARMUP_MARK
from lbm.simulation import prepare, simulate

XLA_TEST_FLAG = "--xla_backend_optimization_level=0"
"""The suite compiles without LLVM's optimisations (XLA's CPU backend level 0), in this process and, through
XLA_FLAGS, in every subprocess a test starts: LLVM's code generation was a fifth of the suite's CPU time (back to
back on 2 cores: 827 -> 661 s of CPU, 441 -> 358 s of wall time),
no test measures speed, and XLA's HLO passes (the fusions and buffers that inspect and the profiler read) are the
same: the optimised HLO of the xla engine's chunk is identical line for line at either level (measured, D2Q9
cylinder and D3Q19 cavity), and compiled for h100 the kernels, bytes per cell and traffic ratios are the same
(box 1024² and cylinder, engines auto and xla). Tests that compare speeds set XLA_FLAGS themselves (tests/test_compare.py). To run
the suite at XLA's default level, set the level in XLA_FLAGS (``XLA_FLAGS=--xla_backend_optimization_level=3``):
a level already named there is kept."""
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAG}".strip()

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
"""Where the CUDA compiler plugin is installed (the accelerator lane's environment, scripts/ci_accel.sh), it registers
with JAX only if its version check, which needs a driver, is skipped before JAX's backends start: the lane compiles for
a GPU in the test process (tests/helpers/inspect_cli.run_inspect), after other tests may have started them.
(lbm.bench.targets.prepare_environment sets the same for a command line that compiles for a target.)"""

NATIVE_TEST_OPT = "0"
"""The suite builds the native kernels at -O0 (LBM_NATIVE_OPT, lbm.engines.native.build; in this process and every
subprocess): the same bits as -O3 (tests/test_engines_native_build.py), and about half the compiler's time of -O1
(one process, load 8: D3Q19 BGK with an inlet 3.0 against 5.3 CPU-s, D2Q9 MRT with a force 2.5 against 4.3, D3Q27
KBC with a force 3.1 against 7.9), for the 50-odd kernels a clean machine builds. Its kernels are 8-11x slower, which
most tests' short runs do not feel; the few long native runs are marked ``native_optimised`` and build at
OPTIMISED_TEST_OPT. A level already in LBM_NATIVE_OPT is kept for every test (``LBM_NATIVE_OPT=3`` tests the
default build)."""
OPTIMISED_TEST_OPT = "1"
"""The level of tests marked ``native_optimised``: runs of 10^8 and more cell updates on the native engine (the DFG
convergence study, the Re 100 and 1000 cavities, the Schafer-Turek runs, ``validate --quick``), where -O0's slower kernel
costs more than -O1's compile (the DFG study: 61.0 CPU-s with its kernel at -O0, 18.3 at -O1; five such tests
102 against 36 CPU-s, cold caches, load 9-10)."""


SUITE_SET_NATIVE_OPT = "LBM_NATIVE_OPT_SET_BY_SUITE"
"""Set (to 1) beside LBM_NATIVE_OPT where the suite, not the user, put it there (pytest_configure): xdist workers and
subprocesses inherit both, and a worker must not take the suite's default for the user's choice."""
NATIVE_OPT_GIVEN = None if os.environ.get(SUITE_SET_NATIVE_OPT) else os.environ.get("LBM_NATIVE_OPT")
"""The level the user named in LBM_NATIVE_OPT (None: the suite's own, per test)."""


def native_test_opt(item: pytest.Item) -> str:
    """The native optimisation level a test builds at: OPTIMISED_TEST_OPT where it is marked ``native_optimised``."""
    return OPTIMISED_TEST_OPT if item.get_closest_marker("native_optimised") else NATIVE_TEST_OPT


def source_digest(package: Path) -> str:
    """A digest of the Python sources under ``package`` (their paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


SUITE_CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lbm" / "jax-suite"
SUITE_CACHE_DEFAULT = SUITE_CACHE_ROOT / source_digest(Path(__file__).resolve().parent.parent / "lbm")
"""One cache per state of lbm's sources. JAX's key leaves out the programs' metadata (op names), and tests read the
stages' scope names from compiled programs (profiles, inspect): an executable compiled before a scope was renamed
would load with the old names. Keying by the sources keeps the hits across workers and tests that putting the
metadata in JAX's key loses (cold fast lane 115 s, 199 CPU-s, against 125 s, 217 CPU-s with it, idle 2-core)."""


def _suite_compilation_cache() -> Path | None:
    """JAX's persistent compilation cache for the suite, in this process and (through the environment) every
    subprocess: a program compiled by an earlier run (or another worker) is loaded, not compiled again. Warm, it
    took a third off the CPU time of test_boundaries, test_simulation and test_engines together (39.7 -> 23.6 s,
    one process, measured back to back at load 15); on a clean machine (CI) it is empty and costs nothing measurable.
    The key is the program, jax and XLA_FLAGS, so a changed program compiles afresh. JAX_COMPILATION_CACHE_DIR
    already set is kept (empty: no cache)."""
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(SUITE_CACHE_DEFAULT))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # the suite's programs are small
    directory = os.environ["JAX_COMPILATION_CACHE_DIR"]
    jax.config.update("jax_compilation_cache_dir", directory or None)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
    return Path(directory) if directory else None


SUITE_CACHE = _suite_compilation_cache()
SUITE_CACHE_LIMIT = 1 << 30
"""Bytes the suite's own compilation cache (SUITE_CACHE_DEFAULT) may hold: beyond it, the session starts by deleting
its oldest entries (JAX itself evicts only with the filelock package). A directory the user named is left alone."""


def trim_cache(directory: Path, limit: int) -> None:
    """Delete the oldest files (by modification time) of ``directory`` until its files hold at most ``limit`` bytes."""
    files = sorted((p for p in directory.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    for p in files:
        if total <= limit:
            break
        total -= p.stat().st_size
        p.unlink(missing_ok=True)


def pytest_configure(config: pytest.Config) -> None:
    """Set the suite's native optimisation level (NATIVE_TEST_OPT) unless LBM_NATIVE_OPT names one; without
    pytest-xdist, declare its ``xdist_group`` marker."""
    if NATIVE_OPT_GIVEN is None:  # the default for what runs outside a test (module fixtures); tests set their own
        os.environ["LBM_NATIVE_OPT"] = NATIVE_TEST_OPT
        os.environ[SUITE_SET_NATIVE_OPT] = "1"
    if not config.pluginmanager.hasplugin("xdist"):  # the suite's xdist_group marks, known without xdist too
        config.addinivalue_line("markers", "xdist_group(name): pytest-xdist's --dist loadgroup runs a group on one worker")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Trim the suite's own compilation cache (the controller, once per session); keep absl off pytest's capture;
    compose each configuration once per process (compose_once)."""
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
    keep_absl_off_the_capture()
    compose_once()


COMPOSED: dict[tuple[tuple[str, ...], str], tuple[dict[str, Any], dict[str, str]]] = {}
"""Hydra's compositions of this test process, per (overrides, config name): see :func:`compose_once`."""


def compose_once() -> None:
    """Compose each list of overrides with Hydra once per test process (lbm.config.loader._compose, memoised).

    A composition costs 70-75 ms of CPU (Hydra's config loading; measured: 150 of them were 11.3 of 24.9 CPU-s in six
    test files), and the suite composes the same few configurations again and again (``prepare``, ``load``, the
    command line's check before Hydra starts): the fast lane asks for 463 compositions of 325 lists, so 138 are not
    made again (about 10 CPU-s, in each lane that runs it). The result is a pure function of the overrides and lbm's config files
    (its resolvers read only the config; the ``${now:...}`` run directories are in Hydra's own node, dropped): every
    caller gets a fresh deep copy, a composition that fails is not kept (it raises again, with its message), and
    overrides holding an interpolation (``${oc.env:...}`` may read the environment) are composed every time."""
    import copy

    from lbm.config import loader

    compose = loader._compose

    def once(overrides: list[str], config_name: str) -> tuple[dict[str, Any], dict[str, str]]:
        if any("${" in o for o in overrides):
            return compose(overrides, config_name)
        key = (tuple(overrides), config_name)
        if key not in COMPOSED:
            COMPOSED[key] = compose(list(overrides), config_name)
        return copy.deepcopy(COMPOSED[key])

    loader._compose = once


def keep_absl_off_the_capture() -> None:
    """Point absl's log handler (imported with optax) at the process's real stderr.

    absl's handler takes ``sys.stderr`` when absl is imported: under pytest, a capture file. Hydra's logging set-up
    (an in-process ``main(["run", ...])``) closes every handler, and absl's ``close`` closes its stream unless it
    is the current ``sys.stderr``: under ``capsys`` it is not, so pytest's own capture file was closed and every
    later test on that worker failed with "I/O operation on closed file". ``sys.__stderr__`` is never closed.
    """
    import sys

    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.get_absl_handler().python_handler.setStream(sys.__stderr__)


settings.register_profile("lbm", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lbm"))
"""Hypothesis draws the same examples on every run (``derandomize``: a failure replays, CI cannot pass by luck);
``HYPOTHESIS_PROFILE=explore`` draws new ones, to hunt for failures while editing."""

DATA = Path(__file__).parent / "data"
REQUIRE_NATIVE = os.environ.get("LBM_REQUIRE_NATIVE", "") not in ("", "0")
"""LBM_REQUIRE_NATIVE=1 (set by .ci/run): a test marked ``native`` fails, not skips, where the native engine cannot build."""


MAX_WORKERS = 4
"""``-n auto`` (pyproject addopts) starts one worker per core, at most this many: every worker holds its own JAX
runtime and compiles, and beyond four the suite's longest tests, not the core count, bound its time."""


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist, pluggy would reject it as unknown
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of pytest-xdist workers for ``-n auto``: the usable cores, at most MAX_WORKERS."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS))


NO_XDIST = "pytest-xdist is not installed (or -p no:xdist): the tests run in this one process; -n and --dist are ignored"
"""Where pytest-xdist is absent (the TPU machine's preinstalled pytest), the suite still runs: its ``-n`` and ``--dist``
(pyproject addopts, the README's ``-n 0``, scripts/device_check.sh) are accepted and the tests run in one process."""


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
    # pytest-xdist (pyproject addopts: --dist loadgroup) hands a worker the next test when it is nearly free: the
    # long tests start first and the short ones fill the gaps, instead of one worker starting a 90 s test at the end
    # while the others idle. Python's sort is stable.
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


REQUIRE_ACCEL = os.environ.get("LBM_REQUIRE_ACCEL", "") not in ("", "0")
"""LBM_REQUIRE_ACCEL=1 (set by .ci/run for its accel step): a test marked ``accel`` that skips (its compiler plugin
missing from the environment) is a failure, so a broken accelerator environment cannot pass as a green run."""


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


def load_script(name: str) -> Any:
    """scripts/<name>.py as a module (scripts/ also on sys.path, for the scripts' imports of each other)."""
    import importlib.util
    import sys

    scripts = Path(__file__).resolve().parents[1] / "scripts"
    if str(scripts) not in sys.path:
        sys.path.append(str(scripts))
    spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_state(lat: Any, shape: tuple[int, ...], seed: int = 0) -> tuple[Any, Any]:
    """A density near 1 and a small random velocity field on ``shape`` (float64 under x64)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    rho = 1.0 + 0.05 * rng.standard_normal(shape)
    u = 0.05 * rng.standard_normal((lat.d,) + shape)
    return jnp.asarray(rho), jnp.asarray(u)


ALL_LATTICES = sorted(LATTICES.values(), key=lambda lat: lat.name)
"""Every lattice, by name: the list the parametrised tests run over."""


@pytest.fixture
def x64():
    """float64 for the test that asks for it; a module asks for every test with ``pytestmark = usefixtures("x64")``."""
    with jax.enable_x64(True):
        yield


def setup_for(overrides: Any, precision: str) -> Any:
    """The Setup of a case from ``overrides`` in ``precision`` (float64 switched on for the test when asked)."""
    from lbm.simulation import make_case

    if precision == "float64":
        jax.config.update("jax_enable_x64", True)
    return make_case(run_config(*overrides, f"precision={precision}")).setup()


def shape_for(lat: Any) -> tuple[int, ...]:
    """A small grid of the lattice's dimension."""
    return (6, 5) if lat.d == 2 else (5, 4, 3)


def run_config(*overrides: str) -> RunConfig:
    """A validated RunConfig from Hydra overrides (as on the command line)."""
    return load(list(overrides))


def advance(run: RunConfig, steps: int | None = None, mode: str | None = None,
            engine: str = "auto") -> tuple[Any, Any, dict[str, np.ndarray]]:
    """Build the case and run it in-process on ``engine``; returns (case, setup, fields) without writing files."""
    case, setup = prepare(run)
    run = case.run
    stepper = make_engine(setup, mode or run.mode, engine=engine)
    f = setup.initial_populations()
    n = steps or run.steps
    chunk = run.output.every or n
    done = 0
    while done < n:
        k = min(chunk, n - done)
        f, aux = stepper.advance(f, k, first_step=done)
        done += k
        case.observe(Snapshot(done, aux, lambda f=f, done=done: stepper.fields(f, done), populations=f))
    return case, setup, stepper.fields(f, n) | {"f": np.asarray(f), "engine": stepper.name}


ENGINES = ("xla", pytest.param("native", marks=pytest.mark.native))
"""Parametrise a physics test over both fused engines: the pure-JAX reference and the native C++ engine."""


@pytest.fixture
def simulate_in(tmp_path: Path):
    """Run a full simulation (all outputs) into a temporary run directory; returns (metrics, run_dir)."""

    def _run(*overrides: str) -> tuple[dict[str, Any], Path]:
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        metrics = simulate(run_config(*overrides), run_dir)
        return metrics, run_dir

    return _run


# --- synthetic jax.profiler traces (profiling tests) ------------------------------------------------------------

HOST, DEV = (1, 10), (1, 20)


def trace_event(where: tuple[int, int], name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    """A complete ('X') Chrome trace event on (pid, tid), times in µs as jax writes them."""
    e = {"ph": "X", "pid": where[0], "tid": where[1], "ts": ts, "dur": dur, "name": name}
    if args:
        e["args"] = args
    return e


def trace_meta() -> list[dict[str, Any]]:
    """Process and thread name events: a host CPU process with the python thread and an XLA execute thread."""
    return [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
            {"ph": "M", "pid": 1, "tid": 10, "name": "thread_name", "args": {"name": "python"}},
            {"ph": "M", "pid": 1, "tid": 20, "name": "thread_name", "args": {"name": "tf_XLAExecute/1"}}]


# Instrumented: 3 stages; step 0 is the first call (compile), steps 1..4 are steady.
STAGE_HOST_US = {"macroscopic": lambda k: 10 + k, "collide": lambda k: 20.0, "stream": lambda k: 30 + 2 * k}
STAGE_KERNELS_US = {"macroscopic": (3.0, 4.0), "collide": (5.0, 1.5), "stream": (2.0, 2.0)}
FIRST_CALL_US = {"macroscopic": 5000.0, "collide": 7000.0, "stream": 9000.0}


def instrumented_trace(module_names: bool = True) -> tuple[dict[str, Any], list[float]]:
    """Events and expected figures of a synthetic instrumented-mode trace (times in µs, as jax writes them)."""
    ev, t, run = trace_meta(), 100.0, 0
    steady = []
    for k in range(5):
        if k == 1:
            steady_start = t - 0.5
        step_start, t = t, t + 1.0
        for stage, host in STAGE_HOST_US.items():
            dur = FIRST_CALL_US[stage] if k == 0 else host(k - 1)
            ev.append(trace_event(HOST, stage, t, dur))
            run += 1
            mod = f"jit_{stage}" if module_names else "jit__lambda"
            a, b = STAGE_KERNELS_US[stage]
            s0 = t + dur + 3.0  # asynchronous: runs after the dispatch span
            ev.append(trace_event(DEV, f"k1_{stage}", s0, a, hlo_module=mod, hlo_op=f"k1_{stage}", run_id=str(run)))
            ev.append(trace_event(DEV, f"end: k1_{stage}", s0 + a, 0.1))
            ev.append(trace_event(DEV, f"k2_{stage}", s0 + a + 1.0, b, hlo_module=mod, hlo_op=f"k2_{stage}", run_id=str(run)))
            t += dur + 1.0
        ev.append(trace_event(HOST, "timestep", step_start, t - step_start + 20.0, step_num=k))
        if k >= 1:
            steady.append(t - step_start + 20.0)
        t += 100.0
    ev.append(trace_event(HOST, STEADY_MARK, steady_start, t - steady_start))
    ev.append(trace_event(HOST, WARMUP_MARK, 99.0, steady_start - 99.5))
    # a foreign execution (e.g. jnp.stack) that must not be matched to any stage
    ev.append(trace_event(DEV, "copy", t + 5.0, 1.0, hlo_module="jit_stack", hlo_op="copy", run_id="999"))
    return {"traceEvents": ev, "displayTimeUnit": "ns"}, steady


# --- HLO text (hlo and compile report tests) ---------------------------------------------------------------------

SMALL_HLO = """HloModule jit_chunk, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %m = f32[4]{0} multiply(%p, %p), metadata={op_name="jit(chunk)/timestep/collide/mul"}
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %f = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(chunk)/timestep/stream/x"}
  ROOT %c = f32[4]{0} copy(%f)
}
"""
"""An optimised HLO module: one fusion (collide inside, stream on the call) and a copy."""


def slow_except(params: list[Any], fast: Any) -> list[Any]:
    """Parametrize values marked ``slow`` except those in ``fast``: the fast lane keeps a representative few."""
    out = []
    for p in params:
        args = p if isinstance(p, tuple) else (p,)
        out.append(pytest.param(*args) if p in fast else pytest.param(*args, marks=pytest.mark.slow))
    return out


def alternate(i: int, j: int, pair: tuple[Any, Any]) -> Any:
    """The first or second of ``pair`` by the parity of i + j, for a parametrised grid of (i, j) run once per cell:
    each row and each column meets both values (e.g. every case and every collision in both precisions)."""
    return pair[(i + j) % 2]


def lattice_params(fast: tuple[str, ...] = ("d2q9",)) -> list[Any]:
    """Every lattice as a parametrize value named by the lattice; those not in ``fast`` are marked slow."""
    from lbm.lattice import LATTICES

    return [pytest.param(lat, id=name, marks=() if name in fast else pytest.mark.slow)
            for name, lat in sorted(LATTICES.items())]
