"""Time-series statistics (lbm.cases.signals): the stationary window and its uncertainties on signals with known answers."""


import numpy as np
import pytest
from helpers.paths import DATA

from lbm.cases.signals import (
    Window,
    cycle_starts,
    dominant_frequency,
    mean_with_error,
    mser_start,
    nonstationary_reason,
    stationary_window,
    window_problem,
)


def shedding(n=60000, period=4000.0, grow_until=30000, amplitude=1.1, seed=0):
    """A lift-like sine whose amplitude grows exponentially until ``grow_until``, then saturates, plus noise."""
    t = np.arange(n, dtype=np.float64)
    envelope = amplitude * np.minimum(1.0, np.exp((t - grow_until) / 3000.0))
    rng = np.random.default_rng(seed)
    return envelope * np.sin(2 * np.pi * t / period) + 1e-3 * rng.standard_normal(n)


def test_window_starts_after_the_growth_and_measures_the_period():
    cl = shedding()
    cd = 1.75 + 0.1 * np.abs(cl)  # drag oscillates at twice the shedding frequency
    w = stationary_window(cd, reference=cl)
    assert w is not None and w.periodic
    # growth is within 1% of saturation after 30000 + 3000 ln(100) ~ 43800 steps: the window may not start before
    # the amplitude has settled to the drift tolerance (5%: 30000 + 3000 ln(20) ~ 39000)
    assert 39000 <= w.start <= 46000
    period, err = mean_with_error(np.diff(w.edges).astype(float))
    assert period == pytest.approx(4000.0, abs=2.0) and err < 5.0
    amp, _ = mean_with_error(w.batch_amplitudes(cl))
    assert amp == pytest.approx(1.1, rel=0.01)


def test_a_signal_still_growing_has_no_window():
    cl = shedding(n=30000, grow_until=40000)
    assert stationary_window(1.5 + 0.0 * cl, reference=cl) is None


def test_too_few_cycles_give_no_window():
    t = np.arange(12000.0)
    cl = np.sin(2 * np.pi * t / 4000.0)  # three cycles
    assert stationary_window(cl, reference=cl) is None


def test_a_steady_signal_uses_equal_batches_and_drops_the_transient():
    t = np.arange(20000.0)
    rng = np.random.default_rng(1)
    cd = 5.58 + 2.0 * np.exp(-t / 800.0) + 1e-4 * rng.standard_normal(t.size)
    w = stationary_window(cd, reference=np.zeros_like(cd))
    assert w is not None and not w.periodic and w.batches >= 4
    mean, err = mean_with_error(w.batch_means(cd))
    assert mean == pytest.approx(5.58, abs=5 * err + 1e-4)
    assert cd[w.start] - 5.58 < 0.05  # the exponential start is left out


def test_mser_cuts_a_step_and_cycle_starts_find_upward_crossings():
    x = np.concatenate([np.full(5, 10.0), np.full(15, 1.0)]) + 1e-3 * np.random.default_rng(2).standard_normal(20)
    assert mser_start(x) in (5, 6)  # the step is cut; noise may cost one more sample
    t = np.arange(1000)
    ups = cycle_starts(np.sin(2 * np.pi * (t - 50) / 100.0))
    np.testing.assert_allclose(ups, np.arange(50, 1000, 100), atol=1)  # the rise through zero, to the sample


def test_dominant_frequency_of_a_sine():
    t = np.arange(4096)
    freq, periods = dominant_frequency(np.sin(2 * np.pi * t / 128.0))
    assert freq == pytest.approx(1 / 128.0, rel=1e-3) and periods == pytest.approx(32, rel=1e-3)


def test_an_oscillation_faster_than_the_cycles_sought_cuts_no_batches():
    """Start-up ringing (a fast, decaying lift wiggle over a drifting drag) is not shedding: no window.

    Modelled on the cylinder at 120x54 over 1500 steps: the lift rings with a period of about 80 steps and a
    half-range just above the 1e-3 threshold, where the shedding period estimate D / (0.2 U) is 1500 steps.
    """
    t = np.arange(1500)
    cl = 5e-3 * np.exp(-t / 2000) * np.sin(2 * np.pi * t / 80)
    cd = 3.0 - 1.5 * t / 1500 + 0.01 * np.sin(2 * np.pi * t / 80)
    assert len(cycle_starts(cl)) > 15  # without the bound every ringing period counts as a cycle
    assert len(cycle_starts(cl, min_cycle=500)) <= 3
    assert stationary_window(cd, reference=cl, min_cycle=500) is None


def test_a_series_too_short_for_its_batches_has_no_window():
    """10 samples cannot make 20 batches of two: no window (a 10-step cylinder run crashed on empty batches)."""
    assert stationary_window(np.linspace(1.0, 1.1, 10)) is None
    window = stationary_window(np.full(40, 2.0))  # 20 batches of two samples of a constant: stationary
    assert window is not None and window.batches >= 4 and np.all(np.diff(window.edges) >= 2)


@pytest.mark.parametrize("seed", range(5))
def test_stationary_noise_is_accepted_from_its_start(seed):
    """White noise about a mean, and a steady oscillation with cycles: stationary everywhere, the window is all of it."""
    rng = np.random.default_rng(seed)
    cd = 2.4 + 0.1 * rng.standard_normal(3000)
    w = stationary_window(cd, reference=np.zeros_like(cd))
    assert w is not None and w.stop - w.start >= 2500
    mean, err = mean_with_error(w.batch_means(cd))
    assert abs(mean - 2.4) < 4 * err
    t = np.arange(40000.0)
    cl = np.sin(2 * np.pi * t / 4000.0) + 1e-3 * rng.standard_normal(t.size)
    w = stationary_window(1.5 + 0.1 * cl**2, reference=cl)
    assert w is not None and w.periodic and w.batches >= 4


def test_a_trend_is_rejected_with_its_reason():
    """A drift of 5% over the run in noise of 1%: every window's batch means trend, so there is none."""
    rng = np.random.default_rng(3)
    t = np.arange(3000.0)
    cd = 2.4 * (1 + 0.05 * t / 3000) + 0.024 * rng.standard_normal(t.size)
    assert stationary_window(cd, reference=np.zeros_like(cd)) is None
    assert "mean still drifts" in nonstationary_reason(cd, np.zeros_like(cd))


def test_a_decaying_swing_is_left_out_of_the_window():
    """The obstacle run of issue 21: MSER's start (step 600) keeps a decaying swing of the drag (-0.7 to 6.6),
    while the mean settles; the swing's window is refused and the window starts where it has died out."""
    rng = np.random.default_rng(4)
    t = np.arange(3000.0)
    cd = 2.4 + 15.0 * np.exp(-t / 500) * np.sin(2 * np.pi * t / 290) + 0.02 * rng.standard_normal(t.size)
    edges = np.linspace(0, 3000, 21).astype(int)
    swing = Window(600, 3000, edges[4:], False)
    assert cd[600:900].min() < -0.5 and cd[600:900].max() > 5.5
    assert window_problem(swing, cd, np.zeros_like(cd)) == "its fluctuations still grow or decay"
    w = stationary_window(cd, reference=np.zeros_like(cd))
    assert w is not None and w.start >= 1500
    mean, err = mean_with_error(w.batch_means(cd))
    assert abs(mean - 2.4) < 0.02 and err < 0.02
    growing = 2.4 + 1e-3 * np.exp(t[:1200] / 200) * rng.standard_normal(1200)  # noise that grows to the end
    assert stationary_window(growing, reference=np.zeros(1200)) is None
    assert "grow or decay" in nonstationary_reason(growing, np.zeros(1200))


# The physical rule (issue 39 item 4): a batch spans the flow's own time scale (min_batch), a window four of them.

ACOUSTIC = 1455
"""The default cylinder's acoustic round trip 2 nx / c_s in steps (420 cells), its statistics' time scale."""


def test_the_default_cylinders_first_200_steps_are_a_transient_not_a_window():
    """The recorded start-up of the default cylinder (drag 112 at step 1, about -0.8 by step 200, where the
    settled drag is positive): 20 batches of 10 steps once made steps 151-200 a "stationary window"; batches
    of one acoustic round trip leave no window in 200 steps, and the reason names the time scale."""
    rows = np.loadtxt(DATA / "cylinder_startup_200_steps.csv", delimiter=",", skiprows=4)
    cd, cl = rows[:, 1], rows[:, 2]
    assert len(cd) == 200 and cd[0] > 100 and cd[-50:].mean() < 0
    old = stationary_window(cd, reference=cl, min_cycle=1666)  # the rule without a time scale
    assert old is not None and (old.start, old.stop) == (150, 200)
    assert stationary_window(cd, reference=cl, min_cycle=1666, min_batch=ACOUSTIC) is None
    reason = nonstationary_reason(cd, cl, min_cycle=1666, min_batch=ACOUSTIC, scale="the acoustic round trip")
    assert reason == "the series spans 0.137 times the acoustic round trip (1455 samples); a window spans at least 4"


@pytest.mark.parametrize("n, found", [(4 * ACOUSTIC - 10, False), (6 * ACOUSTIC, True), (20 * ACOUSTIC, True)])
def test_an_acoustic_ringing_is_averaged_over_whole_periods(n, found):
    """An undamped ringing of period = the time scale about 1.4: no window before the series spans four periods;
    over six or more, one whose mean is 1.4 (each batch averages a whole period)."""
    t = np.arange(n, dtype=np.float64)
    cd = 1.4 + 0.3 * np.sin(2 * np.pi * t / ACOUSTIC + 0.3) + 1e-3 * np.random.default_rng(5).standard_normal(n)
    w = stationary_window(cd, reference=np.zeros(n), min_batch=ACOUSTIC)
    assert (w is not None) == found
    if w is not None:
        assert np.all(np.diff(w.edges) >= ACOUSTIC) and w.stop - w.start >= 4 * ACOUSTIC
        mean, err = mean_with_error(w.batch_means(cd))
        assert abs(mean - 1.4) < 3e-4 and err < 1e-4
    else:
        assert "spans 3.99 times" in nonstationary_reason(cd, np.zeros(n), min_batch=ACOUSTIC)


def test_a_decaying_ringing_is_left_out_and_its_mean_found():
    """Start-up ringing (period = the time scale) decaying as exp(-t/4000) about 1.4: the window starts where
    the ringing is below 2% of the mean, and measures 1.4."""
    n = 40000
    t = np.arange(n, dtype=np.float64)
    cd = 1.4 + 1.5 * np.exp(-t / 4000) * np.sin(2 * np.pi * t / ACOUSTIC) + 1e-3 * np.random.default_rng(6).standard_normal(n)
    w = stationary_window(cd, reference=np.zeros(n), min_batch=ACOUSTIC)
    assert w is not None and 1.5 * np.exp(-w.start / 4000) < 0.02 * 1.4
    mean, err = mean_with_error(w.batch_means(cd))
    assert abs(mean - 1.4) < max(3 * err, 1e-4)


@pytest.mark.parametrize("n, found", [(3 * 1000, False), (4 * 1000 - 1, False), (20000, True)])
def test_a_start_up_transient_needs_four_time_scales(n, found):
    """A drag relaxing as exp(-t/1000) to 5.58 (time scale 1000 samples): no window before the series spans four
    time scales; then one that leaves the relaxation out and measures 5.58."""
    t = np.arange(n, dtype=np.float64)
    cd = 5.58 + 2.0 * np.exp(-t / 1000) + 1e-4 * np.random.default_rng(7).standard_normal(n)
    w = stationary_window(cd, reference=np.zeros(n), min_batch=1000)
    assert (w is not None) == found
    if w is not None:
        assert w.batches >= 4 and np.all(np.diff(w.edges) >= 1000) and cd[w.start] - 5.58 < 0.01
        mean, err = mean_with_error(w.batch_means(cd))
        assert mean == pytest.approx(5.58, abs=5 * err + 1e-4)


def test_periodic_shedding_windows_span_four_time_scales():
    """Shedding cycles of 4000 samples (growing until 30000): a window of whole cycles with the period measured
    where the time scale is shorter than a cycle; a time scale as long as the window leaves none."""
    cl = shedding()
    cd = 1.75 + 0.1 * np.abs(cl)
    w = stationary_window(cd, reference=cl, min_cycle=1333, min_batch=ACOUSTIC)
    assert w is not None and w.periodic and w.stop - w.start >= 4 * ACOUSTIC
    assert np.mean(np.diff(w.edges)) == pytest.approx(4000.0, abs=2.0)
    assert stationary_window(cd, reference=cl, min_cycle=1333, min_batch=w.stop - w.start) is None
