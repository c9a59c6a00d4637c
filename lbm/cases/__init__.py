"""Flow cases, one module each; ``CASES`` maps the config name to the case class."""

from __future__ import annotations

from lbm.cases.base import Case, Setup
from lbm.cases.cavity import Cavity
from lbm.cases.cylinder import Cylinder
from lbm.cases.duct import Duct
from lbm.cases.obstacle import Obstacle
from lbm.cases.poiseuille import Poiseuille
from lbm.cases.schafer_turek import SchaferTurek
from lbm.cases.taylor_green import TaylorGreen
from lbm.cases.taylor_green_3d import TaylorGreen3D

CASES: dict[str, type[Case]] = {c.name: c for c in (Cylinder, Cavity, Poiseuille, TaylorGreen, SchaferTurek, Obstacle, Duct,
                                                   TaylorGreen3D)}

__all__ = ["CASES", "Case", "Setup"]
