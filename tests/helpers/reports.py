"""Reading what a run writes, for the tests: its CSV tables, breakdowns and figures; a relative difference."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """(header, rows) of a CSV file with a header line."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def stage_rows(path: Path) -> dict[str, dict[str, str]]:
    """A breakdown table's rows by their ``stage``."""
    return {r["stage"]: r for r in read_csv(path)[1]}


def breakdown_rows(bd: Any, clock: str = "device") -> dict[str, Any]:
    """A computed breakdown's rows of ``clock`` by their ``stage``."""
    return {r["stage"]: r for r in bd.tables[clock].rows}


def drawn(fig: Any) -> Any:
    """The figure's renderer once it is drawn (window extents are final)."""
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def rel(a: float, b: float) -> float:
    """|a - b| / |b|."""
    return abs(a - b) / abs(b)
