"""Stage names and trace scope names: the one vocabulary shared by engines, the profiler, reports and docs.

A timestep runs these stages in this order (DESIGN.md); a case skips the ones it does not
need. Where one kernel does several stages, its scope joins their names with ``+`` after a
prefix (``fused_bulk+macroscopic+equilibrium+collide+stream``) and the profiler splits it.
"""

from __future__ import annotations

STAGES = ("outflow", "macroscopic", "equilibrium", "inlet", "collide", "bounce_back", "forces", "stream")
"""Canonical stage names in timestep order."""

HALO = "halo"
"""Stage name of the exchange between devices (sharded runs)."""

TIMESTEP = "timestep"
"""Scope (fused mode) and trace annotation (instrumented mode) around one timestep."""

FUSED_STEP = "fused_step"
"""Name of the fused-mode executable in compile reports and breakdowns."""

BULK_PREFIX = "fused_bulk"
"""Prefix of the scope of a kernel that does several stages on every cell at once."""

BULK_STAGES = ("macroscopic", "equilibrium", "collide", "stream")
"""The stages a bulk kernel (native, Pallas) does on every cell."""

BULK_SCOPE = "+".join((BULK_PREFIX, *BULK_STAGES))
"""named_scope of a bulk kernel: ``fused_bulk+macroscopic+equilibrium+collide+stream``."""


def split_scope(name: str) -> tuple[str, ...]:
    """The stage names a scope component stands for: itself, or the ``+``-joined stages after a bulk prefix."""
    if "+" in name:
        return tuple(p for p in name.split("+")[1:] if p in STAGES)
    return (name,) if name in STAGES or name == HALO else ()

CORE_STAGES = ("macroscopic", "equilibrium", "collide", "stream")
"""Stages every timestep runs on every cell; the others come from the case's boundary conditions."""
