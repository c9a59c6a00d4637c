"""Half-way walls inside the in-place AA kernels (lbm.engines.pallas.walls): the link bits against the native
engine's rule, the pallas engine on a TPU target (interpret mode on the CPU) against the xla engine, and the compiled
chunk without the boundary plan's gathers and scatters.

Bounds as tests/engines/pallas/test_pallas_inplace.py: float32 2e-6 on populations of order 0.01 (measured at most
2.2e-9 on the cavity over 5 steps). The initial state carries noise on every cell, solid ones included: the kernels
must leave there what a dense step leaves, whatever the input held.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.lattices import slow_except
from helpers.runs import noisy_populations, pair_2d_at_every_size, setup_for

from lbm.boundaries.base import neighbour
from lbm.engines import auto_choice
from lbm.engines.base import spec_of
from lbm.engines.pallas import walls
from lbm.engines.pallas.engine import PallasEngine
from lbm.engines.plan import wall_records
from lbm.engines.timestep import step_index
from lbm.engines.xla import XlaEngine
from lbm.stages import CORE_STAGES, split_scope

TOL = 2e-6
CAVITY = ["case=cavity", "lattice=d3q19", "grid.nx=16", "grid.ny=10", "grid.nz=12"]
CASES = {"cavity_d3q19": CAVITY, "cavity_d3q19_trt": CAVITY + ["collision=trt"],
         "duct_d3q19": ["case=duct", "lattice=d3q19", "grid.nx=8", "grid.ny=6", "grid.nz=7"],
         "cavity_d3q27_cumulant": ["case=cavity", "lattice=d3q27", "grid.nx=16", "grid.ny=6", "grid.nz=7",
                                   "collision=cumulant"],
         "cavity_d2q9": ["case=cavity", "lattice=d2q9", "grid.nx=16", "grid.ny=1024"],
         "channel_d2q9": ["case=poiseuille", "lattice=d2q9", "grid.nx=16", "grid.ny=1024"],
         "cavity_d2q9_pad": ["case=cavity", "lattice=d2q9", "grid.nx=16", "grid.ny=1100"],
         "channel_d2q9_pad": ["case=poiseuille", "lattice=d2q9", "grid.nx=16", "grid.ny=1030"]}
"""The lid-driven cavity (resting walls and the moving lid, in one wall; two rows per block), with TRT; the duct
(resting walls on y and z, periodic along x, a body force; one row per block); D3Q27 with the cumulant operator
(the lid's six wall-term flags in a second word); in 2D (the pair on the view of y as (8, 128) rows, from 40 MiB of
populations: here on 16 x 1024, by :func:`pair_2d`) the cavity and the channel (walls at y, a body force); and with ny
off 1024 (``_pad``: the view pads y to 2048, the pads without bits, the streaming periodic at ny)."""


@pytest.fixture
def pair_2d(monkeypatch):
    """The 2D in-place pair (and so its walls) on the tests' small grids."""
    pair_2d_at_every_size(monkeypatch)


def _bits_rule(setup, scheme):
    """The kernels' alternative reads from their bits (the module doc of lbm.engines.pallas.walls), as the native
    engine's records of ``scheme`` write them: per fluid cell x and bit k (s = x - c_k solid) the slot a dense step
    fills (``copy_dst``: slot opp(k) of s after an even step, slot k of x after an odd one), the slot the kernels read
    instead (``copy_src``) and the wall term (``copy_add``)."""
    lat, shape = setup.lattice, setup.shape
    form, why = walls.kernel_form(setup)
    assert form is not None, why
    words = [np.asarray(w).reshape(-1).astype(np.int64) for w in (form.bits, form.wall_term_bits) if w is not None]
    word = words[0]
    n = word.size
    solid = (word >> lat.q) & 1 == 1
    term = walls.Walls(form, lat).term
    out = set()
    for k in range(1, lat.q):
        x = np.flatnonzero(((word >> k) & 1 == 1) & ~solid)
        s = neighbour(x, shape, -lat.c[k])
        opp = int(lat.opposite[k])
        add = np.zeros(x.size)
        if k in term:
            value, w, b = term[k]
            add = np.where((words[w][x] >> b) & 1 == 1, value, 0.0)
        dst, src = (opp * n + s, k * n + x) if scheme == "aa_even" else (k * n + x, opp * n + s)
        out |= {(int(a), int(b), round(float(c), 9)) for a, b, c in zip(dst, src, add, strict=True)}
    return out, solid


@pytest.mark.parametrize("case", ["cavity_d3q19", "duct_d3q19", "cavity_d3q27_cumulant", "cavity_d2q9"])
def test_the_link_bits_give_the_native_engines_wall_rule(case, pair_2d):
    """Per half-way link (solid s, direction j, fluid a = s + c_j) the native rule copies a's write slot of opp(j)
    into s's write slot of j, plus the wall term (lbm.engines.plan.wall_records); the kernels read that source where
    the dense step reads the copy. Pure numpy; the cavity's lid carries the wall term on two directions (D3Q19) or
    six (D3Q27: their flags in a second word)."""
    setup = setup_for(CASES[case], "float32")
    lat = setup.lattice
    for scheme in ("aa_even", "aa_odd"):
        rec = wall_records(lat, setup.shape, setup.boundaries, scheme)
        native = {(int(a), int(b), round(float(c), 9)) for a, b, c in
                  zip(rec["copy_dst"], rec["copy_src"], rec["copy_add"], strict=True)}
        kernel, solid = _bits_rule(setup, scheme)
        assert kernel == native and len(native) > 0
        assert any(c != 0 for *_, c in native) == case.startswith("cavity")  # the moving lid
    assert np.array_equal(solid, np.asarray(setup.solid).reshape(-1))



@pytest.mark.parametrize("name,steps", slow_except(
    [("cavity_d3q19", 3), ("cavity_d3q19", 4), ("cavity_d3q19_trt", 5), ("duct_d3q19", 4),
     ("cavity_d3q27_cumulant", 2), ("cavity_d2q9", 3), ("cavity_d2q9", 4), ("channel_d2q9", 4), ("cavity_d2q9_pad", 3),
     ("cavity_d2q9_pad", 4), ("channel_d2q9_pad", 4)], fast=set()))
def test_the_kernel_walls_equal_the_xla_engine(name, steps, pair_2d):
    """Odd chunks (an even step, then the streaming form on the xla side) and even ones (the fix kernel), a chunk of 5
    with a pair in the loop; every cell, solid ones included."""
    setup = setup_for(CASES[name], "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert engine.bulk.inplace and engine.walls is not None and engine.block is None
    f0 = noisy_populations(setup, 2)
    f_ref, aux_ref = XlaEngine(setup).advance(jnp.array(f0), steps)
    f, aux = engine.advance(jnp.array(f0), steps)
    assert np.abs(np.asarray(f_ref) - f0).max() > 1e-4  # the steps did change the populations
    np.testing.assert_allclose(np.asarray(f), np.asarray(f_ref), rtol=0, atol=TOL)
    assert aux == aux_ref == {}


@pytest.mark.slow  # 6 CPU-s
def test_the_kernel_walls_across_x_on_a_padded_view_wrap_y_at_ny(pair_2d):
    """Walls at x = 0 and nx - 1 and a block in between, y periodic at ny = 1030 (the view pads it to 1536 in planes of
    two rows of x, planes.row_group): the cells at y = 0 and ny - 1 stream across the wrap (the cavity's and the
    channel's walls at y never do), and the walls' windows across the grid's x edge take the edge planes' rows moved by
    one, against the xla engine (a wrap at P instead of ny: 2.4e-4)."""
    import dataclasses

    from lbm.boundaries import HalfwayBounceBack

    setup = setup_for(CASES["channel_d2q9_pad"], "float32")
    solid = np.zeros(setup.shape, bool)
    solid[0] = solid[-1] = True
    solid[6:9, 500:700] = True
    setup = dataclasses.replace(setup, solid=solid, boundaries=(HalfwayBounceBack.around(solid, setup.lattice),))
    engine = PallasEngine(setup, platform="tpu", interpret=True)
    assert engine.walls is not None and "2 rows of x, each padded from 1030 to 1536" in engine.note
    f0 = noisy_populations(setup, 2)
    f_ref, _ = XlaEngine(setup).advance(jnp.array(f0), 4)
    f, _ = engine.advance(jnp.array(f0), 4)
    assert np.abs(np.asarray(f_ref) - f0).max() > 1e-3
    np.testing.assert_allclose(np.asarray(f), np.asarray(f_ref), rtol=0, atol=TOL)


def _lowered_for_tpu(args, steps=4):
    """The pallas engine's chunk lowered for a TPU (Mosaic kernels, no libtpu needed), as StableHLO text."""
    setup = setup_for(args, "float32")
    engine = PallasEngine(setup, platform="tpu", interpret=False)
    f = jax.ShapeDtypeStruct(engine.state_shape, setup.dtype)  # 3D planes of 10 x 12: flat (planes.flat_plane)
    traced = engine.chunk_function(steps).trace(f, spec_of(engine.params), spec_of(step_index(0)))
    return engine, traced.lower(lowering_platforms=("tpu",)).as_text()


def test_a_walled_chunk_for_a_tpu_has_no_gather_or_scatter():
    """The cavity's chunk of 4 steps: the first pair, the pair in the loop, the fix kernel; no boundary plan."""
    engine, text = _lowered_for_tpu(["case=cavity", "lattice=d3q19", "grid.nx=16", "grid.ny=8", "grid.nz=128"])
    assert engine.walls is not None
    assert text.count("tpu_custom_call") == 5
    assert "gather" not in text and "scatter" not in text
    # the kernels' names give the profiler their stages: the pair's the bulk's and the walls', the fix kernel's the walls'
    names = set(re.findall(r'kernel_name = "([^"]*)"', text))
    assert {split_scope(n) for n in names} == {(*CORE_STAGES, "bounce_back"), ("bounce_back",)}, names


@pytest.mark.slow
def test_a_chunk_with_an_inlet_and_a_half_way_obstacle_keeps_the_boundary_plan():
    """Neither the kernel walls (one half-way wall, no other condition) nor the faces (a full-way obstacle) take it."""
    engine, text = _lowered_for_tpu(["case=cylinder", "lattice=d3q19", "grid.nx=16", "grid.ny=10", "grid.nz=12",
                                     "case.bounce_back=halfway"])
    assert engine.walls is None and engine.faces is None and engine.block is not None
    assert "gather" in text and "scatter" in text


def test_what_the_kernel_walls_take_and_what_auto_picks_on_a_tpu(monkeypatch):
    cavity = setup_for(["case=cavity", "lattice=d3q19", "grid.nx=16", "grid.ny=8", "grid.nz=128"], "float32")
    assert walls.walls_unsupported(cavity) == ""
    assert auto_choice(cavity, "tpu")[0] == "pallas" and "walls" in auto_choice(cavity, "tpu")[1]
    cylinder = setup_for(["case=cylinder", "lattice=d3q19", "grid.nx=16", "grid.ny=10", "grid.nz=12"], "float32")
    assert "one half-way wall" in walls.walls_unsupported(cylinder)  # the faces take it (tests/.../test_pallas_faces.py)
    assert auto_choice(cylinder, "tpu")[0] == "pallas" and "faces" in auto_choice(cylinder, "tpu")[1]
    big = setup_for(["case=duct", "lattice=d3q19", "grid.nx=8", "grid.ny=512", "grid.nz=512"], "float32")
    assert "do not fit" in walls.walls_unsupported(big) and auto_choice(big, "tpu")[0] == "xla"
    cavity2d = setup_for(["case=cavity", "grid.nx=16", "grid.ny=12"], "float32")
    assert "under the 40 MiB" in walls.walls_unsupported(cavity2d) and auto_choice(cavity2d, "tpu")[0] == "xla"
    pair = setup_for(CASES["cavity_d2q9"], "float32")  # 0.6 MiB: below 40 MiB xla's step stays in the VMEM
    assert "under the 40 MiB" in walls.walls_unsupported(pair) and auto_choice(pair, "tpu")[0] == "xla"
    from lbm.engines.pallas import aa

    monkeypatch.setattr(aa, "AA2D_MIN_BYTES", 0)
    assert walls.walls_unsupported(pair) == "" and auto_choice(pair, "tpu")[0] == "pallas"
    padded = setup_for(CASES["cavity_d2q9_pad"], "float32")  # y padded from 1100 to 2048 (1.86x): the pair
    assert walls.walls_unsupported(padded) == "" and auto_choice(padded, "tpu")[0] == "pallas"
    assert "more than its 2.0x" in walls.walls_unsupported(cavity2d) and auto_choice(cavity2d, "tpu")[0] == "xla"


# --- deviceless compiles (bash scripts/accel_env.sh; .venv-accel/bin/python -m pytest -m accel) ----------------


@pytest.mark.accel
@pytest.mark.parametrize("steps", [10, 11])
def test_v5e_walled_chunk_holds_the_populations_once(steps):
    """Planned memory of the compiled chunk (the D3Q19 duct 128^3, kernel walls): the populations once plus the link
    bits (4 B against 76 B of populations per cell: 1.053 on jax 0.10.2 and 0.12.0.1), the fix kernel ending the chunk
    in place, an odd chunk too: its lone step is the even kernel and the swap pass (the streaming form on the xla side
    that it ran before wrote a second array: 2.058 on jax 0.10.2, 2.269 on 0.12.0.1)."""
    from helpers.inspect_cli import installed, v5e_planned_over_populations

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    engine, planned = v5e_planned_over_populations(
        ["case=duct", "lattice=d3q19", "grid.nx=128", "grid.ny=128", "grid.nz=128"], steps)
    assert engine.walls is not None
    assert 1.043 <= planned <= 1.063


@pytest.mark.accel
def test_v5e_auto_runs_the_walled_cavity_in_the_two_inplace_kernels(tmp_path):
    """``lbm inspect target=v5e`` on the D3Q19 cavity with engine=auto: pallas, the loop body two Mosaic kernels (the
    pair), and the compiled chunk without a gather or a scatter (the boundary plan's)."""
    from pathlib import Path

    from helpers.inspect_cli import inspect_json, installed

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    rec = inspect_json(tmp_path, "target=v5e", "case=cavity", "lattice=d3q19", "grid.nx=64", "grid.ny=64",
                       "grid.nz=64", "steps=100")
    assert rec["engine"] == "pallas" and rec["steps_per_loop_body"] == 2
    assert [k["kind"] for k in rec["kernels"]].count("tpu_custom_call") == 2
    hlo = (Path(tmp_path) / Path(rec["hlo_file"]).name).read_text()
    assert "tpu_custom_call" in hlo and "gather" not in hlo and "scatter" not in hlo


@pytest.mark.accel
def test_v5e_inspect_of_a_3d_cavity_on_flat_planes_says_so_and_plans_near_the_populations(tmp_path):
    """The D3Q19 cavity 66^3: its planes of 4356 cells padded to 5120 (the tiles of (66, 66) would take 72 x 128 =
    9216); inspect's report names the layout and why auto picked pallas, and the chunk plans within the memory
    estimate's 1.35 times that padding (1.287x, deviceless v5e, jax 0.10.2 and 0.12.0.1; 1.237x with the walls' words
    held in the view, twelfth session)."""
    import json

    from helpers.inspect_cli import installed, run_inspect

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    res = run_inspect("target=v5e", "case=cavity", "lattice=d3q19", "grid.nx=66", "grid.ny=66", "grid.nz=66",
                      "steps=100", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "engine: the in-place pair on flat planes padded from 4356 to 5120 cells (1.175x" in res.stdout
    assert "auto on a TPU: pallas" in res.stdout
    rec = json.loads((tmp_path / "inspect.json").read_text())
    assert rec["engine"] == "pallas" and rec["planned_peak_over_population"] <= 1.35 * 5120 / 4356
    # the model counts what the two walled kernels declare (aa.ring_bytes): every slot's R written rows of 5120 cells
    # per block, and R + 1 read rows for the 10 slots that move along x, not their operands whole (R = 6 at 66^3)
    from lbm.engines.pallas.walls import walls_rows
    from lbm.lattice import D3Q19

    rows = walls_rows(D3Q19, (66, 66, 66))
    assert rows == 6
    kernels = [k for k in rec["kernels"] if k["kind"] == "tpu_custom_call"]
    written = 19 * 5120 * 4 / 66**2 / 2  # each kernel, per cell and step of the two-step loop body
    assert [k["written_bytes_per_cell_step"] for k in kernels] == pytest.approx([written] * 2, rel=1e-9)
    assert [k["read_bytes_per_cell_step"] for k in kernels] == pytest.approx(
        [written * (19 * rows + 10) / (19 * rows)] * 2, rel=1e-9)


def test_the_walled_kernels_take_two_rows_where_the_budget_leaves_one():
    """One row per block reads every moving window twice (R + 1 rows for R): at D3Q19 258 x 264 x 384 (whole tiles,
    rows of 7.3 MiB) the walled kernels take R = 2 within the largest block, and R + 1 rows still fit it; where the
    budget gives more rows (256^3: R = 2; 258^3 on flat planes of 67584 cells, 4.9 MiB) nothing changes, and a grid
    with no such divisor keeps R = 1."""
    from lbm.engines.pallas import aa
    from lbm.engines.pallas.kernels import vmem_bytes
    from lbm.engines.pallas.walls import walls_rows
    from lbm.lattice import D3Q19

    assert aa.aa_rows(D3Q19, (258, 264, 384), 4, extra=1) == 1
    assert walls_rows(D3Q19, (258, 264, 384)) == 2
    assert 3 * vmem_bytes(19, (1, 264, 384), 4) <= aa.AA_BLOCK_MAX
    assert walls_rows(D3Q19, (258, 258, 258)) == aa.aa_rows(D3Q19, (258, 258, 258), 4, extra=1) == 2
    assert walls_rows(D3Q19, (256, 256, 256)) == aa.aa_rows(D3Q19, (256, 256, 256), 4, extra=1) == 2
    assert walls_rows(D3Q19, (257, 258, 258)) == 1  # 257 is prime: no R >= 2 divides it


@pytest.mark.accel
def test_v5e_inspect_of_a_2d_cavity_between_40_and_128_mib_plans_the_pair_within_the_estimate(tmp_path):
    """``lbm inspect target=v5e`` on the D2Q9 cavity 1500^2 (77 MiB; measured on the chip: the pair 8140 MLUPS against
    xla's 2151) with engine=auto: pallas on the pair in planes of two rows of x, moving Y / ny = 1536 / 1500 times the
    populations' bytes (2048 / 1500 in planes of one), and planning (1.081x, jax 0.10.2) within what the memory
    estimate counts for it (the pair's 1.2 times that padding: from 40 MiB the pair runs, walls or not)."""
    from helpers.inspect_cli import inspect_json, installed
    from helpers.runs import run_config

    from lbm.simulation.memory import PALLAS_PAIR_2D, engine_factor

    if not installed("libtpu"):
        pytest.skip("libtpu is not installed (bash scripts/accel_env.sh)")
    grid = ("case=cavity", "lattice=d2q9", "grid.nx=1500", "grid.ny=1500", "steps=10")
    rec = inspect_json(tmp_path, "target=v5e", *grid, "engine=auto")
    assert rec["engine"] == "pallas" and rec["traffic_ratio"] == pytest.approx(1536 / 1500, abs=0.01)
    estimate = engine_factor(run_config(*grid), "tpu", "pallas")[1]
    assert estimate == pytest.approx(PALLAS_PAIR_2D * 1536 / 1500)
    assert 1536 / 1500 <= rec["planned_peak_over_population"] <= estimate
