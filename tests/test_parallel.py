"""Sharded runs equal the 1-device run: every case on 2, 4 and 8 forced CPU devices, 1D, 2D and 3D meshes, both modes.

Forced host devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``) must be set before JAX
starts, so the sharded work runs in subprocesses (tests/helpers/parallel_worker.py), each printing one JSON line.

Bounds: float64 populations after a few steps differ from the 1-device run by rounding only (measured over
every slow case here: <= 7.8e-16 for populations, 8.9e-16 on the sharded pallas engine, and <= 3.8e-15 for
forces, whose sum over blocks is reordered); ROUNDING (2e-15) and FORCE_ROUNDING (1e-14) are 2-3x that, and a
resumed or re-placed run is bitwise equal. A wrong halo, a seam or a boundary condition on the wrong block shows at 1e-5 and above
(populations deviate from their rest weights by ~u_lattice * w_i).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import REPO, TESTS

import lbm

WORKER = TESTS / "helpers" / "parallel_worker.py"
ROUNDING = 2e-15
"""Populations, sharded against one device (float64; measured <= 8.9e-16)."""
FORCE_ROUNDING = 1e-14
"""Forces, summed over blocks in another order (float64; measured <= 3.8e-15)."""
FAST_ROUNDING = 1.5e-16
"""The bound of the fast-lane representative (3 float64 steps; measured: populations 0, forces 5.6e-17)."""


def forced(devices: int) -> dict[str, str]:
    """The environment of a subprocess with ``devices`` forced CPU devices and this checkout's lbm."""
    env = dict(os.environ)
    # the suite's own XLA flags (tests/conftest.py) kept
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def worker(task: str, payload: dict, devices: int = 8, timeout: int = 600) -> dict:
    """Run one task of tests/helpers/parallel_worker.py on forced devices and return its JSON."""
    done = subprocess.run([sys.executable, str(WORKER), task, json.dumps(payload)], env=forced(devices),
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


CYL = ["case=cylinder", "grid.nx=64", "grid.ny=32"]
CASES_2D = {
    "cylinder": CYL,
    "cylinder-halfway": CYL + ["case.bounce_back=halfway"],
    "cavity": ["case=cavity", "grid.nx=32", "grid.ny=32"],
    "poiseuille": ["case=poiseuille", "grid.nx=32", "grid.ny=16"],
    "taylor_green": ["case=taylor_green", "grid.nx=32", "grid.ny=32"],
}


def check_equal(result: dict) -> None:
    assert result, "no comparisons ran"
    for key, r in result.items():
        assert r["f"] <= ROUNDING, (key, r)
        assert r["force"] <= FORCE_ROUNDING, (key, r)
        assert "halo" in r["pieces"], key


SLOW_EQUALITY: dict[str, dict] = {}
"""The slow lane's ``equality`` payloads, by the name of the test that reads the result (filled beside each test)."""
SLOW_RUNS: dict[str, list] = {}
"""The slow lane's ``run_dirs`` runs ([name, overrides], in order), by the name of the test that reads them: each
test's runs write into ``slow_runs_root / <test name> / <run name>`` ({root} in an override: that test's folder)."""


@pytest.fixture(scope="module")
def slow_runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where slow_batch's run_dirs payloads write their run directories (one folder per test)."""
    return tmp_path_factory.mktemp("parallel_runs")


@pytest.fixture(scope="module")
def slow_batch(request: pytest.FixtureRequest, slow_runs_root: Path) -> dict:
    """The results of SLOW_EQUALITY's and SLOW_RUNS's payloads that this session selected, all in one subprocess on
    8 forced devices (one start of JAX and lbm, the programs every payload compiles (set-up, references) compiled
    once, and each 1-device reference run once (tests/helpers/parallel_worker.reference)), not a subprocess per
    test: the tests that read it are one xdist group, so one worker runs it. The seven equality tests: 103.0 -> 89.3
    CPU-s, cold, one process; the three tests of run directories joined them (a process of their own each: 2-3 CPU-s
    of starting JAX and lbm)."""
    chosen = {item.originalname for item in request.session.items if item.module is request.module}
    payloads = {name: ["equality", payload] for name, payload in SLOW_EQUALITY.items() if name in chosen}
    for name, runs in SLOW_RUNS.items():
        if name in chosen:
            root = str(slow_runs_root / name)
            payloads[name] = ["run_dirs", {"root": root, "runs": [
                [run, [o.replace("{root}", root) for o in overrides]] for run, overrides in runs]}]
    return worker("batch", payloads, timeout=3600)


slow_batch_group = pytest.mark.xdist_group("parallel_slow_batch")


SLOW_EQUALITY["test_every_case_on_1d_and_2d_meshes_equals_one_device"] = {"steps": 6, "cases": [
    ["cylinder", CASES_2D["cylinder"], [[4], [2, 2]], ["fused"]],
    ["cylinder-halfway", CASES_2D["cylinder-halfway"], [[2, 2]], ["fused", "instrumented"]],
    ["cavity", CASES_2D["cavity"], [[4, 2]], ["fused"]],
    ["poiseuille", CASES_2D["poiseuille"], [[2]], ["fused"]],
    ["taylor_green", CASES_2D["taylor_green"], [[8]], ["fused"]],
]}  # the Pallas kernel on each block: test_sharded_pallas_equals_the_one_device_pallas_run_bitwise


@pytest.mark.slow
@slow_batch_group
def test_every_case_on_1d_and_2d_meshes_equals_one_device(slow_batch):
    """A representative set: each case once, 1D and 2D meshes, 2, 4 and 8 devices, both modes."""
    result = slow_batch["test_every_case_on_1d_and_2d_meshes_equals_one_device"]
    check_equal(result)
    # the halo sits before the first stage that reads across a face
    assert result["cylinder|4|fused"]["pieces"][-3:] == ["halo", "forces", "stream"]
    assert result["cylinder-halfway|2x2|fused"]["pieces"][-4:] == ["halo", "bounce_back", "forces", "stream"]
    assert result["taylor_green|8|fused"]["pieces"][-2:] == ["halo", "stream"]


# [2], [4], [2, 2], [4, 2] and [8] run in the test above; instrumented mode: cylinder-halfway above, the outlets
# and walls of test_every_condition_has_a_dense_block_form_in_both_modes, the cavity here
SLOW_EQUALITY["test_every_case_on_more_meshes_and_3d"] = {"steps": 6, "cases": [
    *([name, CASES_2D[name], [[1, 4]], ["fused"]] for name in ("cylinder", "poiseuille")),
    ["cavity-instrumented", CASES_2D["cavity"], [[4]], ["instrumented"]],
    ["cylinder-3d", ["case=cylinder", "lattice=d3q19", "grid.nx=32", "grid.ny=16", "grid.nz=8"], [[2, 2, 2]], ["fused"]],
    ["cavity-3d", ["case=cavity", "lattice=d3q19", "grid.nx=16", "grid.ny=16", "grid.nz=16"], [[2, 2, 2]], ["fused"]]]}


@pytest.mark.slow
@slow_batch_group
def test_every_case_on_more_meshes_and_3d(slow_batch):
    """Meshes split across y (the cylinder's inlet and outlet on every block, the channel's walls and force on the
    outer blocks), instrumented mode on the cavity's moving lid, and D3Q19 on 2x2x2. With the tests above and below,
    each case meets 1D and 2D meshes, and both modes are run on walls, obstacles and outlets."""
    check_equal(slow_batch["test_every_case_on_more_meshes_and_3d"])


SLOW_EQUALITY["test_sharded_pallas_equals_the_one_device_pallas_run_bitwise"] = {"steps": 5, "same": True, "cases": [
    ["tg-pallas", ["case=taylor_green", "grid.nx=16", "grid.ny=16"], [[8]], ["fused"], "pallas"],
    ["tg3d-pallas", ["case=taylor_green", "lattice=d3q19", "grid.nx=8", "grid.ny=8", "grid.nz=8"], [[2, 2, 2]],
     ["fused"], "pallas"],
    ["cavity-pallas", ["case=cavity", "grid.nx=16", "grid.ny=16"], [[2, 2]], ["fused"], "pallas"]]}


@pytest.mark.slow
@slow_batch_group
def test_sharded_pallas_equals_the_one_device_pallas_run_bitwise(slow_batch):
    """The sharded Pallas engine does the 1-device kernel's arithmetic on every cell and only moves populations
    across faces: equal to the 1-device Pallas run to the last bit, on 1D, 2D and 3D meshes (and to the xla run to
    rounding). With boundary conditions (the cavity's walls and lid, by the plan per block) too."""
    result = slow_batch["test_sharded_pallas_equals_the_one_device_pallas_run_bitwise"]
    check_equal(result)
    for key, r in result.items():
        assert r["engine"] == "ShardedPallasEngine", (key, r)
        assert r["same"] == 0.0, (key, r)  # the cavity's boundary cells too (the same stage functions)


# The Pallas kernel on every block WITH boundary conditions (interpret mode on CPU): obstacles straddling a seam
# (the 40x24 cylinder spans x 9..11 and y 11..13: seams at x = 10 on 4 blocks, at y = 12 on 2x2), inlet and
# outlet faces on the blocks holding them, walls across seams, forces summed over blocks.
# Deliberately dropping one block's boundary cells from its plan makes the populations differ by 1e-2 and the
# force by 0.1 (measured), far above these bounds.
PALLAS_BC = {
    "cylinder": ["case=cylinder", "grid.nx=40", "grid.ny=24"],
    "cylinder-halfway-characteristic": ["case=cylinder", "grid.nx=40", "grid.ny=24", "case.bounce_back=halfway",
                                        "case.outlet=characteristic"],
    "poiseuille-interpolated": ["case=poiseuille", "grid.nx=16", "grid.ny=16", "case.wall_fraction=0.3"],
}


def check_pallas_bc(result: dict, bound: float, force_bound: float) -> None:
    assert result, "no comparisons ran"
    for key, r in result.items():
        assert r["engine"] == "ShardedPallasEngine", (key, r)
        assert r["f"] <= bound and r["force"] <= force_bound, (key, r)


ODD_MESHES = {"cylinder": [[4]], "cylinder-halfway-characteristic": [[2, 2]],
              "poiseuille-interpolated": [[1, 4]]}  # the cylinder on 8 blocks and 2x2 in the next test; the cavity
# (the moving lid) on 2x2 in test_sharded_pallas_equals_the_one_device_pallas_run_bitwise
SLOW_EQUALITY["test_sharded_pallas_with_boundary_conditions_equals_one_device_odd_steps"] = {"steps": 5, "cases": [
    [name, PALLAS_BC[name], mesh, ["fused"], "pallas"] for name, mesh in ODD_MESHES.items()]}


@pytest.mark.slow
@slow_batch_group
def test_sharded_pallas_with_boundary_conditions_equals_one_device_odd_steps(slow_batch):
    """1D and 2D meshes, 5 steps, float64, against the 1-device xla run (fields and forces, to rounding)."""
    check_pallas_bc(slow_batch["test_sharded_pallas_with_boundary_conditions_equals_one_device_odd_steps"],
                    ROUNDING, FORCE_ROUNDING)


# BGK, the Zou-He pressure outlet, linear BFL, U_mean 0.05 (the case's defaults are its validated settings)
ST = ["case=schafer_turek", "case.cells_per_diameter=4", "collision=bgk", "case.outlet=zou_he", "case.wall=bfl",
      "flow.tau=null"]


SLOW_EQUALITY["test_sharded_pallas_with_boundary_conditions_even_steps_3d_and_float32"] = {
    "steps": 6, "precisions": {"cylinder-float32": "float32"}, "cases": [
        ["cylinder", PALLAS_BC["cylinder"], [[8]], ["fused"], "pallas"],
        ["cylinder-3d", ["case=cylinder", "lattice=d3q19", "grid.nx=16", "grid.ny=12", "grid.nz=8",
                         "case.bounce_back=halfway"], [[2, 2, 2]], ["fused"], "pallas"],
        ["duct", ["case=duct", "lattice=d3q19", "grid.nx=4", "grid.ny=8", "grid.nz=8"], [[1, 2, 2]], ["fused"],
         "pallas"],
        ["schafer_turek", ST, [[1, 2]], ["fused"], "pallas"],
        ["cylinder-float32", PALLAS_BC["cylinder"], [[2, 2]], ["fused"], "pallas"]]}


@pytest.mark.slow
@slow_batch_group
def test_sharded_pallas_with_boundary_conditions_even_steps_3d_and_float32(slow_batch):
    """Even step counts on 8 blocks and in 3D (the cylinder on 2x2x2, the duct on 1x2x2, Schafer-Turek's
    interpolated cylinder and pressure outlet on 1x2), float64; then float32 on a 2x2 mesh: 2e-6, the bound
    tests/engines/pallas/test_engines_pallas.py holds the 1-device Pallas engine to (measured here: 4.8e-7 after 6 steps)."""
    result = dict(slow_batch["test_sharded_pallas_with_boundary_conditions_even_steps_3d_and_float32"])
    float32 = {k: result.pop(k) for k in list(result) if k.startswith("cylinder-float32")}
    assert len(result) == 4 and len(float32) == 1
    check_pallas_bc(result, ROUNDING, FORCE_ROUNDING)
    check_pallas_bc(float32, 2e-6, 1e-6)  # float32 forces: measured 3.2e-7


DENSE_FORMS = {  # the conditions whose mesh forms read beyond a plain mask (their on_mesh)
    # Zou-He pressure outlet, inlet, half-way walls, linear BFL cylinder (straddling the seam at y = 9), forces
    "schafer_turek": (ST, [[1, 2]]),
    # the parabolic wall: 4 of its links read rho, u at a far cell in the other block (exchanged by the halo)
    "schafer_turek-parabolic": (ST + ["collision=trt", "case.wall=parabolic"], [[1, 2]]),
    # the pressure outlet on the last block along x (the cylinder's outflow replaced: schafer_turek's nx is odd)
    "cylinder-pressure": (PALLAS_BC["cylinder"], [[4]]),
    # the non-reflecting outlet (reads the column nx - 2) on the last block along x, cylinder across seams
    "cylinder-characteristic": (PALLAS_BC["cylinder-halfway-characteristic"][:3] + ["case.outlet=characteristic"],
                                [[4], [2, 2]]),
    # BFL walls at q = 0.3: seams across the walls (1x4) and diagonal links across the x seams (4)
    "poiseuille-interpolated": (PALLAS_BC["poiseuille-interpolated"], [[1, 4], [4]]),
    # 2D-3's sine-ramped inflow, 5 steps into the ramp (the inflow without its time factor differs at 1e-3)
    "schafer_turek-2D-3": (ST + ["case.variant=2D-3"], [[1, 2]]),
}


# each condition in both modes over the set, not every mesh in both (the suite's time budget): the parabolic
# wall (its halo carries rho and u) and the characteristic outlet on 2x2 in both modes, the rest in one
DENSE_MODES = {"schafer_turek": ["instrumented"], "schafer_turek-parabolic": ["fused", "instrumented"],
               "cylinder-pressure": ["fused"], "cylinder-characteristic": ["fused", "instrumented"],
               "poiseuille-interpolated": ["fused"], "schafer_turek-2D-3": ["fused"]}
DENSE_MESHES_KEPT = {"cylinder-characteristic": [[2, 2]]}
SLOW_EQUALITY["test_every_condition_has_a_dense_block_form_in_both_modes"] = {
    "steps": 5, "changes": {"cylinder-pressure": "pressure_outlet"},
    "cases": [[name, ov, DENSE_MESHES_KEPT.get(name, meshes), DENSE_MODES[name]]
              for name, (ov, meshes) in DENSE_FORMS.items()]}


@pytest.mark.slow
@slow_batch_group
def test_every_condition_has_a_dense_block_form_in_both_modes(slow_batch):
    """Pressure and characteristic outlets, interpolated and parabolic walls, the ramped inlet: the dense sharded
    engines (fused and instrumented, the halo its own piece) equal to one device to rounding."""
    result = slow_batch["test_every_condition_has_a_dense_block_form_in_both_modes"]
    check_equal(result)
    assert len(result) == 9
    for key, r in result.items():
        assert r["engine"] == ("ShardedEngine" if key.endswith("fused") else "ShardedInstrumentedEngine"), (key, r)
        assert r["pieces"].count("halo") == 1, (key, r)


# the pressure outlet, ramp-free inlet, half-way walls and a parabolic wall across the seam; the characteristic
# outlet's plan runs in the sharded pallas tests (the same per-block plan)
SLOW_EQUALITY["test_xla_per_block_plan_equals_one_device"] = {"steps": 5, "cases": [
    ["schafer_turek-parabolic", DENSE_FORMS["schafer_turek-parabolic"][0], [[1, 2]], ["fused"], "plan"]]}


@pytest.mark.slow
@slow_batch_group
def test_xla_per_block_plan_equals_one_device(slow_batch):
    """The fallback for conditions without a dense block form (the xla step on each block as a periodic grid, the
    boundary cells by the per-block plan), built directly: equal to one device to rounding."""
    result = slow_batch["test_xla_per_block_plan_equals_one_device"]
    assert len(result) == 1
    for key, r in result.items():
        assert r["engine"] == "ShardedPlanEngine", (key, r)
        assert r["f"] <= ROUNDING and r["force"] <= FORCE_ROUNDING, (key, r)


REFUSED = [["parallel.devices=16", "grid.nx=416"], ["parallel.devices=4", "parallel.mesh=[2,3]"],
           ["parallel.devices=4", "grid.nx=422"], ["parallel.devices=4", "engine=native"],
           ["parallel.devices=2", "mode=instrumented"], ["parallel.devices=-1", "parallel.mesh=[4,2]"]]


@pytest.fixture(scope="module")
def fast_lane_tasks() -> dict:
    """The fast lane's sharded work in one subprocess on 8 forced devices (one start of JAX and lbm, not three): the
    cylinder on 2 blocks, the vortex across 4, the refusals of bad parallel settings."""
    cylinder = [["cylinder", ["case=cylinder", "grid.nx=40", "grid.ny=24"], [[2]], ["fused"]]]
    return worker("tasks", {"equality": {"steps": 3, "cases": cylinder}, "vortex": {"steps": 500},
                            "refusals": {"overrides": REFUSED}})


@pytest.mark.xdist_group("parallel_fast_lane")
def test_fast_lane_sharded_run_with_boundary_conditions(fast_lane_tasks):
    """The fast lane's representative of the mesh engines with boundary conditions: the cylinder (inlet, outflow,
    wall and forces on the blocks holding them) by the dense block forms, 3 float64 steps on 2 blocks against one
    device. (The Pallas kernel with boundary conditions: tests/engines/pallas/test_engines_pallas.py's fast case, the cavity.)"""
    result = fast_lane_tasks["equality"]
    assert result["cylinder|2|fused"]["engine"] == "ShardedEngine"
    for key, r in result.items():
        assert r["f"] <= FAST_ROUNDING and r["force"] <= FAST_ROUNDING, (key, r)


@pytest.mark.xdist_group("parallel_fast_lane")
def test_a_vortex_crosses_block_faces_without_a_seam(fast_lane_tasks):
    r = fast_lane_tasks["vortex"]
    assert r["f"] <= 3e-15 and r["u"] <= 3e-15, r  # 500 steps of float64 rounding (measured 1.3e-15, 1.2e-15)
    # the vortex started at x = 12 in block 0 and is carried at u = 0.05 across the face at x = 15.5
    assert 30 <= r["centre_x"] <= 45, r
    # vorticity changes no faster across the block faces than anywhere else
    assert r["face_jump"] <= r["interior_jump"], r


@pytest.mark.xdist_group("parallel_fast_lane")
def test_bad_parallel_settings_are_one_line_errors(fast_lane_tasks):
    r = fast_lane_tasks["refusals"]
    assert "at most 8" in r["parallel.devices=16 grid.nx=416"]
    assert "product is parallel.devices=4 (it is 6)" in r["parallel.devices=4 parallel.mesh=[2,3]"]
    assert "multiple of 4" in r["parallel.devices=4 grid.nx=422"]
    assert "native engine is single-device" in r["parallel.devices=4 engine=native"]
    assert r["parallel.devices=2 mode=instrumented"] is None and r["parallel.devices=-1 parallel.mesh=[4,2]"] is None
    assert all("\n" not in m for m in r.values() if m)


@pytest.mark.slow  # a process of its own (1.3 CPU-s cold): the fast lane has the one-line refusals of bad parallel
# settings (test_bad_parallel_settings_are_one_line_errors) and a refusal's exit 2 in a real process
# (tests/test_cli.py::test_bad_input_exit_code_in_a_real_process)
def test_bad_parallel_settings_exit_2_on_the_command_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lbm", "run", "parallel.devices=4", "steps=2", "grid.nx=64", "grid.ny=32",
                           "hydra.run.dir=" + str(tmp_path / "run")], env=forced(2),
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("lbm: error: parallel.devices=4 is invalid: expected at most 2")
    assert "Traceback" not in done.stderr


SLOW_RUNS["test_instrumented_mode_runs_the_characteristic_outlet_on_several_devices"] = [
    ["run", ["parallel.devices=2", "mode=instrumented", "steps=2", "case=cylinder", "grid.nx=40", "grid.ny=20",
             "case.outlet=characteristic", "output.progress=none", "output.plots=false"]]]


@pytest.mark.slow
@slow_batch_group
def test_instrumented_mode_runs_the_characteristic_outlet_on_several_devices(slow_batch, slow_runs_root):
    """Once refused (no dense block form): now the instrumented sharded engine runs it."""
    name = "test_instrumented_mode_runs_the_characteristic_outlet_on_several_devices"
    assert slow_batch[name]["run"].get("status") == "completed", slow_batch[name]
    metrics = json.loads((slow_runs_root / name / "run" / "metrics.json").read_text())
    assert metrics["status"] == "completed" and (metrics["engine"], metrics["mode"]) == ("xla", "instrumented"), metrics
    assert metrics["parallel"]["partitioner"] == "shard_map", metrics["parallel"]


def test_instrumented_mode_without_a_dense_block_form_is_a_one_line_error():
    """A condition the sharded engines do not know (here: one defined on the spot) is refused in one line."""
    from lbm.boundaries.base import BoundaryCondition, pytree_dataclass
    from lbm.engines import EngineUnavailable
    from lbm.engines.sharded import make_sharded
    from lbm.simulation import prepare

    @pytree_dataclass
    class Unknown(BoundaryCondition):
        solid: np.ndarray
        stage = "bounce_back"

    _, setup = prepare(["case=taylor_green", "grid.nx=8", "grid.ny=8"])
    unknown = Unknown(solid=np.zeros(setup.shape, bool))
    with pytest.raises(EngineUnavailable) as err:
        make_sharded(dataclasses.replace(setup, boundaries=(unknown,)), (1, 1), mode="instrumented")
    message = str(err.value)
    assert "\n" not in message and message.startswith("mode=instrumented on several devices")
    assert "no mesh form of Unknown" in message and "mode=fused" in message


CKPT_BASE = ["case=cavity", "grid.nx=32", "grid.ny=32", "steps=40", "precision=float64", "output.progress=none",
             "output.every=20", "engine=xla"]
CKPT_MESH = ["parallel.devices=4", "parallel.mesh=[2,2]"]
# in order, in one process: each run's configuration is loaded (the resumes validated) after the runs before it
SLOW_RUNS["test_run_directory_checkpoints_and_resume"] = [
    ["one", CKPT_BASE + ["output.vtk=true"]],
    ["full", CKPT_BASE + CKPT_MESH + ["checkpoint.every=20", "checkpoint.keep=5", "output.vtk=true"]],
    ["same", CKPT_BASE + CKPT_MESH + ["checkpoint.resume={root}/full/checkpoints/checkpoint_0000000020.npz"]],
    ["other", CKPT_BASE + ["parallel.devices=2", "checkpoint.resume={root}/full/checkpoints/checkpoint_0000000020.npz"]],
]


@pytest.mark.slow
@slow_batch_group
def test_run_directory_checkpoints_and_resume(slow_batch, slow_runs_root):
    """fields.npz, VTK and plots as on one device; resume on the same mesh bitwise, on another mesh re-sharded."""
    name = "test_run_directory_checkpoints_and_resume"
    r, tmp_path, runs = slow_batch[name], slow_runs_root / name, SLOW_RUNS[name]
    assert {k: v.get("status") for k, v in r.items()} == dict.fromkeys(["one", "full", "same", "other"], "completed"), r
    assert r["full"]["engine"] == "xla" and r["full"]["parallel"]["mesh"] == [2, 2]  # the config's engine names
    assert r["full"]["parallel"]["partitioner"] == "shard_map" and r["one"]["parallel"]["partitioner"] is None
    assert r["other"]["parallel"]["mesh"] == [2, 1]
    load = {name: np.load(tmp_path / name / "fields.npz") for name, _ in runs}
    for key in ("rho", "u", "solid"):
        assert np.array_equal(load["same"][key], load["full"][key]), key  # same mesh: bitwise
        assert np.abs(load["other"][key].astype(float) - load["full"][key]).max() == 0, key  # bitwise (measured 0)
        # one device against the mesh: bitwise on jax 0.12 (measured 0); jax 0.10.2 compiles the one-device chunk at the
        # suite's XLA level 0 (tests/conftest.py) to within an ulp of the sharded one (rho 2.2e-16, u 2.8e-17; 0 at
        # XLA's default level): populations' ROUNDING bounds both
        assert np.abs(load["one"][key].astype(float) - load["full"][key]).max() <= ROUNDING, key
    for name in ("one", "full"):
        assert sorted(p.name for p in (tmp_path / name / "vtk").iterdir()) == \
            ["fields_0000000020.vti", "fields_0000000040.vti"]
    assert sorted(p.name for p in (tmp_path / "one" / "plots").iterdir()) == \
        sorted(p.name for p in (tmp_path / "full" / "plots").iterdir())
    one, full = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("one", "full"))
    assert set(one) == set(full)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def lbm_run(args: list[str], devices: int, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lbm", "run", *args], env=forced(devices) | env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def outputs(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """The processes' outputs once all have exited; past ``timeout`` s all are killed and the test fails with the
    tail of each one's output (a hang in a collective leaves every process waiting on the others)."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        logs = [p.communicate()[0] for p in procs]
        pytest.fail(f"the processes did not finish in {timeout:g} s:\n" +
                    "\n".join(f"--- process {i}:\n{log[-1500:]}" for i, log in enumerate(logs)))


@pytest.mark.slow
def test_two_processes_equal_one_device(tmp_path):
    """jax.distributed on localhost: 2 processes with 2 CPU devices each run one 2x2 mesh; process 0 writes. Against
    the one-device run of this process. JAX's persistent compilation cache, set, stays empty: with a cached program
    process 0 hangs in the first all-reduce on jax 0.12.1 (lbm.parallel.without_persistent_cache)."""
    base = ["case=cylinder", "grid.nx=64", "grid.ny=32", "steps=40", "precision=float64", "output.progress=none",
            "engine=xla", "output.plots=false"]  # plots: not read here (2.0 CPU-s)
    cache = tmp_path / "jax-cache"
    for attempt in range(3):  # the free port may be taken before the coordinator binds it: then a new one
        port = free_port()
        run_dir = tmp_path / f"multi{attempt}"

        def process(i: int, port: int = port, run_dir: Path = run_dir) -> subprocess.Popen:
            return lbm_run(base + ["parallel.devices=4", "parallel.mesh=[2,2]", f"parallel.coordinator=localhost:{port}",
                                   "parallel.num_processes=2", f"parallel.process_id={i}", f"hydra.run.dir={run_dir}"],
                           devices=2, JAX_COMPILATION_CACHE_DIR=str(cache))

        # process 1 first, process 0 once process 1's Hydra has written its record into the shared directory (the
        # order a loaded machine can produce: process 0 must not take it for an earlier run's record)
        second = process(1)
        deadline = time.monotonic() + 120
        while not (run_dir / ".hydra.process1").exists() and second.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        procs = [process(0), second]
        if attempt == 0:  # meanwhile the one-device run, in this process (one of its own: 2-3 CPU-s more)
            lbm.run(base, run_dir=tmp_path / "one")
        logs = outputs(procs, timeout=300)  # 7 s each on an idle machine
        if not any(p.returncode and "already in use" in log.lower() for p, log in zip(procs, logs, strict=True)):
            break
    (tmp_path / f"multi{attempt}").rename(tmp_path / "multi")
    assert [p.returncode for p in procs] == [0, 0], "\n".join(log[-2000:] for log in logs)
    multi = json.loads((tmp_path / "multi" / "metrics.json").read_text())
    assert multi["parallel"] == {"devices": 4, "mesh": [2, 2], "shard": [32, 16], "partitioner": "shard_map",
                                 "processes": 2}
    a, b = np.load(tmp_path / "one" / "fields.npz"), np.load(tmp_path / "multi" / "fields.npz")
    for key in ("rho", "u", "solid"):
        assert np.abs(a[key].astype(float) - b[key]).max() <= 1e-13, key  # 40 float64 steps of rounding
    forces = [np.loadtxt(tmp_path / run / "forces.csv", delimiter=",", skiprows=1) for run in ("one", "multi")]
    assert forces[0].shape == (40, 5) and np.abs(forces[0] - forces[1]).max() <= 1e-12  # step, fx, fy, cd, cl
    # the shared Hydra log holds process 0's lines only; process 1 logs into a file of its own
    shared, own = (tmp_path / "multi" / "lbm.log").read_text(), (tmp_path / "multi" / "lbm.process1.log").read_text()
    assert (tmp_path / "multi" / ".hydra").is_dir() and (tmp_path / "multi" / ".hydra.process1").is_dir()
    assert shared.count("compiled in") == 1 and own.count("compiled in") == 1
    assert not any(cache.rglob("*")), sorted(cache.rglob("*"))[:3]  # no process wrote the cache (process 0 would)
    assert all("persistent compilation cache" in log for log in (shared, own))  # and each says it is off


@pytest.mark.slow
def test_submitit_local_runs_a_sweep(tmp_path):
    """hydra/launcher=submitit_local (the launcher the Slurm preset builds on) runs a grid-size sweep."""
    done = subprocess.run(
        [sys.executable, "-m", "lbm", "run", "-m", "hydra/launcher=submitit_local", "case=taylor_green",
         "grid.nx=32,48", "grid.ny=32", "steps=20", "output.plots=false", "output.progress=none", "engine=xla",
         f"hydra.sweep.dir={tmp_path}"], env=forced(1), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    grids = sorted(json.loads((tmp_path / str(i) / "metrics.json").read_text())["grid"][0] for i in range(2))
    assert grids == [32, 48]
    assert (tmp_path / ".submitit").is_dir()


def test_slurm_preset_composes():
    done = subprocess.run([sys.executable, "-m", "lbm", "run", "--cfg", "hydra", "hydra/launcher=slurm",
                           "hydra.launcher.partition=gpu"], env=forced(1), cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SlurmLauncher" in done.stdout and "partition: gpu" in done.stdout and "gpus_per_task: 1" in done.stdout


# a window of 2 + 6 steps (not the default 5 + 20): 13.2 -> 11.1 CPU-s, the halo measured in both modes either way
HALO_MODES = ("instrumented", "fused")
SLOW_RUNS["test_profiled_four_device_run_has_a_halo_row"] = [
    [mode, ["case=taylor_green", "grid.nx=32", "grid.ny=32", "steps=12", "parallel.devices=4", "engine=xla",
            "profile.enabled=true", "profile.warmup_steps=2", "profile.steps=6", "output.plots=false",
            "output.progress=none", f"mode={mode}"]] for mode in HALO_MODES]


@pytest.mark.slow
@slow_batch_group
def test_profiled_four_device_run_has_a_halo_row(slow_batch, slow_runs_root):
    """The halo exchange is a stage of the breakdown, in both modes: measured, with a share of the step."""
    import csv

    name = "test_profiled_four_device_run_has_a_halo_row"
    r = slow_batch[name]
    for mode in HALO_MODES:
        assert r[mode].get("status") == "completed", r
        rows = {row["stage"]: row for row in csv.DictReader((slow_runs_root / name / mode / "profile" /
                                                             "breakdown.csv").open())}
        assert rows["halo"]["status"] == "measured", mode
        assert 0 < float(rows["halo"]["share"]) < 1, mode
