"""Without reference cycles, a window whose batches are shorter than the signal's own oscillation is not stationary."""

import re

import numpy as np
import pytest
from helpers.runs import advance, run_config

from lbm.cases.signals import cycles_phrase, mean_with_error, nonstationary_reason, slow_oscillation, stationary_window


@pytest.mark.parametrize("period", [137.0, 400.0, 900.0])
def test_slow_oscillation_finds_a_known_sinusoid(period):
    rng = np.random.default_rng(1)
    t = np.arange(3000.0)
    x = 2.0 + 0.5 * np.sin(2 * np.pi * t / period + 0.3) + 1e-3 * t + 0.05 * rng.standard_normal(t.size)
    found, amplitude = slow_oscillation(x)
    assert found == pytest.approx(period, rel=0.02) and amplitude == pytest.approx(0.5, rel=0.03)
    assert slow_oscillation(2.0 + 0.05 * rng.standard_normal(t.size)) == (0.0, 0.0)  # noise carries no sinusoid


def test_batches_shorter_than_the_oscillation_give_no_window():
    """20 batches of 150 samples of a 400-sample oscillation: their means follow its phase, not its mean."""
    t = np.arange(3000.0)
    cd = 2.0 + 1.0 * np.sin(2 * np.pi * t / 400)
    assert stationary_window(cd, reference=np.zeros_like(cd)) is None
    reason = re.search(r"shorter than its oscillation's period \((\d+) samples\)$", nonstationary_reason(cd, 0 * cd))
    assert reason and 300 < int(reason[1]) < 500  # estimated over the last four batches: 1.5 periods


@pytest.mark.parametrize("period,amplitude", [(50.0, 1.0), (400.0, 0.05)])
def test_a_fast_or_small_oscillation_keeps_its_window(period, amplitude):
    """Batches spanning several periods, or a slow swing below DRIFT_TOLERANCE of the mean: the whole series."""
    rng = np.random.default_rng(2)
    t = np.arange(3000.0)
    cd = 2.0 + amplitude * np.sin(2 * np.pi * t / period) + 0.01 * rng.standard_normal(t.size)
    window = stationary_window(cd, reference=np.zeros_like(cd))
    assert window is not None and window.start == 0 and window.stop == 3000
    mean, error = mean_with_error(window.batch_means(cd))
    assert abs(mean - 2.0) < 3 * error + 1e-3


def test_cycles_phrase_counts_periods_only_of_an_oscillating_lift():
    """A report names the lift's periods only when it oscillates (a flat lift once read "7.5 lift periods")."""
    t = np.arange(2000.0)
    assert cycles_phrase(0.4 * np.sin(2 * np.pi * t / 125.0), "lift") == "8.0 lift periods in the second half"
    flat = 4e-4 * np.sin(2 * np.pi * t / 133.0)
    assert cycles_phrase(flat, "lift") == "the lift does not oscillate (half-range 0.0004 in the second half)"


@pytest.mark.slow
@pytest.mark.native_optimised  # a long native run (tests/conftest.py)
def test_the_default_cylinders_first_1500_steps_hold_no_window():
    """The default cylinder's drag over its first 1500 steps swings between about -4.5 and 6.5 with the start-up's
    ringing, and the lift does not oscillate yet: no drag is claimed (it was 1.13 +- 0.57 over steps 376-1500)."""
    run = run_config("steps=1500", "output.plots=false")
    case, _, _ = advance(run)
    rows = case.coefficients()
    cd, cl = rows[:, -2], rows[:, -1]
    assert len(cd) == 1500 and cd[400:].min() < -3 and cd[400:].max() > 5 and np.ptp(cl[750:]) < 2e-3
    assert stationary_window(cd, reference=cl) is None
    assert "shorter than its oscillation's period" in nonstationary_reason(cd, cl)
    assert cycles_phrase(cl, "lift").startswith("the lift does not oscillate")
