"""The suite's own settings: XLA and native optimisation levels, JAX's compilation cache, one Hydra composition
per configuration, hypothesis's profile, the worker count (tests/conftest.py applies them)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import jax
import pytest
from helpers.paths import REPO

XLA_TEST_FLAG = "--xla_backend_optimization_level=0"
"""The suite compiles without LLVM's optimisations (XLA's CPU backend level 0), in this process and, through
XLA_FLAGS, in every subprocess a test starts: LLVM's code generation was a fifth of the suite's CPU time (back to
back on 2 cores: 827 -> 661 s of CPU, 441 -> 358 s of wall time),
no test measures speed, and XLA's HLO passes (the fusions and buffers that inspect and the profiler read) are the
same: the optimised HLO of the xla engine's chunk is identical line for line at either level (measured, D2Q9
cylinder and D3Q19 cavity), and compiled for h100 the kernels, bytes per cell and traffic ratios are the same
(box 1024² and cylinder, engines auto and xla). Tests that compare speeds set XLA_FLAGS themselves
(tests/bench/test_compare.py). To run the suite at XLA's default level, set the level in XLA_FLAGS
(``XLA_FLAGS=--xla_backend_optimization_level=3``): a level already named there is kept."""
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAG}".strip()

os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
"""Where the CUDA compiler plugin is installed (the accelerator lane's environment, scripts/ci_accel.sh), it registers
with JAX only if its version check, which needs a driver, is skipped before JAX's backends start: the lane compiles for
a GPU in the test process (tests/helpers/inspect_cli.run_inspect), after other tests may have started them.
(lbm.bench.targets.prepare_environment sets the same for a command line that compiles for a target.)"""

os.environ.setdefault("PYTHONFAULTHANDLER", "1")
"""Every Python subprocess a test starts prints its threads' stacks if it dies of a signal (pytest does so for its own
processes): a crash shows where it happened, not just its return code (once, 2026-12-07:
tests/test_api.py::test_run_shows_progress_on_stderr's run exited -11 after it had finished; not seen again in 50
repeats)."""

NATIVE_TEST_OPT = "0"
"""The suite builds the native kernels at -O0 (LBM_NATIVE_OPT, lbm.engines.native.build; in this process and every
subprocess): the same bits as -O3 (tests/engines/native/test_engines_native_build.py), and about half the compiler's time of -O1
(one process, load 8: D3Q19 BGK with an inlet 3.0 against 5.3 CPU-s, D2Q9 MRT with a force 2.5 against 4.3, D3Q27
KBC with a force 3.1 against 7.9), for the 50-odd kernels a clean machine builds. Its kernels are 8-11x slower, which
most tests' short runs do not feel; the few long native runs are marked ``native_optimised`` and build at
OPTIMISED_TEST_OPT. A level already in LBM_NATIVE_OPT is kept for every test (``LBM_NATIVE_OPT=3`` tests the
default build)."""
OPTIMISED_TEST_OPT = "1"
"""The level of tests marked ``native_optimised``: runs of 10^7 and more cell updates on the native engine (the DFG
convergence study, the Re 100 and 1000 cavities, the Schafer-Turek runs, ``validate --quick``, the default cylinder's
first 1500 steps, the ellipse obstacle's 6000 steps, the STL sphere's 2 x 500 steps at 48x24x24), where -O0's slower
kernel costs more than -O1's compile (the DFG study: 61.0 CPU-s with its kernel at -O0, 18.3 at -O1; five such tests
102 against 36 CPU-s, cold caches, load 9-10; the last three 32.4 against 16.8 CPU-s, each building its kernel cold,
one process)."""


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
SUITE_CACHE_DEFAULT = SUITE_CACHE_ROOT / source_digest(REPO / "lbm")
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


COMPOSED: dict[tuple[tuple[str, ...], str], tuple[dict[str, Any], dict[str, str]]] = {}
"""Hydra's compositions of this test process, per (overrides, config name): see :func:`compose_once`."""


def compose_once() -> None:
    """Compose each list of overrides with Hydra once per test process (lbm.config.loader._compose, memoised).

    Hydra's whole composition costs ~80 ms of CPU; the loader composes each set of group overrides once per process
    and applies the rest itself (lbm.config.loader._compose_from_groups: ~9 ms), and the suite composes the same few
    configurations again and again (``prepare``, ``load``, the command line's check before Hydra starts): the fast
    lane asks for about 600 compositions of 460 lists, so about 140 are not made again. The result is a pure function
    of the overrides and lbm's config files
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


def load_hypothesis_profile() -> None:
    """Hypothesis draws the same examples on every run (``derandomize``: a failure replays, CI cannot pass by luck);
    ``HYPOTHESIS_PROFILE=explore`` draws new ones, to hunt for failures while editing. Called before collection
    (pytest_configure), after :func:`rewrite_only_the_suite`."""
    from hypothesis import settings

    settings.register_profile("lbm", derandomize=True, database=None, print_blob=True)
    settings.register_profile("explore", derandomize=False)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lbm"))


LIBRARIES_NOT_REWRITTEN = ("hypothesis", "hydra")
"""Libraries that ship a pytest plugin, whose every module pytest marks for assertion rewriting (its own asserts are
not the suite's). Where bytecode is not written (PYTHONDONTWRITEBYTECODE, as here) or on a clean machine, every
process rewrote them again on import: 1.0 CPU-s for hypothesis and 0.4 for hydra in each of the three processes of
a 2-worker run (measured, ``--collect-only``; hydra's plugin is left out in pyproject's addopts, ``-p no:hydra_pytest``,
so hydra is first imported after this)."""


def rewrite_only_the_suite(config: pytest.Config) -> None:
    """Leave LIBRARIES_NOT_REWRITTEN out of pytest's assertion rewriting (they import later, unrewritten)."""
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)  # pytest's own set of names (no public API to unmark)
    if isinstance(marked, set):
        marked.difference_update(LIBRARIES_NOT_REWRITTEN)
        getattr(hook, "_marked_for_rewrite_cache", {}).clear()

REQUIRE_NATIVE = os.environ.get("LBM_REQUIRE_NATIVE", "") not in ("", "0")
"""LBM_REQUIRE_NATIVE=1 (set by .ci/run): a test marked ``native`` fails, not skips, where the native engine cannot build."""


GC_THRESHOLD = (10_000, 50, 1_000)
"""Python's cyclic garbage collector in a test process: a young collection every 10000 allocations (Python's default
700) and a full one after 1000 middle ones (default 10). A worker holds JAX's and the suite's objects by the million,
and each full collection walks them all: at the defaults the fast lane (one process, warm caches) spent 9.6 of its
129.7 CPU-s in 4464 collections (20 full), at this setting 3.2 of 120.2 (950, 2 full), with the same peak RSS (1.33 GB);
measured back to back (scripts/suite_costs.py's sibling measurement, gc.callbacks). Cycles are still collected: only
less often. 50000 for the young generation gained nothing more (122.4 CPU-s)."""


def tune_gc() -> None:
    """Collect cycles less often in this test process (GC_THRESHOLD)."""
    import gc

    gc.set_threshold(*GC_THRESHOLD)


MAX_WORKERS = 4
"""``-n auto`` (pyproject addopts) starts one worker per core, at most this many: every worker holds its own JAX
runtime and compiles, and beyond four the suite's longest tests, not the core count, bound its time."""


NO_XDIST = "pytest-xdist is not installed (or -p no:xdist): the tests run in this one process; -n and --dist are ignored"
"""Where pytest-xdist is absent (the TPU machine's preinstalled pytest), the suite still runs: its ``-n`` and ``--dist``
(pyproject addopts, the README's ``-n 0``, scripts/device_check.sh) are accepted and the tests run in one process."""


REQUIRE_ACCEL = os.environ.get("LBM_REQUIRE_ACCEL", "") not in ("", "0")
"""LBM_REQUIRE_ACCEL=1 (set by .ci/run for its accel step): a test marked ``accel`` that skips (its compiler plugin
missing from the environment) is a failure, so a broken accelerator environment cannot pass as a green run."""
