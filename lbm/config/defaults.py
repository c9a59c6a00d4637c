"""The defaults a case picks for the lattice and Reynolds number asked for, where the user left them open.

A case's YAML leaves a key open with ``collision: auto`` (its defaults list: ``override /collision: auto``) or a
null ``grid.nx``, ``grid.ny``, ``grid.nz`` or ``flow.u_lattice``; a key the user sets on the command line replaces
the open value and is never changed. :func:`pick` fills the open keys by the case's rule (its parameter class's
``pick``, lbm.config.cases) and says, for each, what it picked and why (:class:`Pick`); the run logs these lines
and metrics.json records them (``defaults_picked``).

The rules are the validated set-ups:
- ``cavity``: the square (2D, 130^2) or the cube (3D, 66^3; docs/validation_3d.md), ``grid.ny`` and ``grid.nz``
  following ``grid.nx``; the lid speed 0.05, or 0.1 (Mach 0.17, lbm validate's Re 1000 set-ups) where 0.05 gives
  tau below :data:`CAVITY_TAU_MIN`; TRT in 3D (the cube's validated collision) and in 2D where tau is below
  :data:`TAU_WARN` (BGK's stability margin), else BGK.
- ``taylor_green_3d``: the cumulant on D3Q27 (the validated 64^3 default), KBC on D3Q19 (lbm validate's TGV_32
  and docs/validation_3d.md's 64^3 D3Q19 row), as the cumulant needs every velocity of {-1, 0, 1}^3.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from lbm.errors import ConfigError
from lbm.lattice import CS2, LATTICES

AUTO = "auto"
"""The collision group's option that leaves the kind to the case (``collision=auto``)."""
TAU_WARN = 0.51
"""Relaxation times below this give a warning: BGK is close to its stability limit."""
CAVITY_GRID = {2: 130, 3: 66}
"""The cavity's cells per side (walls included): L = 128 in 2D, the validated 64^3 cube in 3D."""
CAVITY_LID = (0.05, 0.1)
"""The lid speeds the cavity picks from: 0.05 (Mach 0.087), else 0.1 (Mach 0.17, the validated Re 1000 set-ups)."""
CAVITY_TAU_MIN = 0.52
"""Below this tau at lid speed 0.05 the cavity picks 0.1: within 0.02 of 1/2 BGK is near its limit (the cube at
Re 1000 diverged at tau 0.5096); 0.1 doubles the margin."""
CAVITY_PLAIN = "bgk"
"""The cavity's collision in 2D where tau keeps :data:`TAU_WARN`'s margin (the simplest kind; policy, written once)."""
CAVITY_STABLE = "trt"
"""The cavity's collision in 3D (the validated cube) and in 2D below :data:`TAU_WARN` (policy, written once)."""
TGV3D_COLLISION = {"d3q27": "cumulant", "d3q19": "kbc"}
"""taylor_green_3d's collision per lattice (docs/validation_3d.md: both stable to t = 20 at 64^3, Re 1600)."""


@dataclasses.dataclass(frozen=True)
class Pick:
    """One key a case filled: its name, the value picked and why (one line of the log, a metrics.json entry)."""

    key: str
    value: Any
    reason: str

    def line(self) -> str:
        """``key=value (reason)``, as the log shows it."""
        return f"{self.key}={self.value} ({self.reason})"


def check_dims(case: str, dims: tuple[int, ...] | None, lattice: str) -> None:
    """Refuse a lattice of the wrong dimension for a case that runs on one kind only (``dims``: the spatial dimensions
    it runs on, None: 2D and 3D), naming the lattice given."""
    if dims is not None and LATTICES[lattice].d not in dims:
        fits = [name for name, lat in LATTICES.items() if lat.d in dims]
        raise ConfigError("lattice", lattice, f"{' or '.join(fits)} (case {case} is {dims[0]}D)",
                          f"use lattice={' or lattice='.join(fits)}")


def pick(case: str, rules: Mapping[str, Any], lattice: str, collision: str, grid: dict[str, Any], reynolds: float,
         u_lattice: float | None, tau: float | None) -> tuple[str, dict[str, Any], float | None, tuple[Pick, ...]]:
    """The collision, grid (nx, ny, nz), lid or flow speed and the picks for the keys left open (auto, null), by the
    rule of ``rules[case]`` (a parameter class of lbm.config.cases: its ``pick``).

    A key already set comes back unchanged; ``collision=auto`` on a case without a rule is refused.
    """
    collision, grid, u_lattice, picks = rules[case].pick(lattice, collision, grid, reynolds, u_lattice, tau)
    if collision == AUTO:
        having = " and ".join(name for name, params in rules.items() if params.picks_collision)
        raise ConfigError("collision", AUTO, "a collision kind (case " + case + " has no rule for collision=auto: "
                          f"it picks for {having})")
    return collision, grid, u_lattice, picks


def cavity_picks(lattice: str, collision: str, grid: dict[str, Any], reynolds: float, u_lattice: float | None,
                 tau: float | None) -> tuple[str, dict[str, Any], float | None, tuple[Pick, ...]]:
    """The cavity's rule (the module doc): the validated square or cube, its lid speed and collision where open."""
    picks: list[Pick] = []
    d = LATTICES[lattice].d
    grid = dict(grid)
    if grid.get("nx") is None:
        grid["nx"] = CAVITY_GRID[d]
        picks.append(Pick("grid.nx", grid["nx"], f"the validated {'square' if d == 2 else 'cube'}: "
                                                 f"L = {grid['nx'] - 2} fluid cells per side"))
    for key in ("ny", "nz")[: d - 1]:
        if grid.get(key) is None:
            grid[key] = grid["nx"]
            picks.append(Pick(f"grid.{key}", grid[key], "as grid.nx: a square cavity" if d == 2 else
                              "as grid.nx: a cube"))
    length = grid["nx"] - 2 if isinstance(grid["nx"], int) and not isinstance(grid["nx"], bool) else None
    if u_lattice is None and length is not None:
        u_lattice, why = cavity_lid(length, reynolds, tau)
        picks.append(Pick("flow.u_lattice", u_lattice, why))
    if collision == AUTO and length is not None:
        collision, why = cavity_collision(d, length, reynolds, tau, u_lattice)
        picks.append(Pick("collision", collision, why))
    return collision, grid, u_lattice, tuple(picks)


def tgv3d_picks(lattice: str, collision: str, grid: dict[str, Any], reynolds: float, u_lattice: float | None,
                tau: float | None) -> tuple[str, dict[str, Any], float | None, tuple[Pick, ...]]:
    """taylor_green_3d's rule: its validated collision on ``lattice`` (:data:`TGV3D_COLLISION`) where auto."""
    if collision != AUTO:
        return collision, grid, u_lattice, ()
    collision = TGV3D_COLLISION.get(lattice, TGV3D_COLLISION["d3q27"])
    return collision, grid, u_lattice, (Pick("collision", collision, f"the validated collision on {lattice} at Re 1600"
                                             + ("" if lattice == "d3q27" else ": the cumulant needs d3q27")),)


def cavity_lid(length: int, reynolds: float, tau: float | None) -> tuple[float, str]:
    """The lid speed for a cavity of ``length`` fluid cells at ``reynolds`` (``tau`` given: 0.05), and why."""
    low, high = CAVITY_LID
    if tau is not None:
        return low, "flow.tau sets the viscosity"
    tau_low = 0.5 + low * length / (reynolds * CS2)
    if tau_low >= CAVITY_TAU_MIN:
        return low, f"tau {tau_low:.4f} >= {CAVITY_TAU_MIN}"
    tau_high = 0.5 + high * length / (reynolds * CS2)
    return high, (f"{low} gives tau {tau_low:.4f} < {CAVITY_TAU_MIN} at Re {reynolds:g} on L = {length}; {high} "
                  f"gives tau {tau_high:.4f} (Mach {high / CS2 ** 0.5:.2f}), the validated Re 1000 set-up")


def cavity_collision(d: int, length: int, reynolds: float, tau: float | None,
                     u_lattice: float | None) -> tuple[str, str]:
    """The cavity's collision on a ``d``-dimensional lattice at the tau the flow gives, and why."""
    if d == 3:
        return CAVITY_STABLE, "the validated cube (docs/validation_3d.md); walls exactly half-way"
    if tau is None and u_lattice is not None and reynolds > 0:
        tau = 0.5 + u_lattice * length / (reynolds * CS2)
    if tau is not None and tau < TAU_WARN:
        return CAVITY_STABLE, f"tau {tau:.4f} < {TAU_WARN}: BGK is close to its stability limit"
    return CAVITY_PLAIN, f"tau {tau:.4f} >= {TAU_WARN}" if tau is not None else CAVITY_PLAIN


def picked_record(picks: tuple[Pick, ...]) -> dict[str, dict[str, Any]]:
    """metrics.json's ``defaults_picked``: per key the value picked and why."""
    return {p.key: {"value": p.value, "reason": p.reason} for p in picks}


def log_picks(case: str, picks: tuple[Pick, ...]) -> None:
    """One log line naming the keys the case picked (none where the user set them all)."""
    if picks:
        logging.getLogger("lbm").info("%s picked the keys left open: %s (set a key to choose it yourself)", case,
                                      "; ".join(p.line() for p in picks))
