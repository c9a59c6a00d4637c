"""Statistics of monitored time series: the dominant frequency, and the statistically stationary window.

A force history starts with a transient (the impulsive start, the growth of vortex
shedding). :func:`stationary_window` finds where it ends with MSER (the marginal standard
error rule, White 1997): the series is cut into batches (one shedding cycle each where the
signal oscillates, else equal lengths), and the start is the batch that minimises the
squared standard error of the mean of the batches after it. Statistics over that window come
with their uncertainty (the standard error of the batch means). The start moves to later batches
while the window is not stationary:

- its batch means drift: the two halves' means differ, or the means trend, by more than
  STATIONARY_Z standard errors and MEAN_TOLERANCE of the mean;
- the oscillation amplitude drifts: the reference's cycles by DRIFT_TOLERANCE; without cycles, the
  batches' half range (beyond Z errors and DRIFT_TOLERANCE of the mean) or the halves' standard
  deviations (by more than SPREAD_RATIO);
- without cycles, successive batch means are correlated (von Neumann's ratio), or a sinusoid slower than the
  batches carries a quarter of the window's variance: the batches are shorter than the signal's slow changes,
  and their means follow its phase.

No window is found when fewer than MIN_BATCHES batches remain; :func:`nonstationary_reason` says why.

The rule is also physical: a batch must span the flow's own time scale (``min_batch`` samples, given by the
case: e.g. the cylinder's convective time D/U or its acoustic round trip 2 nx / c_s, whichever is longer), so a
window spans at least MIN_BATCHES of them. Batches shorter than that are a few samples of a start-up transient
or of its acoustic ringing, whose means look stationary only because nothing has had time to change: without
this bound, the first 200 steps of the default cylinder gave a "stationary window" of steps 151-200.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_BATCHES = 4
"""Batches (cycles) a stationary window must hold."""
DRIFT_TOLERANCE = 0.05
"""Largest relative change of the oscillation amplitude across the window that still counts as stationary."""
STATIONARY_Z = 3.0
"""Standard errors by which the two halves of a window may differ (in batch mean, or in batch amplitude) by chance."""
SPREAD_RATIO = 1.5
"""Without cycles, the two halves' standard deviations may differ by this factor (a decaying transient differs more)."""
MEAN_TOLERANCE = 1e-3
"""A difference of the halves' means below this fraction of the mean counts as stationary, however significant."""
OSCILLATION_SHARE = 0.25
"""Without cycles, a sinusoid that carries this share of a window's variance (detrended), with an amplitude above
DRIFT_TOLERANCE of the mean, is an oscillation each batch must span a period of (shorter batches follow its phase)."""


def dominant_frequency(signal: np.ndarray) -> tuple[float, float]:
    """Frequency (cycles per sample) of the strongest oscillation, and how many periods the signal spans."""
    x = np.asarray(signal, dtype=np.float64) - np.mean(signal)
    n = len(x)
    if n < 8 or not np.any(x):
        return 0.0, 0.0
    pad = 8 * n
    spec = np.abs(np.fft.rfft(x * np.hanning(n), pad))
    k = int(np.argmax(spec[1:])) + 1
    if 1 <= k < len(spec) - 1:  # parabolic interpolation of the peak
        a, b, c = np.log(spec[k - 1] + 1e-300), np.log(spec[k] + 1e-300), np.log(spec[k + 1] + 1e-300)
        denom = a - 2 * b + c
        k = k + (0.5 * (a - c) / denom if denom != 0 else 0.0)
    freq = k / pad
    return float(freq), float(freq * n)


def cycles_phrase(reference: np.ndarray, name: str, oscillation: float = 1e-3) -> str:
    """How many periods of ``reference`` its second half spans, or that it does not oscillate, as a report phrase."""
    second = np.asarray(reference, dtype=np.float64)[len(reference) // 2:]
    half_range = 0.5 * float(np.ptp(second)) if len(second) else 0.0
    if half_range <= oscillation:
        return f"the {name} does not oscillate (half-range {half_range:.2g} in the second half)"
    _, periods = dominant_frequency(second)
    return f"{periods:.1f} {name} periods in the second half"


def slow_oscillation(signal: np.ndarray) -> tuple[float, float]:
    """(Samples per period, amplitude) of the sinusoid carrying OSCILLATION_SHARE of the variance of ``signal``
    (linearly detrended), else (0, 0)."""
    x = np.asarray(signal, dtype=np.float64)
    t = np.arange(len(x), dtype=np.float64)
    if len(x) < 8:
        return 0.0, 0.0
    x = x - np.polyval(np.polyfit(t, x, 1), t)
    total = float(x @ x)
    freq, _ = dominant_frequency(x)
    if total == 0 or freq <= 0:
        return 0.0, 0.0
    basis = np.stack([np.cos(2 * np.pi * freq * t), np.sin(2 * np.pi * freq * t)], axis=1)
    coef = np.linalg.lstsq(basis, x, rcond=None)[0]
    fit = basis @ coef
    return (1.0 / freq, float(np.hypot(*coef))) if float(fit @ fit) >= OSCILLATION_SHARE * total else (0.0, 0.0)


def batch_edges(signal: np.ndarray, reference: np.ndarray, batches: int = 20, oscillation: float = 1e-3,
                min_cycle: int = 0, min_batch: int = 0) -> tuple[np.ndarray, bool]:
    """(Batch edges, whether they are ``reference``'s cycles) for the window rules of :func:`stationary_window`.

    Without cycles the series is cut into ``batches`` equal parts, fewer where a part would be shorter than
    ``min_batch`` samples (the flow's time scale) or than two samples: a short series gives fewer than MIN_BATCHES.
    """
    x, ref = np.asarray(signal, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if 0.5 * np.ptp(ref[len(ref) // 2:]) > oscillation:
        return cycle_starts(ref, min_cycle=min_cycle), True
    count = min(batches, len(x) // max(2, min_batch))
    return (np.linspace(0, len(x), count + 1).astype(int) if count else np.zeros(0, np.int64)), False


def cycle_starts(signal: np.ndarray, hysteresis: float = 0.2, min_cycle: int = 0) -> np.ndarray:
    """Indices where ``signal`` rises through the median of its second half (cycle boundaries of an oscillation).

    A rise counts only after the signal has been below the level by ``hysteresis`` times the
    half-range of the second half, and reaches above it by as much (a Schmitt trigger), so that
    noise on a small or slow signal makes no cycles. A rise within ``min_cycle`` samples of the
    last counted one is not a new cycle (a faster oscillation, e.g. acoustic ringing, is not the one sought).
    """
    x = np.asarray(signal, dtype=np.float64)
    second = x[len(x) // 2:]
    level = np.median(second)
    band = hysteresis * 0.5 * np.ptp(second)
    starts, armed, candidate = [], False, None
    for i, v in enumerate(x):
        if v < level - band:
            armed, candidate = True, None
        elif armed and candidate is None and v >= level:
            candidate = i
        if armed and candidate is not None and v > level + band:
            if not starts or candidate - starts[-1] >= min_cycle:
                starts.append(candidate)
            armed, candidate = False, None
    return np.asarray(starts, dtype=np.int64)


def mser_start(batch_means: np.ndarray) -> int:
    """The batch index k (in the first half) minimising var(x[k:]) / (n - k): MSER's truncation point."""
    x = np.asarray(batch_means, dtype=np.float64)
    n = len(x)
    best, k_best = np.inf, 0
    for k in range(max(1, n // 2 + 1)):
        tail = x[k:]
        score = np.var(tail) / len(tail)
        if score < best:
            best, k_best = score, k
    return k_best


@dataclass(frozen=True)
class Window:
    """A stationary window: samples ``[start, stop)`` cut into batches (cycles) at ``edges``."""

    start: int
    stop: int
    edges: np.ndarray
    periodic: bool

    @property
    def batches(self) -> int:
        """Number of batches (cycles) in the window."""
        return len(self.edges) - 1

    def batch_means(self, signal: np.ndarray) -> np.ndarray:
        """Mean of ``signal`` over each batch."""
        return np.array([np.mean(signal[a:b]) for a, b in zip(self.edges[:-1], self.edges[1:], strict=True)])

    def batch_amplitudes(self, signal: np.ndarray) -> np.ndarray:
        """Half the peak-to-peak range of ``signal`` in each batch."""
        return np.array([0.5 * np.ptp(signal[a:b]) for a, b in zip(self.edges[:-1], self.edges[1:], strict=True)])


def stationary_window(signal: np.ndarray, reference: np.ndarray | None = None, batches: int = 20,
                      oscillation: float = 1e-3, min_cycle: int = 0, min_batch: int = 0) -> Window | None:
    """The stationary part of ``signal`` (None if there is none); cycles of ``reference`` (e.g. the lift) cut batches.

    Where ``reference`` oscillates (half its range over the second half of the series above
    ``oscillation``), batches are its cycles, and a series with too few cycles has no window;
    otherwise the series is cut into ``batches`` equal parts of at least ``min_batch`` samples; cycles shorter than
    ``min_cycle`` samples do not count (see cycle_starts). The window starts at MSER's
    truncation point, must hold MIN_BATCHES batches whose oscillation amplitude drifts less
    than DRIFT_TOLERANCE, and must span MIN_BATCHES times ``min_batch`` samples.
    """
    x = np.asarray(signal, dtype=np.float64)
    ref = x if reference is None else np.asarray(reference, dtype=np.float64)
    edges, periodic = batch_edges(x, ref, batches, oscillation, min_cycle, min_batch)
    if len(edges) - 1 < MIN_BATCHES:
        return None
    full = Window(int(edges[0]), int(edges[-1]), edges, periodic)
    k = mser_start(full.batch_means(x))
    while len(edges) - 1 - k >= MIN_BATCHES and edges[-1] - edges[k] >= MIN_BATCHES * min_batch:
        window = Window(int(edges[k]), int(edges[-1]), edges[k:], periodic)  # the amplitude's transient may be longer
        if window_problem(window, x, ref) is None:
            return window
        k += 1
    return None


def window_problem(window: Window, signal: np.ndarray, reference: np.ndarray) -> str | None:
    """Why ``window`` of ``signal`` is not stationary (None if it is): its batch means or amplitudes drift."""
    means = window.batch_means(signal)
    level = abs(float(np.mean(means)))
    if _drifts(means, MEAN_TOLERANCE * level):
        return "its mean still drifts (beyond the batches' errors)"
    if not window.periodic and np.std(means) > MEAN_TOLERANCE * level and _correlated(means):
        return "its batches are shorter than the signal's slow changes (their means are correlated)"
    if window.periodic and not _steady_amplitude(window.batch_amplitudes(reference)):
        return "the oscillation amplitude still drifts"
    if not window.periodic and (_drifts(window.batch_amplitudes(signal), DRIFT_TOLERANCE * level)
                                or _spread_changes(signal[window.start:window.stop], DRIFT_TOLERANCE * level)):
        return "its fluctuations still grow or decay"
    if not window.periodic:
        period, amplitude = slow_oscillation(signal[window.start:window.stop])
        if period > float(np.min(np.diff(window.edges))) and amplitude > DRIFT_TOLERANCE * level:
            return f"its batches are shorter than its oscillation's period ({period:.0f} samples)"
    return None


def _correlated(values: np.ndarray) -> bool:
    """von Neumann's ratio test: successive ``values`` are positively correlated beyond STATIONARY_Z (they are not
    independent batch means: a slow oscillation or a trend spans several batches)."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    spread = float(((v - v.mean()) ** 2).sum())
    if n < 4 or spread == 0:
        return False
    ratio = float((np.diff(v) ** 2).sum()) / spread  # 2 for independent values
    return (2.0 - ratio) / np.sqrt(4.0 * (n - 2) / (n * n - 1)) > STATIONARY_Z


def _spread_changes(x: np.ndarray, floor: float) -> bool:
    """The standard deviations of the two halves of ``x`` differ by more than SPREAD_RATIO times and by ``floor``."""
    a, b = np.std(x[: len(x) // 2]), np.std(x[len(x) // 2:])
    low, high = min(a, b), max(a, b)
    return bool(high - low > floor and high > SPREAD_RATIO * low)


def _drifts(values: np.ndarray, floor: float) -> bool:
    """Batch values that change across the window by more than ``floor`` and beyond chance (STATIONARY_Z errors):
    their halves' means differ, or their least-squares line has a significant slope."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    a, b = v[: n // 2], v[n // 2:]
    if len(a) < 2 or len(b) < 2:
        return False
    diff = abs(float(b.mean() - a.mean()))
    error = float(np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
    if diff > STATIONARY_Z * error and diff > floor:
        return True
    i = np.arange(n) - (n - 1) / 2
    slope = float((i * v).sum() / (i * i).sum())
    residual = v - v.mean() - slope * i
    slope_error = float(np.sqrt((residual @ residual) / (n - 2) / (i @ i)))
    return abs(slope) > STATIONARY_Z * slope_error and abs(slope) * (n - 1) > floor


def nonstationary_reason(signal: np.ndarray, reference: np.ndarray | None = None, batches: int = 20,
                         oscillation: float = 1e-3, min_cycle: int = 0, min_batch: int = 0,
                         scale: str = "the flow's time scale") -> str:
    """Why :func:`stationary_window` finds no window in ``signal`` (same arguments), as a phrase for a report;
    ``scale`` names what ``min_batch`` samples are (e.g. "the convective time D/U")."""
    x = np.asarray(signal, dtype=np.float64)
    ref = x if reference is None else np.asarray(reference, dtype=np.float64)
    edges, periodic = batch_edges(x, ref, batches, oscillation, min_cycle, min_batch)
    if len(x) < MIN_BATCHES * min_batch:
        return (f"the series spans {len(x) / min_batch:.3g} times {scale} ({min_batch} samples); a window spans "
                f"at least {MIN_BATCHES}")
    if len(edges) - 1 < MIN_BATCHES:
        kind = "oscillation cycles" if periodic else "batches"
        return f"{max(len(edges) - 1, 0)} {kind}, fewer than the {MIN_BATCHES} a window needs"
    last = Window(int(edges[-1 - MIN_BATCHES]), int(edges[-1]), edges[-1 - MIN_BATCHES:], periodic)
    problem = window_problem(last, x, ref)
    return f"even the last {MIN_BATCHES} {'cycles' if periodic else 'batches'}: {problem}" if problem else \
        "no stationary window of enough batches"


def _steady_amplitude(amplitudes: np.ndarray) -> bool:
    """The mean oscillation amplitude of the first and second half of the batches differ by < DRIFT_TOLERANCE."""
    half = len(amplitudes) // 2
    first, last = np.mean(amplitudes[:half]), np.mean(amplitudes[half:])
    return bool(abs(last - first) <= DRIFT_TOLERANCE * max(abs(last), 1e-300))


def mean_with_error(values: np.ndarray) -> tuple[float, float]:
    """Mean of batch values and its standard error (std / sqrt(n))."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
