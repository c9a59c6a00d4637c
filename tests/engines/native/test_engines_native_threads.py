"""The native engine's threading configuration (``native.threads``, ``native.pinning``): validated, passed to the
kernel, and without effect on the result; the software prefetch's override likewise (docs/performance.md)."""

import jax
import numpy as np
import pytest
from helpers.runs import run_config, setup_for

from lbm.config.sections import Native
from lbm.engines import make_engine
from lbm.errors import LbmError
from lbm.simulation import engine_for

needs_native = pytest.mark.native  # skips without a compiler; fails instead under LBM_REQUIRE_NATIVE=1 (conftest)
BOX = ["case=taylor_green", "grid.nx=96", "grid.ny=200"]
"""19200 cells: above the 16384 from which the kernel shares a step among threads."""


def test_native_section_defaults_and_overrides():
    assert run_config().native == Native(threads=0, pinning=False)
    assert run_config("native.threads=3", "native.pinning=true").native == Native(threads=3, pinning=True)


@pytest.mark.parametrize("override,message", [
    ("native.threads=-1", r"native.threads=-1 is invalid: expected an integer >= 0 \(threads per step"),
    ("native.pinning=sometimes", r"native.pinning"),
])
def test_native_section_refuses_bad_values(override, message):
    with pytest.raises(LbmError, match=message):
        run_config(override)


def _steps(engine, setup, n=6):
    f = setup.initial_populations()
    engine.compile(f, n)
    f, _ = engine.advance(f, n)
    return np.asarray(jax.block_until_ready(f))


@needs_native
def test_threads_and_pinning_reach_the_kernel_and_keep_the_result(monkeypatch):
    """The run's section reaches the engine (engine_for) and the kernel's call (its attributes in the compiled
    program); every split (one thread, three dynamic, two pinned static) gives bitwise the same populations."""
    monkeypatch.delenv("LBM_NATIVE_THREADS", raising=False)
    run = run_config(*BOX, "native.threads=2", "native.pinning=true")
    setup = setup_for(BOX, "float32")
    assert engine_for(run, setup).threading == Native(threads=2, pinning=True)
    results = {}
    for native in (None, Native(threads=1, pinning=False), Native(threads=3, pinning=False),
                   Native(threads=2, pinning=True)):
        engine = make_engine(setup, engine="native", native=native)
        assert engine.name == "native"
        hlo = engine.compile(setup.initial_populations(), 2).as_text()
        threads, pinning = (0, 0) if native is None else (native.threads, int(native.pinning))
        assert f"threads = {threads} : i64" in hlo and f"pinning = {pinning} : i64" in hlo
        results[native] = _steps(engine, setup)
    first = results[None]
    for native, f in results.items():
        np.testing.assert_array_equal(f, first, err_msg=str(native))


@needs_native
def test_prefetch_distance_keeps_the_result(monkeypatch):
    """LBM_NATIVE_PREFETCH_BYTES (the software prefetch's distance; 0 turns it off) changes no value."""
    setup = setup_for(BOX, "float32")
    engine = make_engine(setup, engine="native")
    results = []
    for distance in ("0", "64", "2048"):
        monkeypatch.setenv("LBM_NATIVE_PREFETCH_BYTES", distance)
        results.append(_steps(engine, setup))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
