"""Stage names and trace scope names: the one vocabulary shared by engines, the profiler, reports and docs.

A timestep runs these stages in this order (DESIGN.md); a case skips the ones it does not
need. Where one kernel does several stages, its scope joins their names with ``+`` after a
prefix (``fused_bulk+macroscopic+equilibrium+collide+stream``) and the profiler splits it.
"""

from __future__ import annotations

import re

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

CORE_STAGES = ("macroscopic", "equilibrium", "collide", "stream")
"""Stages every timestep runs on every cell (the ones a bulk kernel, native or Pallas, does on every cell); the
others come from the case's boundary conditions."""

BULK_SCOPE = "+".join((BULK_PREFIX, *CORE_STAGES))
"""named_scope of a bulk kernel: ``fused_bulk+macroscopic+equilibrium+collide+stream``."""

_STAGE_WORDS = re.compile("|".join(sorted(map(re.escape, STAGES), key=len, reverse=True)))


def scope_names(part: str) -> tuple[str, ...]:
    """The names one scope component stands for: its ``+``-joined parts, or, for a bulk kernel's name whose ``+``
    became ``_`` (Triton kernel names are identifiers: ``fused_bulk_macroscopic_equilibrium_collide_stream``),
    the stages it names; otherwise the component itself."""
    if "+" in part or not part.startswith(BULK_PREFIX) or part == BULK_PREFIX:
        return tuple(part.split("+"))
    return tuple(_STAGE_WORDS.findall(part[len(BULK_PREFIX):]))


def split_scope(name: str) -> tuple[str, ...]:
    """The stage names (``halo`` included) a scope component stands for (:func:`scope_names`)."""
    return tuple(n for n in scope_names(name) if n in STAGES or n == HALO)
