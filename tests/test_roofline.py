"""lbm.roofline and its host probe (lbm.engines.native.stream): the bytes each probe counts, the cache-resident
marking, the roofline's choice and the guard against records above it. No timed assertions."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lbm import roofline
from lbm.roofline import Series, last_level_cache, measure_xla, summarise, tiled_shape


def test_the_probe_arrays_are_in_the_tpus_native_tiling():
    assert tiled_shape(256 * 2**20, 4) == (8192, 8192)
    assert tiled_shape(1000, 4) == (8, 8192)  # at least one tile of rows
    rows, lanes = tiled_shape(3 * 2**26 + 5 * 2**20, 4, 512)
    assert lanes % 128 == 0 and rows == 6144  # 192 MiB: rows rounded down to whole blocks of 512


def test_a_call_moves_enough_bytes_that_its_own_cost_is_small():
    """An accelerator's call costs ~0.6 ms beyond its passes (TPU v5e): a call moves DEVICE_BYTES_PER_CALL at least;
    a CPU's dispatch is negligible: HOST_PASSES."""
    assert roofline.passes("cpu", 2**29) == roofline.HOST_PASSES
    assert roofline.passes("tpu", 2**29) == 32  # 256 MiB in place: 512 MiB a pass, 16 GiB a call
    assert roofline.passes("gpu", 3 * 2**30) == 6  # 16 GiB / 3 GiB = 5.3 -> 6
    assert roofline.passes("tpu", 2**40) == 1


def test_each_xla_kernel_names_the_bytes_its_compiled_program_moves():
    """Bytes per call = arrays named per element x array bytes x passes; lbm.hlo counts the same from the compiled
    loop (a kernel whose program moves more, such as a triad whose 0.5 y XLA hoists into a temporary, fails here)."""
    passes = 4
    series = {s.name: s for s in measure_xla(32 * 1024, 1, jax.devices()[0], passes)}
    size = 8 * 8192 * 4  # (8, 8192) float32
    named = {"copy": 2, "triad": 3, "copy_2buf": 2, "triad_2buf": 3}
    held = {"copy": 1, "triad": 2, "copy_2buf": 2, "triad_2buf": 3}
    assert set(series) == set(named)
    for name, s in series.items():
        assert s.bytes_per_call == named[name] * size * passes, name
        assert s.working_set_bytes == held[name] * size, name
        assert s.hlo_bytes_per_call == pytest.approx(s.bytes_per_call, rel=1e-3), name
        assert len(s.seconds) == 1 and s.seconds[0] > 0 and s.passes == passes


def test_the_xla_kernels_compute_what_they_say():
    passes = 4
    kernels = roofline.xla_kernels(passes)
    x, y, z = (jnp.full((8, 1024), v, jnp.float32) for v in (1.0, 2.0, 0.0))
    (got,) = kernels["copy"][0](x + 0)
    np.testing.assert_allclose(got, 1.0001 ** passes, rtol=1e-6)
    got, _ = kernels["triad"][0](x + 0, y + 0)
    np.testing.assert_allclose(got, 1.0 + passes * 0.5 * 2.0, rtol=1e-6)
    a, b = kernels["copy_2buf"][0](x + 0, z + 0)  # STREAM's copy: every pass from x into y
    np.testing.assert_allclose(a, 1.0)
    np.testing.assert_allclose(b, 1.0001, rtol=1e-6)
    a, b, c = kernels["triad_2buf"][0](x + 0, y + 0, z + 0)  # STREAM's triad: every pass from x and y into z
    np.testing.assert_allclose(a, 1.0)
    np.testing.assert_allclose(b, 2.0)
    np.testing.assert_allclose(c, 2.0, rtol=1e-6)


def test_the_pallas_copy_moves_its_array_in_place_in_blocks():
    """The TPU probe, run by the Pallas interpreter on this CPU: x 1.0001^passes, two bytes per byte of the array."""
    passes = 2
    fn = roofline.pallas_copy((16, 4096), (8, 2048), passes, interpret=True)
    x = jnp.arange(16 * 4096, dtype=jnp.float32).reshape(16, 4096)
    np.testing.assert_allclose(fn(x + 0), x * 1.0001 ** passes, rtol=1e-6)  # every block, each in its place
    (s,) = roofline.measure_pallas(32 * 1024, 1, jax.devices()[0], passes, interpret=True, block=(8, 2048))
    assert s.name == "pallas_copy" and s.bytes_per_call == 2 * 8 * 8192 * 4 * passes
    assert s.working_set_bytes == 8 * 8192 * 4 and s.passes == passes


def _series(name, gbs, working_set, hlo=None):
    nbytes = 10**9
    return Series(name, nbytes, working_set, [nbytes / gbs / 1e9] * 3, hlo_bytes_per_call=hlo)


def test_the_roofline_is_the_fastest_kernel_to_memory():
    series = [_series("copy", 40.0, 2**28), _series("native_copy", 50.0, 2**28),
              _series("small", 200.0, 2**20),  # its arrays fit in the cache: its rate is the cache's
              _series("overcounted", 90.0, 2**28, hlo=int(1.5e9))]  # its program moves 50% more than it names
    r = summarise(series, cache_bytes=32 * 2**20)
    assert r["roofline_kernel"] == "native_copy" and r["bandwidth_gbs"] == pytest.approx(50.0)
    assert r["small"]["cache_resident"] is True and r["copy"]["cache_resident"] is False
    assert "50% more than the kernel names" in r["overcounted"]["note"]
    assert r["roofline_cache_resident"] is False and r["kernels"] == [s.name for s in series]
    # no cache size known (an accelerator): nothing is marked, the fastest kernel that names its bytes sets it
    r = summarise(series, cache_bytes=None)
    assert r["roofline_kernel"] == "small" and r["small"]["cache_resident"] is None
    # every probe array in the cache: the fastest of them, flagged
    r = summarise(series[2:3], cache_bytes=32 * 2**20)
    assert r["roofline_cache_resident"] is True and r["roofline_kernel"] == "small"
    # every kernel moving more than it names: the fastest of them, flagged so
    r = summarise(series[3:], cache_bytes=32 * 2**20)
    assert r["roofline_overcounted"] is True and r["roofline_cache_resident"] is False
    assert r["roofline_kernel"] == "overcounted"


def _cache(root, cpu, index, level, kind, size, shared):
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        (d / name).write_text(f"{value}\n")


def test_the_last_level_cache_is_summed_over_the_instances_this_process_may_use(tmp_path):
    """Two L3 instances of 32 MiB, each shared by two cores: all four cores see 64 MiB, cores 0-1 alone 32 MiB;
    L1 and L2 are not the last level, an instruction cache never counts."""
    for cpu in range(4):
        shared = "0-1" if cpu < 2 else "2-3"
        _cache(tmp_path, cpu, 0, 1, "Data", "48K", str(cpu))
        _cache(tmp_path, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _cache(tmp_path, cpu, 2, 2, "Unified", "1024K", str(cpu))
        _cache(tmp_path, cpu, 3, 3, "Unified", "32768K", shared)
    assert last_level_cache(tmp_path, {0, 1, 2, 3})[0] == 64 * 2**20
    size, source = last_level_cache(tmp_path, {0, 1})
    assert size == 32 * 2**20 and "level 3, 1 instance(s)" in source
    assert last_level_cache(tmp_path / "none", {0}) is None


def test_the_specification_bandwidth_comes_from_the_targets():
    gbs, source = roofline.spec_bandwidth("TPU v5 lite")
    assert gbs == 819 and "HBM bandwidth" in source
    assert roofline.spec_bandwidth("cpu") is None and roofline.spec_bandwidth("") is None


def test_measure_bandwidth_reports_every_kernel_beside_the_spec(monkeypatch):
    """On this CPU with a host probe stubbed: its kernels join the XLA ones, and a device kind the targets know gets
    the spec bandwidth and the roofline's fraction of it."""

    class Device:
        platform = "cpu"
        device_kind = "TPU v5 lite"  # a stand-in with a spec, computed on the real CPU device

        def __str__(self):
            return "cpu:0"

    real = jax.devices()[0]
    monkeypatch.setattr(roofline, "measure_xla", lambda n, r, d: measure_xla(n, r, real))
    host = lambda nbytes, repeats: [_series("native_copy", 1e4, 2 * nbytes)]  # noqa: E731
    r = roofline.measure_bandwidth(32 * 1024, 1, device=Device(), host=host)
    assert r["kernels"] == ["copy", "triad", "copy_2buf", "triad_2buf", "native_copy"]
    assert r["array_shape"] == [8, 8192] and r["copy"]["passes_per_call"] == roofline.HOST_PASSES
    assert r["spec_bandwidth_gbs"] == 819 and r["fraction_of_spec"] == pytest.approx(r["bandwidth_gbs"] / 819)
    json.dumps(r)  # bench.json takes it as it is


@pytest.mark.native
def test_the_host_probe_counts_the_bytes_of_each_kernel():
    from lbm.engines.native import stream

    n = 4096  # floats per array (16 KiB)
    got = {s.name: s for s in stream.measure(n * 4, 2, threads=2)}
    arrays = {"native_copy": (2, 1), "native_triad": (3, 2), "native_copy_2buf": (2, 2), "native_triad_2buf": (3, 3)}
    for name, (named, held) in arrays.items():
        assert got[name].bytes_per_call == named * n * 4 and got[name].working_set_bytes == held * n * 4, name
        assert got[name].threads == 2 and len(got[name].seconds) == 2 and min(got[name].seconds) > 0
    for q in stream.PLANES:
        per_plane = n // q // 16 * 16
        s = got[f"native_planes{q}"]
        assert s.bytes_per_call == 2 * q * per_plane * 4 and s.working_set_bytes == q * per_plane * 4
