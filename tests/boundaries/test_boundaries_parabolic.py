"""ParabolicBounceBack (lbm.boundaries.parabolic): exact Poiseuille between off-node walls at any TRT Lambda."""

import dataclasses

import jax
import numpy as np
import pytest
from helpers.boundaries import dfg_like, force_driven_channel_error, planes

from lbm.boundaries import InterpolatedBounceBack, ParabolicBounceBack
from lbm.boundaries.parabolic import parabolic_weights
from lbm.engines import make_engine
from lbm.engines.xla import XlaEngine
from lbm.kernels.collisions import trt_omega_minus
from lbm.lattice import D2Q9


def parabolic_channel_error(ny: int, q: float, tau: float, magic: float, parabolic: bool = True) -> float:
    """Max |u - exact| / u_max of a body-force channel (TRT, Lambda = magic) whose walls cut the wall links at q."""
    omega_minus = trt_omega_minus(1 / tau, magic)

    def walls(solid, lo, hi):
        wall = InterpolatedBounceBack.from_shape(solid, planes(lo, hi), D2Q9)
        return ParabolicBounceBack.like(wall, omega_minus) if parabolic else wall

    return force_driven_channel_error(ny, q, tau, walls, u_max=0.01, diffusion_times=6, omega_minus=omega_minus)


def test_weights_reduce_to_half_way_bounce_back_and_fall_back_in_gaps():
    """q = 1/2: no interpolation (κ = 0); a link with no fluid cell behind keeps only f*_i(x_f) (half-way)."""
    w = parabolic_weights(np.array([0.5, 0.2, 0.2]), np.array([True, True, False]), omega_minus=0.4)
    assert w[0, 0] == 0.0 and w[0, 1] == pytest.approx(0.6 / 1.4)
    np.testing.assert_allclose(w[:, 2], 0.0)
    assert w[3, 0] == pytest.approx(-(4 - 0.8) / 2)


def test_poiseuille_between_off_node_walls_is_exact():
    """The parabola to rounding at q = 0.3, tau 0.55, Lambda 3/16 (measured 5.5e-13; bound 1.5e-12)."""
    with jax.enable_x64(True):
        assert parabolic_channel_error(8, 0.3, 0.55, 3 / 16) < 1.5e-12


@pytest.mark.slow
@pytest.mark.parametrize("q,magic", [(0.2, 0.25), (0.8, 1 / 12)])
def test_poiseuille_is_exact_for_any_lambda_where_linear_bfl_is_not(q, magic):
    """The parabola to rounding (measured 1e-13 to 3e-12 over q in {0.2, 0.5, 0.8}, Lambda in {1/4, 3/16, 1/12},
    tau 0.8 and 0.55; here 1.1e-13 at q = 0.2, 1.5e-13 at q = 0.8), where linear BFL is off by 4e-3 to 3e-2 at the
    same settings (ny = 11); bounds 4.5e-13 (3x), 1e-3."""
    with jax.enable_x64(True):
        assert parabolic_channel_error(11, q, 0.8, magic) < 4.5e-13
        assert parabolic_channel_error(11, q, 0.8, magic, parabolic=False) > 1e-3


@pytest.mark.native
@pytest.mark.slow
def test_native_engine_runs_the_parabolic_wall_like_the_reference():
    """Engine equality (as tests/engines/test_engines.py): float64 agrees to rounding, forces too, odd step count."""
    with jax.enable_x64(True):
        setup = dfg_like(D2Q9, (40, 22))
        bfl = next(bc for bc in setup.boundaries if isinstance(bc, InterpolatedBounceBack))
        wall = ParabolicBounceBack.like(bfl, omega_minus=1.3)
        setup = dataclasses.replace(setup, boundaries=tuple(wall if bc is bfl else bc for bc in setup.boundaries))
        fast = make_engine(setup, engine="native")
        assert fast.name == "native"
        f_ref, aux_ref = XlaEngine(setup).advance(setup.initial_populations(), 23)
        f_fast, aux_fast = fast.advance(setup.initial_populations(), 23)
        f_ref = np.asarray(f_ref)
        np.testing.assert_allclose(np.asarray(f_fast), f_ref, rtol=0, atol=1e-13 * np.abs(f_ref).max())
        force = np.asarray(aux_ref["force"])
        assert np.abs(force[:, 0]).max() > 0
        np.testing.assert_allclose(np.asarray(aux_fast["force"]), force, rtol=0, atol=1e-12 * np.abs(force).max())
