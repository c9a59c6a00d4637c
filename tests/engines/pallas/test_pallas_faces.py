"""The cylinder on the 2D in-place pair (lbm.engines.pallas.faces): the obstacle as the kernels' solid bit, the face
rows and the force on the xla side. Against the xla engine in Pallas interpret mode, the force's dense weights against
the momentum exchange, the lowered chunk for a TPU, and what ``auto`` picks.

Bounds: populations of order 0.01 within 1e-7 (measured at most 2.2e-8 over 5 steps: float32 rounding of the
kernels' arithmetic against XLA's); the force within 1e-6 of its largest component (measured 3.6e-7: its sum runs in
another order).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.jaxprs import equations
from helpers.lattices import slow_except
from helpers.runs import noisy_populations, pair_2d_at_every_size, setup_for

from lbm.boundaries.forces import Forces
from lbm.engines import auto_choice
from lbm.engines.base import spec_of
from lbm.engines.pallas import faces
from lbm.engines.pallas.engine import PallasEngine
from lbm.engines.timestep import step_index
from lbm.engines.xla import XlaEngine
from lbm.kernels.forces import momentum_exchange
from lbm.kernels.streaming import stream

F_TOL, FORCE_TOL = 1e-7, 1e-6


def _cylinder(nx=24, ny=1030, *extra):
    """A cylinder of radius 4 on nx x ny (1030: the view pads y to 2048 and streams periodic at ny)."""
    return setup_for(["case=cylinder", f"grid.nx={nx}", f"grid.ny={ny}", "case.radius=4",
                      f"case.center=[9,{ny // 2 + 3}]", *extra], "float32")


CYLINDER_3D = ["case=cylinder", "lattice=d3q19", "grid.nx=24", "grid.ny=16", "grid.nz=8", "case.radius=3",
               "case.center=[9,8]"]
"""The D3Q19 cylinder spanning a periodic z: its force links wrap around z (the force's box spans it whole)."""


@pytest.fixture
def pair_2d(monkeypatch):
    """The 2D in-place pair on the tests' small grids."""
    pair_2d_at_every_size(monkeypatch)



@pytest.mark.parametrize("ny,steps", slow_except([(1030, 4), (1030, 5), (1024, 3), (1024, 1), ("3d", 4), ("3d", 3)],
                                                 fast=set()))  # 7.9 CPU-s (fast lane: the force weights below)
def test_the_faces_equal_the_xla_engine(ny, steps, pair_2d):
    """Every cell (solid ones and the face rows included) and the force of every step, from noisy populations: even
    chunks (the pair in the loop) and odd ones (the even step and the streaming on the xla side first), on a padded
    view of two rows of x per plane, an unpadded one, and in 3D (face planes; the force's links wrapping around z)."""
    setup = setup_for(CYLINDER_3D, "float32") if ny == "3d" else _cylinder(24, ny)
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert engine.faces is not None and engine.block is None and engine.walls is None
    # ny = 1030: two rows of x per plane (planes.row_group), 12 planes: the force's box (rows 4-14) and the face rows
    # 22, 23 in the planes' second rows, rows 0, 1 in their first
    assert engine.group == (2 if ny == 1030 else 1), engine.note
    f0 = noisy_populations(setup, 1)
    f_ref, aux_ref = XlaEngine(setup).advance(jnp.array(f0), steps)
    f, aux = engine.advance(jnp.array(f0), steps)
    assert np.abs(np.asarray(f_ref) - f0).max() > 1e-2  # the steps did change the populations
    np.testing.assert_allclose(np.asarray(f), np.asarray(f_ref), rtol=0, atol=F_TOL)
    force, force_ref = np.asarray(aux["force"]), np.asarray(aux_ref["force"])
    assert force.shape == force_ref.shape == (steps, setup.lattice.d)
    np.testing.assert_allclose(force, force_ref, rtol=0, atol=FORCE_TOL * np.abs(force_ref).max())


def test_the_force_weights_give_the_momentum_exchange():
    """The dense weights on the populations after a dense step (streamed post-collision ones) against the momentum
    exchange over the links of the post-collision ones: the same sum (random float32 populations)."""
    setup = _cylinder(24, 40)
    forces = next(bc for bc in setup.boundaries if isinstance(bc, Forces))
    box = faces.ForceBox.of(forces, setup.shape, setup.lattice)
    post = jnp.asarray(np.random.default_rng(0).standard_normal((9, *setup.shape)))
    after = np.asarray(stream(post, setup.lattice))[:, box.lo[0]:box.lo[0] + box.shape[0],
                                                     box.lo[1]:box.lo[1] + box.shape[1]]
    dense = (box.weights * after[None]).sum(axis=(1, 2, 3)) + box.offset
    exchange = momentum_exchange(post, post, forces.link_dir, forces.link_src, forces.link_dst, setup.lattice)
    # float32 (x64 off): the two sums in different orders, 3e-8 relative measured
    np.testing.assert_allclose(dense, np.asarray(exchange), rtol=0, atol=3e-7 * np.abs(np.asarray(exchange)).max())
    assert np.count_nonzero(box.weights) > 0 and box.shape[0] < setup.shape[0]
    edge = np.zeros(setup.shape, bool)
    edge[0, 18:22] = True  # an obstacle on x = 0: the links from x = nx - 1 wrap, the box spans x whole
    forces = Forces.on(edge, setup.lattice)
    box = faces.ForceBox.of(forces, setup.shape, setup.lattice)
    assert box.lo[0] == 0 and box.shape[0] == setup.shape[0]
    dense = (box.weights * np.asarray(stream(post, setup.lattice))[:, :, box.lo[1]:box.lo[1] + box.shape[1]][None]
             ).sum(axis=(1, 2, 3)) + box.offset
    exchange = momentum_exchange(post, post, forces.link_dir, forces.link_src, forces.link_dst, setup.lattice)
    np.testing.assert_allclose(dense, np.asarray(exchange), rtol=0, atol=3e-7 * np.abs(np.asarray(exchange)).max())


def _gathers(jaxpr):
    """The operand shapes of every gather and scatter in ``jaxpr`` and the jaxprs inside it (scan, pjit, ...)."""
    return [tuple(e.invars[0].aval.shape) for e in equations(jaxpr) if e.primitive.name.startswith(("gather", "scatter"))]


def test_a_faces_chunk_for_a_tpu_gathers_no_cell_list(pair_2d):
    """The chunk of 4 steps lowered for a TPU: two Mosaic kernels in the loop (the pair), and every gather or scatter
    (the face rules' indexing) on at most the three face rows' populations, none on the grid or a list of cells."""
    setup = _cylinder()
    engine = PallasEngine(setup, platform="tpu", interpret=False)
    f = jax.ShapeDtypeStruct(engine.state_shape, setup.dtype)
    traced = engine.chunk_function(4).trace(f, spec_of(engine.params), spec_of(step_index(0)))
    assert traced.lower(lowering_platforms=("tpu",)).as_text().count("tpu_custom_call") == 2
    shapes = _gathers(traced.jaxpr.jaxpr)
    assert shapes and max(int(np.prod(s)) for s in shapes) == 9 * 3 * 1030, shapes  # the grid: 9 x 24 x 2048


def test_what_the_faces_take_and_what_auto_picks_on_a_tpu(pair_2d):
    """The default cylinder's conditions (nebb inlet, zero-gradient outflow, full-way obstacle, its force) on the pair,
    in 2D and 3D: auto picks pallas; a curved wall or the non-reflecting outlet keep xla, each with its reason."""
    assert faces.faces_unsupported(setup_for(CYLINDER_3D, "float32")) == ""
    assert auto_choice(setup_for(CYLINDER_3D, "float32"), "tpu")[0] == "pallas"
    assert faces.faces_unsupported(_cylinder()) == ""
    assert auto_choice(_cylinder(), "tpu") == ("pallas", auto_choice(_cylinder(), "tpu")[1])
    assert "faces" in auto_choice(_cylinder(), "tpu")[1]
    for extra, why in (("case.bounce_back=interpolated", "no other condition"),
                       ("case.outlet=characteristic", "no other condition")):
        other = _cylinder(24, 1030, extra)
        assert why in faces.faces_unsupported(other) and auto_choice(other, "tpu")[0] == "xla"


def test_the_default_cylinder_keeps_xla_on_a_tpu():
    """420 x 180 pads y to 1024 (5.7x) and holds 2.7 MiB: not the pair, so xla (faster there, docs/performance.md)."""
    setup = setup_for([], "float32")
    assert "MiB" in faces.faces_unsupported(setup) or "pad" in faces.faces_unsupported(setup)
    assert auto_choice(setup, "tpu")[0] == "xla"
    # 4x its cells per side (42 MiB, y padded 1.42x): the pair, from 40 MiB with boundaries (on the chip 3328 MLUPS
    # against xla's 2716); 1200 x 600 (25 MiB): xla (4030 against the pair's 2635)
    assert faces.faces_unsupported(setup_for(["grid.nx=1680", "grid.ny=720"], "float32")) == ""
    assert "under the 40 MiB" in faces.faces_unsupported(setup_for(["grid.nx=1200", "grid.ny=600"], "float32"))


# --- deviceless compiles (bash scripts/accel_env.sh; .venv-accel/bin/python -m pytest -m accel) ----------------


@pytest.mark.accel
def test_v5e_auto_runs_the_large_cylinder_on_the_pair(tmp_path):
    """``lbm inspect target=v5e`` on the cylinder at 3360 x 1440 with engine=auto: pallas, two Mosaic kernels in the loop
    body (the pair), the traffic of the padded pair (two rows of x per plane, y 1440 -> 1536: 1.07x the populations'
    72 B; 1.42x with one row per plane, y -> 2048, before the thirteenth session) plus the solid words (4 B per cell of
    the view) and the R + 1 rows the kernels with the solid bit read of each window that moves along x (what they
    declare, aa.ring_bytes: 1.34 on jax 0.10.2, 1.78 with one row per plane, which the chip ran at 5037 MLUPS x 128.5 B
    = 647 GB/s, 97 % of the probe; xla's 6.45), and the populations, their solid words and the force's weights planned
    (1.21 on jax 0.10.2; 1.61 with one row per plane: issue 38's 1.3x was missed there)."""
    from pathlib import Path

    from helpers.inspect_cli import inspect_json, installed

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=v5e", "grid.nx=3360", "grid.ny=1440", "steps=100")
    assert rec["engine"] == "pallas" and rec["steps_per_loop_body"] == 2
    assert [k["kind"] for k in rec["kernels"]].count("tpu_custom_call") == 2
    assert 1.25 <= rec["traffic_ratio"] <= 1.45, rec["traffic_ratio"]
    assert rec["planned_peak_over_population"] <= 1.3, rec["planned_peak_over_population"]
    hlo = (Path(tmp_path) / Path(rec["hlo_file"]).name).read_text()
    assert "tpu_custom_call" in hlo


@pytest.mark.accel
def test_v5e_auto_runs_the_d3q19_cylinder_on_the_pair(tmp_path):
    """``lbm inspect target=v5e`` on the D3Q19 cylinder at 256 x 128 x 128: pallas, the pair in the loop body, traffic
    ratio 1.15 and 1.08x the populations planned on jax 0.10.2 (the chip: 3606 MLUPS, 1.19x the box's time per cell)."""
    from helpers.inspect_cli import inspect_json, installed

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=v5e", "lattice=d3q19", "grid.nx=256", "grid.ny=128", "grid.nz=128", "steps=100")
    assert rec["engine"] == "pallas" and rec["steps_per_loop_body"] == 2
    assert [k["kind"] for k in rec["kernels"]].count("tpu_custom_call") == 2
    assert 1.0 <= rec["traffic_ratio"] <= 1.25, rec["traffic_ratio"]
    assert rec["planned_peak_over_population"] <= 1.2, rec["planned_peak_over_population"]


@pytest.mark.accel
@pytest.mark.parametrize("steps,most", [(100, 1.3), (101, None)])
def test_v5e_plan_of_a_narrow_d3q19_cylinder_is_within_the_memory_estimate(steps, most):
    """z = 32 fills a quarter of the TPU's lanes: the pair views the (60, 32) planes flat (lbm.engines.pallas.aa
    .flat_plane; 1920 cells padded to 2048), and an even chunk plans at most issue 38's 1.3x the populations
    (deviceless v5e, 128 x 60 x 32: 1.281x on jax 0.10.2, 1.297x on 0.12.0.1, the faces' rows and the force's box
    with its links per slot, 1.35x and 1.37x with its weights per component; 1.57x on (ny, nz) as they are;
    420 x 180 x 32: 1.18x, was 8.28x); an odd chunk, the even kernel and the swap pass in place, 1.335x on jax
    0.10.2 (its push step on the grid's shape planned 1.4x here, 5.4x at 420 x 180 x 32). Both within
    lbm.simulation.memory's estimate (the run's fit check reads it)."""
    from helpers.inspect_cli import installed, v5e_planned_over_populations
    from helpers.runs import run_config

    from lbm.simulation.memory import engine_factor

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    grid = ["case=cylinder", "lattice=d3q19", "grid.nx=128", "grid.ny=60", "grid.nz=32"]
    engine, planned = v5e_planned_over_populations(grid, steps)
    assert engine.faces is not None and engine.viewed and engine.state_shape == (19, 128, 16, 128)
    bound = engine_factor(run_config(*grid, f"steps={steps}", "output.every=100"), "tpu", "pallas")[1]
    assert planned <= bound and (most is None or planned <= most), (planned, bound)
