"""The profile's pictures at a glance, checked on the figures: bar labels that fit their bars and do not collide,
legends that cover no bar, panels side by side without a gap, small rows written out, a timeline titled by what
it shows."""

from __future__ import annotations

import pytest
from helpers.reports import drawn

from lbm.profiling.breakdown import Breakdown, Table
from lbm.profiling.events import Span
from lbm.profiling.plots import breakdown_figure, timeline_png


def table(clock: str, shares: dict[str, tuple[float, float]]) -> Table:
    """A clock's table of rows (name -> (share, mean_ms)); fused sets and ``(unscoped)`` get their status."""
    rows = [{"stage": n, "status": "fused-group" if "+" in n else "unscoped" if n.startswith("(") else "measured",
             "share": s, "mean_ms": m} for n, (s, m) in shares.items()]
    return Table(clock, clock, rows)


def breakdown(mode: str, tables: list[Table], timeline: dict | None = None) -> Breakdown:
    """A Breakdown of these tables (the first the headline)."""
    return Breakdown(mode, {t.clock: t for t in tables}, tables[0].clock, [], {}, [], {}, timeline=timeline or {})


INSTRUMENTED = [  # measured on a 120x50 cylinder (profile.enabled=true mode=instrumented, CPU)
    table("device", {"outflow": (0.0076, 0.024), "macroscopic": (0.0327, 0.104), "equilibrium": (0.1507, 0.480),
                     "inlet": (0.1713, 0.545), "collide": (0.1571, 0.500), "bounce_back": (0.1348, 0.429),
                     "forces": (0.1579, 0.502), "stream": (0.1879, 0.598)}),
    table("host", {"outflow": (0.1565, 0.343), "macroscopic": (0.1858, 0.408), "equilibrium": (0.2716, 0.596),
                   "inlet": (0.0771, 0.169), "collide": (0.038, 0.083), "bounce_back": (0.0252, 0.055),
                   "forces": (0.0497, 0.109), "stream": (0.1961, 0.430)}),
]
FUSED = [table("device", {"forces": (0.0606, 0.00174), "(unscoped)": (0.005, 0.00014),
                          "outflow+macroscopic+equilibrium+inlet+collide+bounce_back+stream": (0.9344, 0.02625)})]


def test_instrumented_breakdown_labels_fit_their_bars_and_legends_cover_no_bar():
    fig = breakdown_figure(breakdown("instrumented", INSTRUMENTED), "cylinder 120x50, instrumented mode")
    renderer = drawn(fig)
    shares, means = fig.axes[:2]
    labels = [t.get_window_extent(renderer) for t in shares.texts]
    assert labels, "no bar is labelled"
    for i, a in enumerate(labels):
        assert not any(a.overlaps(b) for b in labels[i + 1:]), "two bar labels overlap"
    bars = [p.get_window_extent(renderer) for p in shares.patches]
    for text, box in zip(shares.texts, labels, strict=True):  # each label inside the bar it names
        x, y = shares.transData.transform(text.get_position())
        bar = next(b for b in bars if b.x0 <= x <= b.x1 and b.y0 <= y <= b.y1)
        assert bar.x0 <= box.x0 and box.x1 <= bar.x1
    for ax in (shares, means):
        legend = ax.get_legend().get_window_extent(renderer)
        assert not any(legend.overlaps(p.get_window_extent(renderer)) for p in ax.patches), "a legend covers a bar"


def test_fused_breakdown_panels_sit_close_and_small_rows_are_written_out():
    fig = breakdown_figure(breakdown("fused", FUSED), "cylinder 120x50, fused mode")
    renderer = drawn(fig)
    shares, means = fig.axes[:2]
    gap = means.get_window_extent(renderer).x0 - shares.get_window_extent(renderer).x1
    assert gap < 0.2 * fig.bbox.width, f"{gap:.0f} px between the panels' frames"  # was 36%: one long tick label
    written = " ".join(t.get_text() for t in means.texts)
    assert "(0.5%)" in written and "0.00014 ms" in written  # the 0.5% row, a bar too thin to see, has its value


def span(i: int, ts: int, dur: int, steps: int) -> Span:
    """A steady host span: a timestep (steps=1) or a fused chunk of ``steps``."""
    return Span(i, ts, dur, "timestep", 0, steps=steps)


@pytest.mark.parametrize("spans, expected", [
    ([span(1, 0, 2_600_000, 20)], "1 steady chunk of 20 timesteps"),
    ([span(i, i * 10_000, 9_000, 1) for i in range(6)], "3 steady timesteps"),
])
def test_the_timeline_title_says_what_it_shows(tmp_path, monkeypatch, spans, expected):
    import matplotlib.pyplot as plt

    titles = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (titles.append(fig.axes[0].get_title()), real_close(fig)))
    timeline_png(breakdown("fused", FUSED, {"steady": spans}), tmp_path / "timeline.png", title="cylinder")
    assert titles == [f"cylinder: {expected}"]
