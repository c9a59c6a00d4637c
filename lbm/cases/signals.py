"""Statistics of monitored time series: the dominant frequency, and the statistically stationary window.

A force history starts with a transient (the impulsive start, the growth of vortex
shedding). :func:`stationary_window` finds where it ends with MSER (the marginal standard
error rule, White 1997): the series is cut into batches (one shedding cycle each where the
signal oscillates, else equal lengths), and the start is the batch that minimises the
squared standard error of the mean of the batches after it. Statistics over that window come
with their uncertainty (the standard error of the batch means), and the window is refused when
too few batches remain or the oscillation amplitude still drifts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_BATCHES = 4
"""Batches (cycles) a stationary window must hold."""
DRIFT_TOLERANCE = 0.05
"""Largest relative change of the oscillation amplitude across the window that still counts as stationary."""


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
                      oscillation: float = 1e-3, min_cycle: int = 0) -> Window | None:
    """The stationary part of ``signal`` (None if there is none); cycles of ``reference`` (e.g. the lift) cut batches.

    Where ``reference`` oscillates (half its range over the second half of the series above
    ``oscillation``), batches are its cycles, and a series with too few cycles has no window;
    otherwise the series is cut into ``batches`` equal parts; cycles shorter than ``min_cycle`` samples
    do not count (see cycle_starts). The window starts at MSER's
    truncation point and must hold MIN_BATCHES batches whose oscillation amplitude drifts less
    than DRIFT_TOLERANCE.
    """
    x = np.asarray(signal, dtype=np.float64)
    ref = x if reference is None else np.asarray(reference, dtype=np.float64)
    periodic = 0.5 * np.ptp(ref[len(ref) // 2:]) > oscillation
    if periodic:
        edges = cycle_starts(ref, min_cycle=min_cycle)
    elif len(x) < 2 * batches:  # batches of at least two samples: a shorter series has no window to judge
        return None
    else:
        edges = np.linspace(0, len(x), batches + 1).astype(int)
    if len(edges) - 1 < MIN_BATCHES:
        return None
    full = Window(int(edges[0]), int(edges[-1]), edges, periodic)
    k = mser_start(full.batch_means(x))
    while len(edges) - 1 - k >= MIN_BATCHES:  # the transient of the amplitude may outlast that of the mean
        window = Window(int(edges[k]), int(edges[-1]), edges[k:], periodic)
        if not periodic or _steady_amplitude(window.batch_amplitudes(ref)):
            return window
        k += 1
    return None


def _steady_amplitude(amplitudes: np.ndarray) -> bool:
    """The mean oscillation amplitude of the first and second half of the batches differ by < DRIFT_TOLERANCE."""
    half = len(amplitudes) // 2
    first, last = np.mean(amplitudes[:half]), np.mean(amplitudes[half:])
    return bool(abs(last - first) <= DRIFT_TOLERANCE * max(abs(last), 1e-300))


def mean_with_error(values: np.ndarray) -> tuple[float, float]:
    """Mean of batch values and its standard error (std / sqrt(n))."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
