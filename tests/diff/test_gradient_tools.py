"""Gradients beyond the xla engine's circle: the ellipse's shape gradient (the wall moved_to the ellipse, case.shape=ellipse)."""

import jax.numpy as jnp
import numpy as np
import pytest
from helpers.reports import rel

import lbm
from lbm.boundaries.interpolated import InterpolatedBounceBack
from lbm.cases.cylinder import ellipse_intersect
from lbm.config import load
from lbm.diff import finite_difference
from lbm.diff.api import prepare_gradient
from lbm.errors import ConfigError, LbmError
from lbm.simulation import make_case

F64 = ["precision=float64"]
# wall fractions stay 0.09 from 0, 1/2 and 1 (the BFL switch and the mask's edges): FD steps of 3e-3 cells cross none
ELLIPSE = ["case=cylinder", "grid.nx=40", "grid.ny=20", "steps=100", "flow.reynolds=5", "case.shape=ellipse",
           "case.axes=[4.8,2.4]", "case.center=[10.0,10.0]", "case.bounce_back=interpolated", *F64]
TOL = 1e-6


def wall_of(setup) -> InterpolatedBounceBack:
    return next(bc for bc in setup.boundaries if isinstance(bc, InterpolatedBounceBack))


def test_ellipse_mask_and_wall_fractions():
    param = prepare_gradient(ELLIPSE, ["case.axes.a"])  # float64 (as a run of precision=float64)
    case, setup = param.case, param.setup
    x, y = np.meshgrid(np.arange(40.0), np.arange(20.0), indexing="ij")
    np.testing.assert_array_equal(setup.solid, ((x - 10) / 4.8) ** 2 + ((y - 10) / 2.4) ** 2 < 1)
    assert case.geometry() == (10.0, 10.0, 2.4) and case.diameter == 4.8  # b is the radius's part: D = 2b
    wall = wall_of(setup)
    # every link's wall point lies on the ellipse
    fluid = np.stack(np.unravel_index(np.asarray(wall.link_fluid), (40, 20)), axis=1)
    hit = fluid + np.asarray(wall.q)[:, None] * case.lattice.c[np.asarray(wall.link_dir)]
    np.testing.assert_allclose(((hit[:, 0] - 10) / 4.8) ** 2 + ((hit[:, 1] - 10) / 2.4) ** 2, 1.0, atol=1e-12)
    # the jax form at the ellipse's own axes is the numpy wall
    moved = wall.moved_to(ellipse_intersect((10.0, 10.0), (4.8, 2.4), jnp), (40, 20), case.lattice)
    np.testing.assert_allclose(np.asarray(moved.q), wall.q, atol=1e-12)
    np.testing.assert_allclose(np.asarray(moved.weights), wall.weights, atol=1e-12)


@pytest.mark.parametrize("overrides,key", [
    (["case.shape=ellipse"], "case.axes"),
    (["case.shape=ellipse", "case.axes=[3,2]", "case.radius=3"], "case.axes"),
    (["case.axes=[3,2]"], "case.axes"),
    (["case.shape=ellipse", "case.axes=[3]"], "case.axes"),
    (["case.shape=ellipse", "case.axes=[3,0.5]"], "case.axes"),
    (["case.shape=ellipse", "case.axes=[30,2]"], "case.axes"),
    (["case.shape=ellipse", "case.axes=[3,2]", "case.center=[3,10]"], "case.center"),
    (["case.shape=square"], "case.shape"),
])
def test_ellipse_refusals(overrides, key):
    with pytest.raises(ConfigError, match=key):
        make_case(load(["case=cylinder", "grid.nx=40", "grid.ny=20", *overrides])).check()


def test_collision_kernels_are_affine_in_the_force():
    """What lbm.cases.traced.Relaxation rests on: K(F) = K(0) + sum_a F_a (K(e_a) - K(0)) for every kind."""
    import jax.numpy as jnp

    from lbm.kernels.collisions import COLLISION_KINDS, Collision
    from lbm.kernels.equilibrium import equilibrium
    from lbm.lattice import get_lattice

    lattice = get_lattice("d2q9")
    rng = np.random.default_rng(0)
    u = jnp.asarray(0.05 * rng.standard_normal((2, 4, 5)))
    feq = equilibrium(jnp.asarray(1 + 0.01 * rng.standard_normal((4, 5))), u, lattice)
    f = feq + 1e-3 * rng.standard_normal(feq.shape)
    force = np.array([1e-3, -2e-4])
    for kind in COLLISION_KINDS:
        spec = Collision(kind, 1.3, 1.1 if kind in ("trt", "mrt") else None)
        zero = spec(f, feq, u, lattice, np.zeros(2))
        affine = zero + sum(force[a] * (spec(f, feq, u, lattice, np.eye(2)[a]) - zero) for a in range(2))
        full = spec(f, feq, u, lattice, force)
        assert float(jnp.abs(full - zero).max()) > 1e-5  # the force matters
        np.testing.assert_allclose(np.asarray(affine), np.asarray(full), rtol=0, atol=2e-7, err_msg=kind)  # float32 rounding


CAVITY = ["case=cavity", "grid.nx=10", "grid.ny=10", "steps=40", "flow.reynolds=10", *F64]


@pytest.mark.parametrize("overrides,key", [
    pytest.param(CAVITY + ["collision=mrt"], "flow.reynolds", id="cavity-mrt", marks=pytest.mark.slow),
    pytest.param(CAVITY + ["collision=kbc"], "flow.reynolds", id="cavity-kbc", marks=pytest.mark.slow),
    pytest.param(CAVITY + ["collision=cumulant"], "flow.u_lattice", id="cavity-cumulant", marks=pytest.mark.slow),
    pytest.param(CAVITY + ["collision=recursive_regularized"], "flow.u_lattice", id="cavity-rr",
                 marks=pytest.mark.slow),
    pytest.param(["case=poiseuille", "grid.nx=4", "grid.ny=10", "steps=60", "flow.reynolds=5", "collision=regularized",
                  *F64], "flow.u_lattice", id="poiseuille-regularized", marks=pytest.mark.slow),  # a traced force
])
def test_other_collisions_gradients_equal_finite_differences(overrides, key):
    _, grads = lbm.value_and_grad(overrides, [key], "kinetic_energy")
    assert rel(grads[key], finite_difference(overrides, key, "kinetic_energy")) < TOL


def test_smagorinsky_is_refused_with_the_reason():
    with pytest.raises(LbmError, match="collision.smagorinsky=0.1: the Smagorinsky rate has no finite derivative"):
        prepare_gradient(CAVITY + ["collision=mrt", "collision.smagorinsky=0.1"], ["flow.reynolds"])


def test_ellipse_keys_and_refusals():
    param = prepare_gradient(ELLIPSE, ["case.axes.a"])
    assert param.base["case.axes.a"] == 4.8 and param.base["case.axes.b"] == 2.4 and "case.radius" not in param.base
    assert param.overrides({"case.axes.b": 2.5}) == ["case.axes=[4.8,2.5]"]
    with pytest.raises(LbmError, match="choose from .*case.axes.a"):
        prepare_gradient(ELLIPSE, ["case.radius"])
    with pytest.raises(LbmError, match="no shape gradient"):
        prepare_gradient([o for o in ELLIPSE if "bounce_back" not in o], ["case.axes.b"])


@pytest.mark.slow
def test_ellipse_shape_gradient_of_drag_equals_finite_differences():
    keys = ["case.axes.a", "case.axes.b"]
    value, grads = lbm.value_and_grad(ELLIPSE, keys, "drag", window=50)
    assert 3 < value < 10
    assert grads["case.axes.b"] > 0.5  # a taller ellipse drags more (the drag is per frontal height 2b)
    for key in keys:
        fd = finite_difference(ELLIPSE, key, "drag", window=50, points=4, step=3e-3)
        assert rel(grads[key], fd) < TOL, (key, grads[key], fd)


MESH_CHECK = """
import json, sys
import jax.numpy as jnp
import lbm
from lbm.diff.api import gradient_function, prepare_gradient
overrides, wrt = json.loads(sys.argv[1])
one = lbm.value_and_grad(overrides, wrt, "drag", window=20)
out = {"one": one}
for mesh in ("[2,2]",):
    mesh_run = [*overrides, "parallel.devices=4", f"parallel.mesh={mesh}"]
    param = prepare_gradient(mesh_run, wrt)  # what lbm.value_and_grad runs, compiled once: its program and result
    values = {k: jnp.asarray(param.base[k]) for k in wrt}
    compiled = gradient_function(param, wrt, "drag", window=20).lower(values).compile()
    value, grads = compiled(values)
    text = compiled.as_text()
    out[mesh] = {"result": [float(value), {k: float(grads[k]) for k in wrt}], "collectives": sum(
        text.count(op) for op in ("all-reduce", "collective-permute", "all-gather"))}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_gradient_on_four_devices_equals_one_device():
    """Four forced CPU devices (a subprocess: XLA_FLAGS before jax starts), a 2x2 mesh (both axes split): the same
    gradient."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4".strip()
    overrides = ["case=cylinder", "grid.nx=40", "grid.ny=20", "steps=40", "flow.reynolds=5", "case.radius=3.3",
                 "case.center=[10.0,10.0]", "case.bounce_back=interpolated", *F64]
    wrt = ["case.radius", "flow.reynolds"]
    done = subprocess.run([sys.executable, "-c", MESH_CHECK, json.dumps([overrides, wrt])], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    value, grads = out["one"]
    for mesh in ("[2,2]",):
        assert out[mesh]["collectives"] > 0  # the program is split over the devices, not run on one
        mesh_value, mesh_grads = out[mesh]["result"]
        assert mesh_value == pytest.approx(value, rel=1e-12)
        for key in wrt:
            assert mesh_grads[key] == pytest.approx(grads[key], rel=1e-12), (mesh, key)


@pytest.mark.parametrize("overrides,wrt,objective,checkpoint", [
    pytest.param(CAVITY + ["steps=12"], ["flow.u_lattice", "flow.reynolds"], "kinetic_energy", "binomial", id="cavity",
                 marks=pytest.mark.slow),
    pytest.param(ELLIPSE + ["steps=16"], ["case.axes.a", "flow.u_lattice"], "drag", "every", id="ellipse",
                 marks=pytest.mark.slow),  # segments of 5, 5, 5 and 1 steps
    pytest.param(ELLIPSE + ["steps=10"], ["case.axes.b"], "drag", "none", id="ellipse-none", marks=pytest.mark.slow),
])
def test_instrumented_gradient_equals_the_fused_one(overrides, wrt, objective, checkpoint, caplog):
    with caplog.at_level("INFO", logger="lbm"):
        value, grads = lbm.value_and_grad(overrides + ["mode=instrumented"], wrt, objective, checkpoint=checkpoint,
                                          every=5, window=10, snapshots=3)  # binomial: 12 steps re-run from 3 states
    assert "differentiable run: engine instrumented" in caplog.text
    fused_value, fused = lbm.value_and_grad(overrides, wrt, objective, checkpoint="none", window=10)
    assert value == pytest.approx(fused_value, rel=1e-12)
    for key in wrt:
        assert grads[key] == pytest.approx(fused[key], rel=1e-10), key


def test_op_names_of_the_passes():
    from lbm.profiling.gradient import gradient_stages, module_row

    stages = ["macroscopic", "collide", "bounce_back", "stream"]
    body = "while/body/eval_jaxpr/checkpoint"
    assert gradient_stages("jit(value)/jvp()/while/body/eval_jaxpr/collide/mul", stages) == ["collide"]
    assert gradient_stages(f"jit(value)/transpose(jvp())/{body}/rematted_computation/while/body/macroscopic/add",
                           stages) == ["macroscopic (recompute)"]
    assert gradient_stages(f"jit(value)/transpose(jvp())/{body}/while/body/eval_jaxpr/bounce_back/jit(_where)",
                           stages) == ["bounce_back (backward)"]
    assert gradient_stages("jit(value)/transpose(jvp(collide))/mul", stages) == ["collide (backward)"]
    # lbm.diff.checkpointing's custom_vjp rules: a step's vjp re-runs it under jvp(), its pullback is transposed again,
    # binomial's states re-run without residuals under the scope "recompute"
    body = "jit(value)/transpose(jvp())/while/body/eval_jaxpr"
    assert gradient_stages(f"{body}/jvp()/while/body/eval_jaxpr/collide/mul", stages) == ["collide (recompute)"]
    assert gradient_stages(f"{body}/cond/branch_1_fun/jvp(stream)/add", stages) == ["stream (recompute)"]
    assert gradient_stages(f"{body}/recompute/while/body/macroscopic/add", stages) == ["macroscopic (recompute)"]
    assert gradient_stages(f"{body}/transpose(jvp())/while/body/eval_jaxpr/collide/mul", stages) == ["collide (backward)"]
    assert gradient_stages(f"{body}/cond/branch_1_fun/transpose(recompute)/jvp(stream)/add",
                           stages) == ["stream (backward)"]
    assert gradient_stages("jit(value)/transpose(jvp())/while/body/add", stages) == []
    assert module_row("jit_backward_bounce_back") == "bounce_back (backward)" and module_row("jit_value") is None


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fused", "instrumented"])
def test_profile_of_a_gradient_has_every_stage_forward_and_backward(mode, tmp_path):
    import json

    # 48x48: XLA:CPU runs loops over smaller arrays as one "small call" kernel, where no stage has a time of its own
    run = ["case=cavity", "grid.nx=48", "grid.ny=48", "steps=8", "flow.reynolds=10"]
    overrides = run + ["profile.enabled=true", "profile.steps=8", f"mode={mode}"]
    value, _ = lbm.value_and_grad(overrides, ["flow.u_lattice"], "kinetic_energy", checkpoint="every", every=4,
                                  profile_dir=tmp_path / "profile")
    assert value > 0
    record = json.loads((tmp_path / "profile" / "gradient_breakdown.json").read_text())
    rows = {r["stage"]: r for r in record["rows"]}
    # the cavity's stages; the fused gradient applies the half-way walls while streaming (as the xla engine does):
    # their work is in stream's rows
    walls = ("bounce_back",) if mode == "instrumented" else ()
    for stage in ("macroscopic", "equilibrium", "collide", *walls, "stream"):
        for kind in ("", " (recompute)", " (backward)"):
            named = [r for name, r in rows.items() if f"{stage}{kind}" in name.split("+")]
            assert named and all(r["total_ms"] > 0 for r in named), (stage, kind)
    assert sum(r["total_ms"] for name, r in rows.items() if name != "sum") == pytest.approx(rows["sum"]["total_ms"])
    assert all(record["passes_ms_per_call"][k] > 0 for k in ("forward", "recompute", "backward"))
    assert (tmp_path / "profile" / "gradient_breakdown.png").stat().st_size > 0
    assert list((tmp_path / "profile").rglob("*.xplane.pb"))  # the trace itself
    with pytest.raises(LbmError, match="already holds a gradient profile"):
        lbm.value_and_grad(overrides, ["flow.u_lattice"], "kinetic_energy", profile_dir=tmp_path / "profile")
    with pytest.raises(LbmError, match="profile.enabled is false"):
        lbm.value_and_grad(CAVITY, ["flow.u_lattice"], "kinetic_energy", profile_dir=tmp_path / "other")


@pytest.mark.slow
def test_ellipse_script_reaches_a_target_drag_at_fixed_area(tmp_path):
    """scripts/ellipse_drag.py, small: from a circle to the ellipse of equal area whose drag is the target."""
    import json
    import math

    from helpers.scripts import load_script

    script = load_script("ellipse_drag")
    # each iteration compiles the gradient of its own mask: a target a few iterations away (cd_R 12.25 -> 11.6)
    args = ["--grid", "48", "24", "--start", "3", "3", "--steps", "300", "--window", "100", "--target", "11.6",
            "--iterations", "6", "--out", str(tmp_path)]
    assert script.main(args) == 0
    record = json.loads((tmp_path / "ellipse_drag.json").read_text())
    assert record["converged"] and record["iterations"] <= 6
    last = record["history"][-1]
    assert abs(last["cd_R"] / 11.6 - 1) < 1e-3
    assert all(math.isclose(h["a"] * h["b"], 9.0, rel_tol=1e-12) for h in record["history"])  # the area is kept
    assert last["aspect"] > 1.2  # from the circle's 12.25: less drag, streamlined along the flow
    # the drag the optimiser saw is the simulator's: lbm.run of the final shape (cd on 2b -> on 2R)
    run = lbm.run(script.run_overrides(script.parse(args), last["a"], last["b"]), run_dir=tmp_path / "check")
    rows = np.loadtxt(run.run_dir / "forces.csv", delimiter=",", skiprows=1)
    assert rows[-100:, -2].mean() * last["b"] / 3.0 == pytest.approx(last["cd_R"], rel=1e-6)
    for name in ("ellipse_drag.png", "ellipse_shapes.png"):
        assert (tmp_path / name).stat().st_size > 0


def inspect_gradient(out, *args):
    import json

    from lbm.bench.inspect import main

    assert main(["target=cpu", "engine=xla", "case=cavity", "grid.nx=24", "grid.ny=24", *args, "--out", str(out)]) == 0
    assert (out / "gradient.hlo.txt").read_text().startswith("HloModule")
    return json.loads((out / "inspect.json").read_text())["gradient"]


@pytest.mark.slow
def test_inspect_of_the_gradient_program(tmp_path):
    """Bytes per cell and step of every pass and stage of the program lbm.value_and_grad compiles."""
    short = inspect_gradient(tmp_path, "steps=9", "gradient=true", "gradient.wrt=flow.u_lattice")
    assert short["wrt"] == ["flow.u_lattice"] and short["checkpoint"] == "sqrt" and short["steps"] == 9
    assert all(short["passes_bytes_per_cell_step"][k] > 0 for k in ("forward", "recompute", "backward"))
    assert sum(r["bytes_per_cell_step"] for r in short["rows"]) == pytest.approx(short["bytes_per_cell_step"])
    assert short["ratio_to_forward"] == pytest.approx(short["bytes_per_cell_step"] / short["forward_bytes_per_cell_step"])
    rows = {s for r in short["rows"] for s in r["stage"].split("+")}
    assert {"collide", "collide (recompute)", "collide (backward)", "stream (backward)"} <= rows


@pytest.mark.slow
def test_inspect_counts_each_kernel_as_often_as_its_loops_run_it(tmp_path):
    """Four times the steps, the same bytes per step: the loops' trip counts carry it (lbm.hlo.program_traffic)."""
    args = ["gradient=true", "gradient.wrt=flow.u_lattice", "gradient.checkpoint=none"]
    short = inspect_gradient(tmp_path / "a", "steps=16", *args)["passes_bytes_per_cell_step"]
    long = inspect_gradient(tmp_path / "b", "steps=64", *args)["passes_bytes_per_cell_step"]
    assert short["recompute"] == long["recompute"] == 0  # no checkpoints: nothing is recomputed
    assert long["forward"] == pytest.approx(short["forward"], rel=0.05)
    assert long["backward"] == pytest.approx(short["backward"], rel=0.05)


def test_inspect_gradient_options_are_checked():
    from lbm.cli import main

    assert main(["inspect", "gradient=maybe"]) == 2
    assert main(["inspect", "gradient.wrt=flow.reynolds"]) == 2


@pytest.mark.accel
def test_gradient_program_compiles_for_a_gpu_without_one(tmp_path):
    """The gradient program for target=h100 (deviceless; bash scripts/accel_env.sh, then -m accel in .venv-accel)."""
    import importlib.util
    import json
    import subprocess
    import sys

    from lbm.bench.targets import CUDA_PLUGINS

    if not any(importlib.util.find_spec(m.split(".")[0]) and importlib.util.find_spec(m) for m in CUDA_PLUGINS):
        pytest.skip("no CUDA plugin here (bash scripts/accel_env.sh)")
    done = subprocess.run([sys.executable, "-m", "lbm", "inspect", "target=h100", "gradient=true", "case=cavity",
                           "grid.nx=64", "grid.ny=64", "steps=16", "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "inspect.json").read_text())
    assert record["engine"] == "pallas" and record["target"]["platform"] == "cuda"
    gradient = record["gradient"]
    assert gradient["bytes_per_cell_step"] > gradient["forward_bytes_per_cell_step"] > 0
    assert {"collide (backward)", "stream (backward)"} <= {s for r in gradient["rows"] for s in r["stage"].split("+")}
    assert "gradient program" in done.stdout


def test_ellipse_script_stops_at_a_minimum_on_a_jump_of_the_solid_mask(tmp_path, monkeypatch):
    """Where the drag's derivative changes sign at a jump of the mask (no zero to find), the script brackets the jump."""
    import json
    import math

    from helpers.scripts import load_script

    script = load_script("ellipse_drag")
    jump = 0.4321

    def drag(args, radius, s):  # smooth on each side, the slope -0.05 below the jump and +0.07 above it
        cd = 7.0 + (-0.05 * (s - jump) if s < jump else 0.02 + 0.07 * (s - jump))
        return cd, (-0.05 if s < jump else 0.07), radius * math.exp(s), radius * math.exp(-s)

    monkeypatch.setattr(script, "drag", drag)
    monkeypatch.setattr(script, "plot", lambda record, out: [out / "ellipse_drag.png", out / "ellipse_shapes.png"])
    assert script.main(["--start", "4", "4", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "ellipse_drag.json").read_text())
    assert record["converged"] and record["at_mask_jump"] and record["iterations"] < 50
    best = record["history"][record["best_iteration"]]
    assert best["s"] < jump < best["s"] + 5e-3 and record["cd_R"] == best["cd_R"]
