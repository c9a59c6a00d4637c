"""The published data lbm is checked against (CSV files, each with its source on a leading '#' line) and their
readers: light (no JAX), so that ``python -m lbm validate --help`` and the cases share them."""

from __future__ import annotations

import csv
from importlib import resources


def read_reference_csv(name: str) -> list[dict[str, str]]:
    """Rows of a packaged reference CSV (its leading '#' source line skipped)."""
    text = resources.files("lbm.reference").joinpath(name).read_text()
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def dfg_intervals() -> dict[str, dict[str, tuple[float, float]]]:
    """DFG variant -> quantity -> the published (low, high) of Schafer & Turek (1996)."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for row in read_reference_csv("schafer_turek_1996_intervals.csv"):
        out.setdefault(row["variant"], {})[row["quantity"]] = (float(row["low"]), float(row["high"]))
    return out
