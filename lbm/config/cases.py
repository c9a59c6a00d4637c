"""The parameters of each case: one frozen dataclass per case, registered in Hydra's ``case`` group.

A case's YAML file (``configs/case/<name>.yaml``) names its dataclass first in its defaults list
(``<name>_schema@case``), so Hydra types its keys while composing; the values and their comments
stay in the YAML file (``MISSING`` here means: set there). The validators below check what a
parameter can be on its own (type and range); what depends on the grid or on the boundary
conditions' kinds is checked by the case.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from omegaconf import MISSING

from lbm.config.defaults import Pick, cavity_picks, tgv3d_picks
from lbm.config.sections import Section
from lbm.errors import ConfigError


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_fraction(key: str, value: Any, words: str) -> None:
    """``value`` a number in [0, 1) (or None where ``words`` allows null), else a ConfigError naming ``key``."""
    if value is not None and not (_number(value) and 0 <= value < 1):
        raise ConfigError(key, value, words)


def check_positive(key: str, value: Any, words: str) -> None:
    """``value`` a number > 0, else a ConfigError naming ``key``."""
    if not (_number(value) and value > 0):
        raise ConfigError(key, value, words)


@dataclasses.dataclass(frozen=True)
class CaseParams(Section):
    """What every case's parameters hold: the case's name (the mapping view lists the parameters without it)."""

    name: str = MISSING
    dims: ClassVar[tuple[int, ...] | None] = None
    """The spatial dimensions of the lattices the case runs on (None: 2D and 3D)."""
    picks_collision: ClassVar[bool] = False
    """Whether :meth:`pick` has a rule for ``collision=auto`` (lbm.config.defaults)."""

    @classmethod
    def pick(cls, lattice: str, collision: str, grid: dict[str, Any], reynolds: float, u_lattice: float | None,
             tau: float | None) -> tuple[str, dict[str, Any], float | None, tuple[Pick, ...]]:
        """The collision, grid, flow speed and picks for the keys the user left open (auto, null): here none."""
        return collision, grid, u_lattice, ()

    def __iter__(self) -> Any:
        """The parameter names, without ``name``."""
        return (f.name for f in dataclasses.fields(self) if f.name != "name")

    def __len__(self) -> int:
        """The number of parameters, without ``name``."""
        return len(dataclasses.fields(self)) - 1


@dataclasses.dataclass(frozen=True)
class ChannelParams(CaseParams):
    """An obstacle in a channel: the inlet, the inflow's perturbation and where the force statistics start."""

    inlet: str = MISSING
    perturbation: float = MISSING
    average_from: float | None = None

    def __post_init__(self) -> None:
        """The perturbation in [0, 1), the averaging window's start a fraction of the run (or null)."""
        check_fraction("case.average_from", self.average_from,
                       "null (found automatically) or a fraction in [0, 1) of the steps")
        if self.perturbation is None:
            raise ConfigError("case.perturbation", None, "a number in [0, 1)")
        check_fraction("case.perturbation", self.perturbation, "a number in [0, 1)")


@dataclasses.dataclass(frozen=True)
class CylinderParams(ChannelParams):
    """``case=cylinder``: the obstacle's shape (a circle, or an ellipse), size and place, its wall rule and the outlet."""

    shape: str = MISSING
    radius: float | None = None
    axes: list[float] | None = None
    center: list[float] | None = None
    bounce_back: str = MISSING
    outlet: str = MISSING

    def __post_init__(self) -> None:
        """A radius >= 1 (or null), semi-axes [a, b] >= 1 (or null), a centre [cx, cy] (or null), the channel's checks."""
        r = self.radius
        if r is not None and not (_number(r) and r >= 1):
            raise ConfigError("case.radius", r, "a number >= 1 (cells), or null for ny//9")
        a = self.axes
        if a is not None and (not isinstance(a, (list, tuple)) or len(a) != 2 or not all(
                _number(v) and v >= 1 for v in a)):
            raise ConfigError("case.axes", a, "[a, b]: the ellipse's semi-axes along x and y, numbers >= 1 (cells)")
        c = self.center
        if c is not None and (not isinstance(c, (list, tuple)) or len(c) != 2 or not all(map(_number, c))):
            raise ConfigError("case.center", c, "[cx, cy] in cells, or null for [nx//4, ny//2]")
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class ObstacleParams(ChannelParams):
    """``case=obstacle``: the file of the obstacle, its scale and place, and its wall rule."""

    mask: str | None = None
    center: list[float] | None = None
    scale: float = MISSING
    bounce_back: str | None = None

    def __post_init__(self) -> None:
        """A scale > 0, and the channel's checks (the mask and the centre are checked against the file and grid)."""
        check_positive("case.scale", self.scale, "a number > 0 (cells per unit of the mesh's coordinates)")
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class CavityParams(CaseParams):
    """``case=cavity``: when a ``steps=auto`` run counts as steady."""

    steady_tolerance: float = MISSING
    picks_collision: ClassVar[bool] = True

    @classmethod
    def pick(cls, lattice: str, collision: str, grid: dict[str, Any], reynolds: float, u_lattice: float | None,
             tau: float | None) -> tuple[str, dict[str, Any], float | None, tuple[Pick, ...]]:
        """The validated square or cube, its lid speed and collision where left open (lbm.config.defaults)."""
        return cavity_picks(lattice, collision, grid, reynolds, u_lattice, tau)

    def __post_init__(self) -> None:
        """A positive tolerance."""
        check_positive("case.steady_tolerance", self.steady_tolerance,
                       "a number > 0 (relative velocity change per 1000 steps)")


@dataclasses.dataclass(frozen=True)
class PoiseuilleParams(CaseParams):
    """``case=poiseuille``: where the walls cut the wall links (None: half-way bounce-back)."""

    wall_fraction: float | None = None

    def __post_init__(self) -> None:
        """null or a fraction in (0, 1]."""
        q = self.wall_fraction
        if q is not None and not (_number(q) and 0 < q <= 1):
            raise ConfigError("case.wall_fraction", q, "null (half-way walls) or a number in (0, 1]")


@dataclasses.dataclass(frozen=True)
class SchaferTurekParams(CaseParams):
    """``case=schafer_turek``: the DFG variant, its resolution, its inlet, outlet and cylinder wall."""

    variant: str = MISSING
    validated: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    cells_per_diameter: int = MISSING
    inlet: str = MISSING
    outlet: str = MISSING
    wall: str = MISSING
    steady_tolerance: float = MISSING

    def __post_init__(self) -> None:
        """A positive steadiness tolerance (the variant and the resolution are checked by the case)."""
        check_positive("case.steady_tolerance", self.steady_tolerance,
                       "a number > 0 (relative change of the period-averaged drag)")


@dataclasses.dataclass(frozen=True)
class DuctParams(CaseParams):
    """``case=duct``: no parameters of its own."""

    dims: ClassVar[tuple[int, ...] | None] = (3,)


@dataclasses.dataclass(frozen=True)
class TaylorGreenParams(CaseParams):
    """``case=taylor_green``: no parameters of its own."""


@dataclasses.dataclass(frozen=True)
class TaylorGreen3DParams(CaseParams):
    """``case=taylor_green_3d``: no parameters of its own."""

    dims: ClassVar[tuple[int, ...] | None] = (3,)
    picks_collision: ClassVar[bool] = True

    @classmethod
    def pick(cls, lattice: str, collision: str, grid: dict[str, Any], reynolds: float, u_lattice: float | None,
             tau: float | None) -> tuple[str, dict[str, Any], float | None, tuple[Pick, ...]]:
        """The validated collision on the lattice where left open (lbm.config.defaults)."""
        return tgv3d_picks(lattice, collision, grid, reynolds, u_lattice, tau)


CASE_PARAMS: dict[str, type[CaseParams]] = {
    "cavity": CavityParams, "cylinder": CylinderParams, "duct": DuctParams, "obstacle": ObstacleParams,
    "poiseuille": PoiseuilleParams, "schafer_turek": SchaferTurekParams, "taylor_green": TaylorGreenParams,
    "taylor_green_3d": TaylorGreen3DParams,
}
"""Each case's parameter dataclass, stored in Hydra's ``case`` group as ``<name>_schema``."""
