"""The pallas engine against the reference (xla), in Pallas interpret mode on the CPU; compiled for h100 and v5e.

The kernels compute the cell's collision from the same formulas as lbm.kernels, on per-direction
arrays; XLA may contract and reorder differently, so the engines agree to rounding: float32 to
~1e-7 of populations of order 0.1-0.4 after a few steps (measured 2e-7 at most), float64 to ~1e-16
(bounds below: 10x that). Interpret mode is slow (seconds per compile), so the grids are small
and the chunks short: 3 steps run the lone first step of an odd chunk and one loop iteration of
two steps; 2 steps only the loop. Both kernel formulations run here: ``flat`` (what a GPU runs)
and ``rows`` (what a TPU runs). The deviceless compiles (marked ``accel``) need
``bash scripts/accel_env.sh`` and run in ``.venv-accel``.
"""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.device import REHEARSAL, on_device
from helpers.inspect_cli import inspect_json, installed
from helpers.lattices import slow_except
from helpers.runs import pair_2d_at_every_size, run_config, setup_for

from lbm.bench.targets import cuda_plugin
from lbm.engines import EngineUnavailable, make_engine
from lbm.engines.pallas.engine import PallasEngine
from lbm.engines.pallas.kernels import flat_step, rows_block, rows_step
from lbm.engines.xla import XlaEngine
from lbm.kernels.collisions import collide
from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream
from lbm.lattice import LATTICES

TOL = {"float32": 2e-6, "float64": 1e-14}

CASES = {
    "cylinder": ["grid.nx=40", "grid.ny=24"],
    "cylinder_trt_zou_he": ["grid.nx=40", "grid.ny=24", "collision=trt", "case.inlet=zou_he",
                            "case.bounce_back=halfway"],
    "cavity": ["case=cavity", "grid.nx=16", "grid.ny=12"],
    "poiseuille": ["case=poiseuille", "grid.nx=16", "grid.ny=10"],
    "taylor_green": ["case=taylor_green", "grid.nx=16", "grid.ny=8"],
    "cavity_d3q19": ["case=cavity", "lattice=d3q19", "grid.nx=8", "grid.ny=8", "grid.nz=6"],
}


def _compare(setup, engine, steps, tol, aux_tol=None):
    f0 = setup.initial_populations()
    f_ref, aux_ref = XlaEngine(setup).advance(jnp.array(f0), steps)
    f, aux = engine.advance(jnp.array(f0), steps)
    assert f.dtype == f_ref.dtype and f.shape == f_ref.shape
    np.testing.assert_allclose(np.asarray(f), np.asarray(f_ref), rtol=0, atol=tol)
    assert set(aux) == set(aux_ref)
    for k in aux:
        assert aux[k].shape == aux_ref[k].shape
        np.testing.assert_allclose(np.asarray(aux[k]), np.asarray(aux_ref[k]), rtol=0,
                                   atol=tol * 10 if aux_tol is None else aux_tol)


FLOAT64 = ("cylinder", "cavity_d3q19")
"""The cases compared in float64 (2 steps); the others in float32 (3 steps). The cylinder's inlet, outflow and
obstacle also run in float32 with TRT, Zou-He and half-way walls (cylinder_trt_zou_he)."""


@pytest.mark.parametrize("name,precision,steps", slow_except(
    [(n, "float32", 3) for n in sorted(CASES) if n not in FLOAT64] + [(n, "float64", 2) for n in FLOAT64],
    fast=set()))  # cavity 2.8 CPU-s; the fast lane: the flat kernel's step (test_pallas_collisions)
def test_flat_kernel_engine_equals_the_reference(name, precision, steps):
    """Every case once: float32 over an odd step count, float64 over an even one on two (the suite's time budget)."""
    setup = setup_for(CASES[name], precision)
    engine = make_engine(setup, engine="pallas")
    assert isinstance(engine, PallasEngine) and engine.form == "flat" and engine.interpret
    _compare(setup, engine, steps, TOL[precision])


@pytest.mark.slow
@pytest.mark.parametrize("name,steps", [("cylinder", 2), ("taylor_green", 3), ("cavity_d3q19", 3)])
def test_rows_kernel_engine_equals_the_reference(name, steps):
    setup = setup_for(CASES[name], "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert engine.form == "rows"
    _compare(setup, engine, steps, TOL["float32"])


@pytest.mark.parametrize("lattice,shape,precision", slow_except(
    [("d2q9", (16, 6), "float32"), ("d3q19", (4, 5, 3), "float64"), ("d3q27", (3, 4, 5), "float32")],
    fast={("d2q9", (16, 6), "float32")}))
def test_kernels_equal_collide_then_stream(lattice, shape, precision):
    """One periodic step with TRT and a body force, on random populations; grids that no block divides."""
    if precision == "float64":
        jax.config.update("jax_enable_x64", True)
    lat = LATTICES[lattice]
    rng = np.random.default_rng(1)
    f = jnp.asarray(lat.w.reshape((-1,) + (1,) * lat.d) * 0.2 * rng.standard_normal((lat.q, *shape)),
                    precision)  # deviations f - w
    force = np.array([2e-3, -1e-3, 5e-4][: lat.d])
    drho, u = macroscopic(f, lat, force)
    ref = np.asarray(stream(collide(f, equilibrium(drho, u, lat), u, lat, 1.3, 0.8, force), lat))
    # 3D: one row per block (unrolled), two and the whole axis (the kernel loops over its rows); with several blocks
    # the halo rows come from the neighbouring blocks
    rows = [shape[0]] if lat.d == 2 else sorted({1, shape[0], *([2] if shape[0] % 2 == 0 else [])})
    for out in (flat_step(f, lat, 1.3, 0.8, force, interpret=True, block=64),
                *(rows_step(f, lat, 1.3, 0.8, force, interpret=True, rows=r) for r in rows)):
        assert out.dtype == f.dtype
        np.testing.assert_allclose(np.asarray(out), ref, rtol=0, atol=TOL[precision])


def test_rows_block_divides_the_first_axis():
    lat = LATTICES["d2q9"]
    assert rows_block(lat, (1024, 1024), 4) == 32  # 32 rows x 1024 x 9 x 4 B = 1.2 MB <= 2 MiB; 64 rows do not fit
    assert rows_block(lat, (420, 180), 4) == 420  # no multiple of 8 divides 420: the whole axis
    assert rows_block(LATTICES["d3q19"], (128, 128, 128), 4) == 1  # a plane is 1.2 MB


def test_auto_picks_pallas_on_accelerators_and_falls_back_where_it_cannot(caplog):
    setup = setup_for(CASES["taylor_green"], "float32")
    for platform in ("gpu", "tpu"):
        engine = make_engine(setup, platform=platform)
        assert engine.name == "pallas" and not engine.interpret
        assert engine.form == ("rows" if platform == "tpu" else "flat")
    assert make_engine(setup, platform="cpu").name in ("native", "xla")
    setup64 = setup_for(CASES["taylor_green"], "float64")
    fallback = make_engine(setup64, platform="tpu")  # TPUs compute in float32 at most
    assert fallback.name == "xla" and "float32" in fallback.note
    with caplog.at_level(logging.WARNING, logger="lbm"):
        engine = make_engine(setup, engine="pallas")
    assert engine.interpret and sum("interpret mode" in r.getMessage() for r in caplog.records) == 1


def test_a_storage_the_kernel_does_not_keep_is_refused_and_auto_falls_back_to_xla():
    """The kernel keeps populations in the compute dtype; every collision kind runs
    (tests/engines/pallas/test_pallas_collisions.py)."""
    setup = setup_for(CASES["cavity"], "float32")
    with pytest.raises(EngineUnavailable, match="compute dtype, not float16"):
        make_engine(setup, engine="pallas", storage="float16")
    box = setup_for(CASES["taylor_green"], "float32")  # a wall-free box: auto picks pallas on a TPU too
    for platform in ("gpu", "tpu"):
        fallback = make_engine(box, storage="float16", platform=platform)
        assert fallback.name == "xla" and "not float16" in fallback.note


@pytest.mark.slow
def test_a_run_with_engine_pallas_writes_its_metrics(tmp_path):
    from lbm.simulation import simulate

    run = run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=4", "engine=pallas", "output.every=0")
    metrics = simulate(run, tmp_path)
    assert metrics["engine"] == "pallas" and metrics["status"] == "completed"
    assert abs(metrics["mass_rel_drift"]) < 1e-5  # a periodic box conserves mass to float32 rounding


# --- deviceless compiles (bash scripts/accel_env.sh; .venv-accel/bin/python -m pytest -m accel) ----------------


BOX = ["case=taylor_green", "grid.nx=1024", "grid.ny=1024", "steps=100"]
BOX3 = ["case=taylor_green", "lattice=d3q19", "grid.nx=64", "grid.ny=64", "grid.nz=64", "steps=100"]
CYLINDER = ["steps=100"]  # the default case: cylinder 420x180


@pytest.mark.accel
@pytest.mark.parametrize("case,args,max_ratio", [("box", BOX, 1.15), ("box_d3q19", BOX3, 1.15),
                                                 ("cylinder", CYLINDER, 1.3)])
def test_h100_loop_body_is_one_pallas_kernel_per_step(tmp_path, case, args, max_ratio):
    """Issue 10's targets: traffic_ratio <= 1.15 (box), <= 1.3 (cylinder); no whole-array copy or scatter."""
    if cuda_plugin() is None:
        pytest.skip("the CUDA plugin is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=h100", *args)
    assert rec["engine"] == "pallas" and rec["steps_per_loop_body"] == 2
    bulk = [k for k in rec["kernels"] if k["kind"] == "__gpu$xla.gpu.triton"]
    assert len(bulk) == 2  # one per step
    q = rec["min_bytes_per_cell_step"] / 8
    for k in bulk:
        assert k["stages"] == ["macroscopic", "equilibrium", "collide", "stream"]
        # each reads and writes every population once: Q x 4 B per cell, half a step's share each
        assert k["read_bytes_per_cell_step"] == pytest.approx(q * 2, rel=1e-3)
        assert k["written_bytes_per_cell_step"] == pytest.approx(q * 2, rel=1e-3)
    for k in rec["kernels"]:  # boundary work touches boundary cells only: far below one population array
        if k not in bulk:
            assert k["read_bytes_per_cell_step"] + k["written_bytes_per_cell_step"] < 2, k
    assert rec["traffic_ratio"] <= max_ratio


@pytest.mark.accel
@pytest.mark.parametrize("case,args", [("box", ["case=taylor_green", "grid.nx=2048", "grid.ny=2048", "steps=100"]),
                                       ("cylinder", CYLINDER)])
def test_v5e_loop_body_is_one_mosaic_kernel_per_step(tmp_path, case, args):
    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=v5e", "engine=pallas", *args)  # named: with an inlet auto picks xla on a TPU
    assert rec["engine"] == "pallas" and rec["steps_per_loop_body"] == 2
    bulk = [k for k in rec["kernels"] if k["kind"] == "tpu_custom_call"]
    assert len(bulk) == 2 and all(k["stages"] == ["macroscopic", "equilibrium", "collide", "stream"] for k in bulk)
    if case == "box":  # 151 MB of populations: more than VMEM holds, so the loop streams them from HBM
        assert rec["traffic_ratio"] <= 1.15


# --- on a GPU or TPU (scripts/device_check.sh runs these: pytest -m device; helpers.device: on_device, REHEARSAL) ---


DEVICE_CASES = {**CASES, "taylor_green_3d": ["case=taylor_green_3d", "lattice=d3q27", "grid.nx=16", "grid.ny=16",
                                               "grid.nz=16"],
                "taylor_green_aa2d": ["case=taylor_green", "lattice=d2q9", "grid.nx=16", "grid.ny=1024"],
                "cavity_aa2d": ["case=cavity", "lattice=d2q9", "grid.nx=16", "grid.ny=1024"],
                "taylor_green_rows2d": ["case=taylor_green", "lattice=d2q9", "grid.nx=16", "grid.ny=1030"],
                "cavity_rows2d": ["case=cavity", "lattice=d2q9", "grid.nx=16", "grid.ny=1100"],
                "cavity_d3q19_flat": ["case=cavity", "lattice=d3q19", "grid.nx=16", "grid.ny=10", "grid.nz=12"],
                "cylinder_d3q19_flat": ["case=cylinder", "lattice=d3q19", "grid.nx=24", "grid.ny=16", "grid.nz=8",
                                        "case.radius=3", "case.center=[9,8]"]}
"""On the device also a periodic 3D box of 8 blocks along x: on a TPU the in-place AA kernels (lbm.engines.pallas.aa),
their DMA windows wrapping around x, the cumulant collision (its 16 x 16 planes flat: lbm.engines.pallas.aa
.flat_plane); D2Q9 grids with ny = 1024, where the 2D AA pair runs (y as (8, 128) planes, 8 blocks of 2 rows along x),
periodic and with walls; the same on ny = 1030 and 1100, whose rows pad so that two rows of x share a plane
(lbm.engines.pallas.planes.row_group: k = 2, 8 planes); and 3D grids on flat planes padded to 1024 cells, the
cavity's kernel walls (10 x 12) and the cylinder's faces and force (16 x 8)."""
@pytest.mark.device
@on_device
@pytest.mark.parametrize("name", ["cylinder", "cavity", "taylor_green", "cavity_d3q19", "taylor_green_3d",
                                  "taylor_green_aa2d", "cavity_aa2d", "taylor_green_rows2d",
                                  "cavity_rows2d", "cavity_d3q19_flat", "cylinder_d3q19_flat"])
def test_on_the_device_the_compiled_kernel_equals_the_reference(name, monkeypatch):
    """The compiled kernel (Triton or Mosaic, not interpreted) against xla on the same device, 20 steps float32.

    Not bitwise: XLA and Triton contract multiply-adds into FMAs differently, and Triton lowers a float32
    division to PTX's div.full.f32 (2 ulp) where XLA's is correctly rounded. A few ulp of populations <= 0.47
    per step (~1e-7) over 20 steps: about 2e-6. On the CPU (interpret mode against xla, 20 steps) the largest
    differences are 6.9e-7 (populations, cylinder) and 7.6e-7 (the cylinder's force, of magnitude 0.29); the
    bound, 1e-5 for both, is 5x the GPU estimate.
    """
    if name.endswith(("aa2d", "rows2d")):  # the 2D pair (from 40 MiB of populations) on 16 x ~1024
        pair_2d_at_every_size(monkeypatch)
    setup = setup_for(DEVICE_CASES[name], "float32")
    # named, not auto: on a TPU auto picks xla for small 2D grids with walls or an inlet (lbm.engines.auto_choice)
    engine = make_engine(setup, engine="pallas")
    assert engine.name == "pallas", engine.note
    assert engine.interpret == (jax.default_backend() == "cpu")  # compiled wherever there is an accelerator
    if name.endswith(("aa2d", "rows2d")) and jax.default_backend() == "tpu":
        assert engine.bulk.inplace, engine.note  # the 2D AA pair, not the push kernel
    if name.endswith("rows2d") and jax.default_backend() == "tpu":
        assert engine.group == 2, engine.note  # two rows of x per plane
    if name.endswith("flat") and jax.default_backend() == "tpu":
        assert engine.viewed and (engine.walls or engine.faces) is not None, engine.note  # no boundary plan
    _compare(setup, engine, 20, 1e-5, aux_tol=1e-5)


@pytest.mark.device
@on_device
def test_on_the_device_a_profiled_run_gives_a_device_clock_breakdown(tmp_path):
    import csv

    from lbm.simulation import simulate

    size = ["grid.nx=40", "grid.ny=24"] if REHEARSAL else []  # interpret mode: a tiny grid
    run = run_config("steps=40", "profile.enabled=true", "profile.warmup_steps=5", "profile.steps=10",
                     "output.every=0", "engine=pallas", *size)
    metrics = simulate(run, tmp_path)
    assert metrics["engine"] == "pallas" and metrics["status"] == "completed"
    rows = list(csv.DictReader((tmp_path / "profile" / "breakdown.csv").open()))
    # every timed stage row on the device clock (breakdown.csv is the headline table: the device's where it has events)
    timed = [r for r in rows if r["status"] in ("measured", "fused-group")]
    assert timed and all(r["clock"] == "device" and float(r["mean_ms"]) > 0 for r in timed), timed
    # the bulk kernel's time lands on the stages it does (its name, BULK_SCOPE, lists them)
    assert [r for r in timed if {"collide", "stream"} <= set(r["stage"].split("+"))]


@pytest.mark.device
@on_device
@pytest.mark.parametrize("name", ["cylinder", "taylor_green", "cavity_d3q19"])
def test_on_the_device_auto_picks_what_auto_choice_says(name):
    """engine=auto on the device is the engine lbm.engines.auto_choice names for this platform, and says why."""
    from lbm.engines import auto_choice

    setup = setup_for(CASES[name], "float32")
    platform = "cpu" if REHEARSAL else jax.default_backend()
    engine = make_engine(setup, platform=platform)
    wanted, why = auto_choice(setup, platform)
    assert engine.name == wanted or REHEARSAL and engine.name == "xla", engine.note  # xla: no compiler here
    assert why in engine.note


@pytest.mark.slow  # 5 CPU-s
def test_interpret_mode_compiles_with_the_fast_compile_preset_to_the_same_bits(monkeypatch):
    """On the CPU the interpret-mode engine compiles its chunks with INTERPRET_OPTIONS (its compiled instructions differ
    from those without them; the source locations in the text aside, two compiles without them are the same) and steps
    the populations to the same bits; its description (inspect, the profile's compile report) is of that program and
    still traces the chunk inside another (the jaxpr); a TPU chunk has none."""
    import re

    from lbm.engines.pallas import engine as pallas_engine

    def instructions(text):
        return [re.sub(r",? metadata=\{.*?\}", "", line) for line in text.splitlines() if " = " in line]

    setup = setup_for(["case=taylor_green", "grid.nx=8", "grid.ny=1024"], "float32")
    f0 = jnp.asarray(setup.initial_populations())
    texts, outs = [], []
    for options in (pallas_engine.INTERPRET_OPTIONS, None):
        monkeypatch.setattr(pallas_engine, "INTERPRET_OPTIONS", options)
        engine = PallasEngine(setup, platform="tpu", interpret=True)
        assert engine.compiler_options == options
        compiled = engine.compile(f0, 2)
        texts.append(instructions(compiled.as_text()))
        outs.append(np.asarray(engine.advance(jnp.array(f0), 2)[0]))
    assert texts[0] != texts[1]
    np.testing.assert_array_equal(outs[0], outs[1])
    monkeypatch.undo()
    described = PallasEngine(setup, platform="tpu", interpret=True).describe(2)[0]  # inspect's and the profile's
    assert "pallas_call" in described["jaxpr"] and instructions(described["optimized_hlo"]) == texts[0]
    assert PallasEngine(setup, platform="tpu", interpret=False).compiler_options is None
