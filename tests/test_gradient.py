"""lbm.value_and_grad against central finite differences of lbm.run, in float64, on small grids (lbm.diff)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lbm
from lbm.boundaries.interpolated import InterpolatedBounceBack
from lbm.diff import finite_difference
from lbm.diff.api import prepare_gradient
from lbm.diff.checkpointing import repeat, segment_lengths
from lbm.diff.geometry import moved_circle
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


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


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
def test_checkpoint_policies_give_the_same_gradient():
    param = prepare_gradient(["case=cavity", "grid.nx=6", "grid.ny=6", "steps=11", *F64], ["flow.u_lattice"])

    def grad(policy: str, every: int | None = None) -> float:
        def ke(u: jnp.ndarray) -> jnp.ndarray:
            out = differentiable_run(param, {"flow.u_lattice": u}, 11, policy, every)
            return jnp.sum(out["rho"] * jnp.sum(out["u"] ** 2, axis=0))
        return float(jax.grad(ke)(jnp.asarray(param.base["flow.u_lattice"])))

    reference = grad("none")
    for policy, every in (("every", 4), ("sqrt", None), ("binomial", None)):
        assert grad(policy, every) == pytest.approx(reference, rel=1e-12), policy


def test_segment_lengths_and_nested_repeat():
    assert segment_lengths("none", 100) == ()
    assert segment_lengths("every", 100, every=8) == (8,)
    assert segment_lengths("sqrt", 10000) == (100,)
    assert segment_lengths("binomial", 1000) == (100, 10)
    for lengths in ((), (4,), (9, 3), (100, 10)):
        assert int(repeat(lambda c: c + 1, jnp.asarray(0), 1003, lengths)) == 1003
    with pytest.raises(LbmError, match="every=k"):
        segment_lengths("every", 10)
    with pytest.raises(LbmError, match="choose one of"):
        segment_lengths("revolve", 10)


def test_moved_circle_at_its_own_centre_and_radius_is_the_numpy_wall():
    lattice = get_lattice("d2q9")
    wall = InterpolatedBounceBack.circle((10.3, 9.6), 3.7, (30, 20), lattice)
    moved = moved_circle(wall, (30, 20), lattice, (10.3, 9.6), 3.7)
    np.testing.assert_allclose(np.asarray(moved.q), wall.q, atol=1e-5)  # float32 unless x64 is on
    np.testing.assert_allclose(np.asarray(moved.weights), wall.weights, atol=1e-5)
    bigger = moved_circle(wall, (30, 20), lattice, (10.3, 9.6), 3.8)
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
    with pytest.raises(LbmError, match="collision.smagorinsky=0.1: the Smagorinsky rate has no finite derivative"):
        lbm.value_and_grad(CAVITY + ["collision=mrt", "collision.smagorinsky=0.1"], ["flow.reynolds"], "kinetic_energy")
