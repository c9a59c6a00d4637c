"""The native kernels' first build (lbm.engines.native.build): it says when it starts and ends, how long, and where."""

import subprocess
from pathlib import Path

import pytest
from helpers.suite import NATIVE_TEST_OPT, OPTIMISED_TEST_OPT

from lbm.engines.native import build
from lbm.engines.native.codegen import KernelSpec
from lbm.lattice import LATTICES


def test_a_build_logs_its_start_its_time_and_the_cache_path(tmp_path, monkeypatch, caplog):
    """The compiler is replaced by one that writes the library at once: the log lines, not the C++, are tested."""
    calls = []

    def fake_compile(cmd, cwd, **kwargs):
        calls.append(cmd)
        (Path(cwd) / "kernel.so").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("LBM_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(build.subprocess, "run", fake_compile)
    monkeypatch.setattr(build, "precompiled_header", lambda cxx, flags: [])
    spec = KernelSpec(LATTICES["d2q9"], "float32", trt=False, forced=False)
    with caplog.at_level("INFO", logger="lbm"):
        out = build.build(spec)
    assert out.parent == tmp_path / "cache" and out.exists() and len(calls) == 1
    start, end = (r.getMessage() for r in caplog.records)
    assert start.startswith(f"building the native kernel {spec.tag} with c++") and str(out) in start
    assert end.startswith(f"built the native kernel {spec.tag} in ") and " s: " in end and end.endswith(str(out))
    caplog.clear()
    with caplog.at_level("INFO", logger="lbm"):
        assert build.build(spec) == out  # cached: no build, nothing logged
    assert len(calls) == 1 and not caplog.records


def test_concurrent_builders_of_one_kernel_compile_it_once(tmp_path, monkeypatch):
    """A second builder of the same library waits on the first's lock and uses its result (xdist workers, users)."""
    import threading

    compiling, second = threading.Event(), threading.Event()
    calls = []

    def fake_compile(cmd, cwd, **kwargs):
        calls.append(cmd)
        if len(calls) == 1:
            compiling.set()
            second.wait(1.0)  # without the lock the other builder compiles meanwhile (and sets this at once)
        else:
            second.set()
        (Path(cwd) / "kernel.so").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("LBM_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(build.subprocess, "run", fake_compile)
    monkeypatch.setattr(build, "precompiled_header", lambda cxx, flags: [])
    spec = KernelSpec(LATTICES["d2q9"], "float32", trt=False, forced=False)
    paths = []
    first = threading.Thread(target=lambda: paths.append(build.build(spec)))
    first.start()
    assert compiling.wait(30)
    paths.append(build.build(spec))  # while the first is compiling
    first.join()
    assert len(calls) == 1 and paths[0] == paths[1] and paths[0].exists()


def test_a_build_shows_a_live_status_on_a_terminal_and_nothing_on_a_pipe(monkeypatch):
    import contextlib
    import sys

    from rich.status import Status

    from lbm.engines.native.build import build_status

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert isinstance(build_status("building"), contextlib.nullcontext)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    status = build_status("building the native kernel x")
    assert isinstance(status, Status) and "building the native kernel x" in str(status.status)


def test_the_optimisation_level_is_in_the_flags_and_the_cache_key(tmp_path, monkeypatch):
    """LBM_NATIVE_OPT replaces -O3 (default 3), keys its own library, and a bad level is one line naming the fix."""
    from lbm.errors import LbmError

    monkeypatch.setenv("LBM_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(build.subprocess, "run", lambda cmd, cwd, **kw: (Path(cwd) / "kernel.so").write_bytes(b"")
                        or subprocess.CompletedProcess(cmd, 0, "", ""))
    monkeypatch.setattr(build, "precompiled_header", lambda cxx, flags: [])
    spec = KernelSpec(LATTICES["d2q9"], "float32", trt=False, forced=False)
    paths = {}
    for level in ("3", "1", "0"):
        monkeypatch.setenv("LBM_NATIVE_OPT", level)
        flags = build.cxxflags()
        assert flags.count(f"-O{level}") == 1 and not [f for f in flags if f.startswith("-O") and f != f"-O{level}"]
        assert "-ffp-contract=off" in flags
        paths[level] = build.build(spec)
    monkeypatch.delenv("LBM_NATIVE_OPT")
    assert "-O3" in build.cxxflags() and build.build(spec) == paths["3"]
    assert len(set(paths.values())) == 3
    monkeypatch.setenv("LBM_NATIVE_OPT", "fast")
    with pytest.raises(LbmError, match=r"LBM_NATIVE_OPT='fast' is invalid: expected one of 0, 1, 2, 3"):
        build.cxxflags()


def test_kernels_share_one_precompiled_header_per_compiler_and_flags(tmp_path, monkeypatch, caplog):
    """The FFI and standard headers are precompiled once per flags (here two levels) and included first by every
    kernel built with those flags; where the header cannot be precompiled, kernels parse the headers themselves."""
    calls = []

    def fake_compiler(cmd, cwd=None, **kwargs):
        calls.append(cmd)
        if cmd[1:] == ["--version"]:
            return subprocess.CompletedProcess(cmd, 0, "c++ 1.0\n", "")
        if "c++-header" in cmd:
            if "-O1" in cmd:
                return subprocess.CompletedProcess(cmd, 1, "", "no precompiled headers at -O1")
            Path(cmd[cmd.index("-o") + 1]).write_bytes(b"")
        else:
            (Path(cwd) / "kernel.so").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setenv("LBM_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "compiler", lambda: "/usr/bin/c++")
    monkeypatch.setattr(build.subprocess, "run", fake_compiler)
    build.compiler_version.cache_clear()
    kernels = [KernelSpec(LATTICES["d2q9"], "float32", trt=False, forced=False),
               KernelSpec(LATTICES["d3q19"], "float64", trt=True, forced=True)]
    monkeypatch.setenv("LBM_NATIVE_OPT", "0")
    for spec in kernels:
        build.build(spec)
    headers = [c for c in calls if "c++-header" in c]
    builds = [c for c in calls if "kernels.cc" in c]
    assert len(headers) == 1 and len(builds) == 2 and "-shared" not in headers[0] and "-O0" in headers[0]
    header = Path(headers[0][headers[0].index("c++-header") + 1])
    assert header.parent.parent == tmp_path and "ffi.h" in header.read_text()
    assert header.with_name("lbm_pch.h.gch").exists()
    for cmd in builds:  # the header first, then the kernel's own includes
        assert cmd[cmd.index("-include") + 1] == str(header) and cmd.index("-include") < cmd.index("kernels.cc")
    calls.clear()
    monkeypatch.setenv("LBM_NATIVE_OPT", "1")  # other flags, another header; here one that cannot be built
    with caplog.at_level("INFO", logger="lbm"):
        for spec in kernels:
            build.build(spec)
    assert len([c for c in calls if "c++-header" in c]) == 1  # tried once
    assert [("-include" in c) for c in calls if "kernels.cc" in c] == [False, False]
    assert any("no precompiled header" in r.getMessage() for r in caplog.records)


@pytest.mark.native
@pytest.mark.slow  # one -O3 build: ~10 s of CPU
def test_every_optimisation_level_gives_bitwise_the_same_populations(monkeypatch):
    """-O0 (the suite's level), -O1 (its long native runs', tests/conftest.py) and -O3 (the default) libraries give
    identical bits.

    One push and one AA pair of a kernel with every kind of code the kernels hold: the bulk collision (KBC, the
    longest), a body force, walls, a Zou-He inlet and an outflow, and 16-bit storage's conversions.
    """
    import jax.numpy as jnp
    import numpy as np

    from lbm.boundaries import HalfwayBounceBack
    from lbm.engines.native.collisions import collision_rates
    from lbm.engines.plan import wall_records
    from lbm.kernels.collisions import Collision

    lat, shape = LATTICES["d2q9"], (9, 8)
    spec = KernelSpec(lat, "float16", False, True, "zou_he", "kbc")
    solid = np.zeros(shape, bool)
    solid[4:6, 3:5] = True
    rng = np.random.default_rng(3)
    f = jnp.asarray(0.02 * rng.standard_normal((lat.q, *shape)), jnp.float16)  # stored as f - w
    step = {"force": np.array([2e-4, -1e-4]), "u_in": jnp.asarray(0.03 + 0.01 * rng.standard_normal((2, 8))),
            "outflow": True, "rates": collision_rates(Collision("kbc", 1 / 0.6))}
    results, prefixes = [], set()
    for level in (NATIVE_TEST_OPT, OPTIMISED_TEST_OPT, "3"):
        monkeypatch.setenv("LBM_NATIVE_OPT", level)
        prefixes.add(build.register(spec))
        rec = {s: {k: jnp.asarray(v) for k, v in wall_records(lat, shape, (HalfwayBounceBack.around(solid, lat),),
                                                              s).items()} for s in ("push", "aa_even", "aa_odd")}
        pushed, *_ = build.push(spec, f, jnp.zeros_like(f), 1 / 0.6, 1 / 0.6, walls=rec["push"], **step)
        a, *_ = build.aa_step(spec, f + 0, 0, 1 / 0.6, 1 / 0.6, walls=rec["aa_even"], **step)
        a, *_ = build.aa_step(spec, a, 1, 1 / 0.6, 1 / 0.6, walls=rec["aa_odd"], **step)
        results.append((np.asarray(pushed), np.asarray(a)))
    assert len(prefixes) == 3  # three libraries were built and called
    assert np.abs(results[0][0].astype(np.float64) - np.asarray(f, np.float64)).max() > 1e-3  # the step acts
    for other in results[1:]:
        for low, high in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(low.view(np.uint16), high.view(np.uint16))
