"""lbm.value_and_grad against central finite differences of lbm.run, in float64, on small grids (lbm.diff)."""

import logging
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.reports import rel

import lbm
from lbm.bench.gradient_study import planned_bytes
from lbm.boundaries.interpolated import InterpolatedBounceBack
from lbm.cases.cylinder import ellipse_intersect
from lbm.config import LbmWarning
from lbm.diff import api, finite_difference
from lbm.diff.api import gradient_function, prepare_gradient
from lbm.diff.checkpointing import binomial_schedule, segment_length
from lbm.diff.run import differentiable_run
from lbm.errors import LbmError
from lbm.lattice import get_lattice

F64 = ["precision=float64"]
CAVITY = ["case=cavity", "grid.nx=10", "grid.ny=10", "steps=40", "flow.reynolds=10", *F64]
# a circle whose wall fractions stay >= 0.125 from the BFL switch at q = 1/2 and whose nearest node is 0.125
# cells from the wall: finite-difference steps of 3e-3 cells cross neither
CYLINDER = ["case=cylinder", "grid.nx=40", "grid.ny=20", "steps=100", "flow.reynolds=5", "case.radius=3.3",
            "case.center=[10.0,10.0]", "case.bounce_back=interpolated", *F64]
TOL = 1e-6


def test_cavity_lid_speed_gradient_equals_finite_differences(caplog):
    with caplog.at_level("INFO", logger="lbm"):
        value, grads = lbm.value_and_grad(CAVITY, ["flow.u_lattice"], "kinetic_energy")
    assert "differentiable run: engine xla (engine=auto picks xla" in caplog.text
    assert value > 0
    assert rel(grads["flow.u_lattice"], finite_difference(CAVITY, "flow.u_lattice", "kinetic_energy")) < TOL


@pytest.mark.slow
@pytest.mark.parametrize("overrides,keys", [
    (CAVITY + ["collision=trt", "flow.tau=0.8"], ["flow.tau"]),
    (["case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=60", "flow.reynolds=10", *F64],
     ["flow.reynolds", "flow.u_lattice"]),  # u_lattice: the initial state
    (["case=poiseuille", "grid.nx=4", "grid.ny=10", "steps=60", "flow.reynolds=5", *F64],
     ["flow.u_lattice"]),  # through the body force
], ids=["cavity-trt-tau", "taylor_green", "poiseuille"])
def test_flow_gradients_equal_finite_differences(overrides, keys):
    _, grads = lbm.value_and_grad(overrides, keys, "kinetic_energy", checkpoint="every", every=7)
    for key in keys:
        assert rel(grads[key], finite_difference(overrides, key, "kinetic_energy")) < TOL, key


@pytest.mark.slow
def test_cylinder_shape_gradient_of_drag_equals_finite_differences():
    keys = ["case.radius", "case.center.x"]
    value, grads = lbm.value_and_grad(CYLINDER, keys, "drag", checkpoint="binomial", window=50)
    assert 3 < value < 10
    assert grads["case.radius"] > 0.5  # a bigger cylinder drags more; a mask alone would give exactly 0
    for key in keys:
        fd = finite_difference(CYLINDER, key, "drag", window=50, points=4, step=3e-3)
        assert rel(grads[key], fd) < TOL, key


@pytest.mark.slow
def test_checkpoint_policies_give_the_gradient_of_the_kernels():
    param = prepare_gradient(["case=cavity", "grid.nx=6", "grid.ny=6", "steps=11", *F64], ["flow.u_lattice"])

    def grad(policy: str, forward_mode: bool = False, **options) -> float:
        def ke(u: jnp.ndarray) -> jnp.ndarray:
            out = differentiable_run(param, {"flow.u_lattice": u}, 11, policy, forward_mode=forward_mode, **options)
            return jnp.sum(out["rho"] * jnp.sum(out["u"] ** 2, axis=0))
        return float(jax.jit(jax.grad(ke))(jnp.asarray(param.base["flow.u_lattice"])))

    reference = grad("none", forward_mode=True)  # jax's differentiation of the kernels' own stages
    # platform cuda: a GPU's form of the joint cell adjoint (collide_cell) and its loops of two steps, here on the CPU
    for policy, options in (("none", {}), ("every", {"every": 4}), ("sqrt", {}), ("binomial", {"snapshots": 3}),
                            ("binomial", {"snapshots": 1}), ("sqrt", {"platform": "cuda"})):
        assert grad(policy, **options) == pytest.approx(reference, rel=1e-12), (policy, options)


def test_segment_length_and_the_binomial_schedule():
    assert segment_length("none", 100) == 1
    assert segment_length("every", 100, every=8) == 8
    assert segment_length("sqrt", 10000) == 100
    # a divisor of the steps from ceil(sqrt N) to twice that: no remainder segment (a second program) to compile
    assert segment_length("sqrt", 1000) == 40 and segment_length("sqrt", 11) == 4
    with pytest.raises(LbmError, match="every=k"):
        segment_length("every", 10)
    with pytest.raises(LbmError, match="choose one of"):
        segment_length("revolve", 10)
    with pytest.raises(LbmError, match="snapshots=s"):
        segment_length("binomial", 10, snapshots=0)
    for steps, snapshots in ((1, 1), (9, 1), (50, 3), (1000, 8)):
        slots, expected, advanced = {0: 0}, steps - 1, 0  # slot -> the step index of the state it holds
        for source, count, target, adjoint in binomial_schedule(steps, snapshots).tolist():
            state = slots[source] + count
            advanced += count
            if adjoint:
                assert state == expected  # each step pulled back once, last first, from its own state
                expected -= 1
            else:
                assert 0 < target < snapshots
                slots[target] = state
        assert expected == -1
        repetitions = next(r for r in range(steps + 1) if math.comb(snapshots + r, snapshots) >= steps)
        assert advanced <= repetitions * steps


@pytest.mark.slow
def test_the_gradient_keeps_no_per_direction_transposes_and_binomial_memory_does_not_grow():
    def program(steps: int, policy: str) -> str:
        param = prepare_gradient(["case=cavity", "grid.nx=8", "grid.ny=8", f"steps={steps}", "flow.reynolds=10"],
                                 ["flow.u_lattice"])
        fn = gradient_function(param, ["flow.u_lattice"], "kinetic_energy", policy, snapshots=4)
        return fn.lower({"flow.u_lattice": jnp.asarray(0.1, jnp.float32)}).compile()

    short, long = program(16, "binomial"), program(256, "binomial")
    # the transpose of a slice f[i] of the stacked populations is a pad of the whole array: O(Q^2) work per cell,
    # what made reverse mode through the kernels slow; the hand-written adjoints have none inside the loops
    assert not [line for line in long.as_text().splitlines() if " pad(" in line and "/while/" in line]
    grown = planned_bytes(long) - planned_bytes(short)
    # what grows is the schedule's table (16 bytes an action), at most all of the longer one's: XLA may hold it in a
    # buffer of the longer program while the shorter one's stays a constant (seen in CI: exactly 343 x 16 bytes)
    assert grown <= 16 * len(binomial_schedule(256, 4))


def test_a_moved_circle_at_its_own_centre_and_radius_is_the_numpy_wall():
    lattice = get_lattice("d2q9")
    wall = InterpolatedBounceBack.circle((10.3, 9.6), 3.7, (30, 20), lattice)
    moved = wall.moved_to(ellipse_intersect((10.3, 9.6), (3.7, 3.7), jnp), (30, 20), lattice)
    np.testing.assert_allclose(np.asarray(moved.q), wall.q, atol=1e-5)  # float32 unless x64 is on
    np.testing.assert_allclose(np.asarray(moved.weights), wall.weights, atol=1e-5)
    bigger = wall.moved_to(ellipse_intersect((10.3, 9.6), (3.8, 3.8), jnp), (30, 20), lattice)
    assert np.all(np.asarray(bigger.q) < wall.q)  # the wall moves towards every fluid node


def test_refusals_are_one_line_errors():
    with pytest.raises(LbmError, match="engine=native has no adjoint"):
        lbm.value_and_grad(CAVITY + ["engine=native"], ["flow.reynolds"], "kinetic_energy")
    with pytest.raises(LbmError, match="engine=pallas has no adjoint"):
        lbm.value_and_grad(CAVITY + ["engine=pallas"], ["flow.reynolds"], "kinetic_energy")
    with pytest.raises(LbmError, match="choose from flow.reynolds, flow.u_lattice"):
        lbm.value_and_grad(CAVITY, ["case.radius"], "kinetic_energy")
    with pytest.raises(LbmError, match="no shape gradient"):
        lbm.value_and_grad([o for o in CYLINDER if "bounce_back" not in o], ["case.radius"], "drag")
    with pytest.raises(LbmError, match="objective='drag' is not defined for case=cavity"):
        lbm.value_and_grad(CAVITY, ["flow.reynolds"], "drag")
    with pytest.raises(LbmError, match="steps=auto: case=cavity then stops once steady.*give steps=N"):
        lbm.value_and_grad([o for o in CAVITY if not o.startswith("steps=")], ["flow.reynolds"], "kinetic_energy")
    with pytest.raises(LbmError, match="collision.smagorinsky=0.1: the Smagorinsky rate has no finite derivative"):
        lbm.value_and_grad(CAVITY + ["collision=mrt", "collision.smagorinsky=0.1"], ["flow.reynolds"], "kinetic_energy")


def test_the_checkpointing_policy_comes_from_the_config_unless_given(monkeypatch):
    seen = []
    real = api.differentiable_run
    monkeypatch.setattr(api, "differentiable_run", lambda *a, **k: seen.append(a[3:]) or real(*a, **k))
    overrides = [*CAVITY, "gradient.checkpoint=binomial", "gradient.snapshots=3"]
    param = prepare_gradient(overrides, ["flow.u_lattice"])
    values = {"flow.u_lattice": jnp.asarray(0.1)}
    gradient_function(param, ["flow.u_lattice"], "kinetic_energy").lower(values)  # traced, not compiled
    gradient_function(param, ["flow.u_lattice"], "kinetic_energy", "every", every=2).lower(values)
    assert seen == [("binomial", None, None, 3), ("every", 2, None, 3)]
    with pytest.raises(LbmError, match="gradient.every=null is invalid"):
        lbm.value_and_grad([*overrides, "gradient.checkpoint=every"], ["flow.u_lattice"], "kinetic_energy")


@pytest.mark.slow
def test_the_cell_local_stages_share_one_adjoint_only_where_nothing_acts_between():
    from lbm.diff.adjoint import CELL, CORE, RELAXED, core_for, with_adjoints

    def core(overrides: list[str], platform: str | None = None) -> object:
        traced = prepare_gradient(overrides, ["flow.u_lattice"]).build({})
        return core_for(traced.setup, with_adjoints(traced.boundaries, traced.setup.lattice), platform)

    assert core(CAVITY) is CELL["cpu"]  # the walls act while streaming; the form for the platform jax runs on
    assert core([*CAVITY, "collision=trt"]) is CELL["cpu"]
    assert core(CAVITY, "cuda") is CELL["default"]  # chosen when traced: inspect compiles for a GPU on this CPU
    assert core([*CAVITY, "collision=mrt"]) is CORE  # jax differentiates the other kinds' kernels
    # the traced body force shifts the velocity in the macroscopic stage
    assert core(["case=poiseuille", "grid.nx=4", "grid.ny=10", "steps=6", *F64]) is RELAXED
    assert core(CYLINDER) is CORE  # the inlet rewrites the equilibrium between the two stages


@pytest.mark.slow
def test_the_joint_cell_adjoint_gives_the_gradient_of_the_kernels_with_two_rates():
    """TRT (BGK: test_checkpoint_policies_give_the_gradient_of_the_kernels), the GPU's form here on the CPU."""
    param = prepare_gradient(["case=cavity", "grid.nx=6", "grid.ny=6", "steps=11", "collision=trt", *F64],
                             ["flow.u_lattice"])

    def grad(forward_mode: bool) -> float:
        def ke(u: jnp.ndarray) -> jnp.ndarray:
            # the GPU's form, here on the CPU
            out = differentiable_run(param, {"flow.u_lattice": u}, 11, "sqrt", forward_mode=forward_mode, platform="cuda")
            return jnp.sum(out["rho"] * jnp.sum(out["u"] ** 2, axis=0))
        return float(jax.jit(jax.grad(ke))(jnp.asarray(param.base["flow.u_lattice"])))

    assert grad(False) == pytest.approx(grad(True), rel=1e-12)  # jax's differentiation of the kernels' stages


@pytest.mark.parametrize("mode", ["fused", pytest.param("instrumented", marks=pytest.mark.slow)])
def test_a_callable_sees_the_fields_of_fields_npz_in_solid_cells_too(tmp_path, mode):
    # fields.npz holds the walls' velocity in solid cells (the lid's speed in the cavity's top row, 0 elsewhere)
    overrides = [*CAVITY, "steps=6", f"mode={mode}"]
    run = lbm.run([*overrides, "output.plots=false"], run_dir=tmp_path / "run")

    def lid(fields):  # the x-velocity summed over the solid cells: the lid's speed times its 8 cells
        return jnp.sum(jnp.where(fields["solid"], fields["u"][0], 0.0))

    value, grads = lbm.value_and_grad(overrides, ["flow.u_lattice"], lid, checkpoint="none")
    assert value == pytest.approx(float(np.sum(np.where(run.solid, run.u[0], 0.0))), rel=1e-12)
    assert value == pytest.approx(8 * 0.05, rel=1e-12)
    assert grads["flow.u_lattice"] == pytest.approx(8.0, rel=1e-12)


def test_a_callable_objective_that_is_not_a_real_scalar_is_refused_in_one_line():
    with pytest.raises(LbmError, match=r"must return a real \(floating-point\) scalar, it returned shape \(10, 10\)"):
        lbm.value_and_grad(CAVITY, ["flow.reynolds"], lambda f: f["u"][0])
    with pytest.raises(LbmError, match=r"returned shape \(\) of int(32|64): return a float"):
        lbm.value_and_grad(CAVITY, ["flow.reynolds"], lambda f: jnp.sum(f["solid"]))
    with pytest.raises(LbmError, match=r"the callable failed on the final fields \{rho, u, solid\} .*KeyError: 'vel'"):
        lbm.value_and_grad(CAVITY, ["flow.reynolds"], lambda f: f["vel"].sum())


@pytest.mark.slow  # three calls, two compiles (3 s): keeping the program is for speed; the fast lane checks the value
# (test_cavity_lid_speed_gradient_equals_finite_differences) and the timing line on stderr (the engine line's test)
def test_a_repeated_call_reuses_the_compiled_gradient_and_logs_compile_and_run_times(monkeypatch, caplog):
    made = []
    real = api.gradient_function
    monkeypatch.setattr(api, "gradient_function", lambda *a, **k: made.append(a[1]) or real(*a, **k))
    monkeypatch.setattr(api, "COMPILED", {})
    overrides = [*CAVITY, "steps=5"]
    with caplog.at_level("INFO", logger="lbm"):
        first = lbm.value_and_grad(overrides, ["flow.u_lattice"], "kinetic_energy")
        again = lbm.value_and_grad(overrides, ["flow.u_lattice"], "kinetic_energy")
        other = lbm.value_and_grad(overrides, ["flow.reynolds"], "kinetic_energy")
    assert first == again and other[0] == first[0]
    assert made == [["flow.u_lattice"], ["flow.reynolds"]]
    assert caplog.text.count("value and gradient: compiled in") == 2
    assert caplog.text.count("value and gradient: 5 steps in") == 3


def test_the_engine_line_is_shown_on_stderr_where_no_logging_is_set_up(monkeypatch, capsys):
    import logging

    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # a plain script: no handler anywhere
    monkeypatch.setattr(logging.getLogger("lbm"), "handlers", [])
    lbm.value_and_grad([*CAVITY, "steps=3"], ["flow.u_lattice"], "kinetic_energy")
    err = capsys.readouterr().err
    assert "lbm: differentiable run: engine xla (engine=auto picks xla: native and pallas have no adjoint)" in err
    assert "lbm: value and gradient: 3 steps in" in err
    assert logging.getLogger().handlers == []  # the handler is removed again


def test_a_node_on_the_curved_wall_is_warned_of():
    # the case's default circle (radius ny // 9 = 2 about (10, 10)) has nodes on its wall: the mask changes with
    # any step of the radius, so the drag jumps there (lbm.run's central differences grow as 1/h)
    default = ["case=cylinder", "grid.nx=40", "grid.ny=20", "steps=10", "flow.reynolds=5", "case.bounce_back=interpolated",
               *F64]
    with pytest.warns(LbmWarning, match=r"case.radius: 12 wall links have a node on the wall \(e.g. \(8, 10\)"):
        prepare_gradient(default, ["case.radius"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", LbmWarning)
        prepare_gradient(CYLINDER, ["case.radius"])  # 3.3 about (10, 10): every node 0.125 cells or more off the wall
        prepare_gradient(default, ["flow.reynolds"])  # no geometry key: nothing to warn of


def test_a_wall_fraction_at_a_node_keeps_its_whole_derivative():
    # the default circle of 40x20 (radius 2 about (10, 10)) passes through nodes: q = 0 there; the derivative is
    # that of the unclipped q (the side that keeps the mask), continuous with a radius just below
    lattice = get_lattice("d2q9")
    wall = InterpolatedBounceBack.circle((10.0, 10.0), 2.0, (40, 20), lattice)
    assert np.min(wall.q) == 0.0

    def total(radius):
        return jnp.sum(wall.moved_to(ellipse_intersect((10.0, 10.0), (radius, radius), jnp), (40, 20), lattice).q)

    assert float(jax.grad(total)(2.0)) == pytest.approx(float(jax.grad(total)(1.9999)), rel=1e-3)
    # away from the mask's shape a q clipped by more than a rounding keeps the clip's derivative: that of the value
    r = 2.3  # the radius-2 mask's links: some q of the circle of radius 2.3 lie far outside [0, 1]
    h = 1e-4
    fd = (float(total(r + h)) - float(total(r - h))) / (2 * h)
    assert float(jax.grad(total)(r)) == pytest.approx(fd, rel=1e-3)


@pytest.mark.slow  # two compiles, as the kept-program test above
def test_a_callable_objective_is_recomputed_with_what_it_reads_now(monkeypatch):
    # a callable may read values its caller changes between calls: its compiled gradient is not kept
    monkeypatch.setattr(api, "COMPILED", {})
    scale = [1.0]
    overrides = [*CAVITY, "steps=5"]
    objective = lambda f: jnp.sum(f["rho"] * f["u"][0] ** 2) * scale[0]  # noqa: E731
    first = lbm.value_and_grad(overrides, ["flow.u_lattice"], objective)
    scale[0] = 2.0
    second = lbm.value_and_grad(overrides, ["flow.u_lattice"], objective)
    assert second[0] == pytest.approx(2 * first[0], rel=1e-12)
    assert second[1]["flow.u_lattice"] == pytest.approx(2 * first[1]["flow.u_lattice"], rel=1e-12)


def test_a_differentiable_run_leaves_a_callers_logging_level_alone(monkeypatch):
    # a caller who set up logging (a handler on the root logger, which is at WARNING) keeps its level: no INFO records
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    root, lbm_log = logging.getLogger(), logging.getLogger("lbm")
    monkeypatch.setattr(root, "handlers", [handler])
    levels = root.level, lbm_log.level
    root.setLevel(logging.WARNING)  # setLevel, not the attribute: it clears the loggers' cached isEnabledFor
    lbm_log.setLevel(logging.NOTSET)
    try:
        lbm.value_and_grad([*CAVITY, "steps=3"], ["flow.u_lattice"], "kinetic_energy")
    finally:
        root.setLevel(levels[0])
        lbm_log.setLevel(levels[1])
    assert not [r for r in records if r.levelno < logging.WARNING and r.name.startswith("lbm")]
