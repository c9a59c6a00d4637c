"""Boundary conditions, one module each (frozen pytree dataclasses; see lbm.boundaries.base)."""

from lbm.boundaries.base import BoundaryCondition, Footprint, StepState
from lbm.boundaries.bounce_back import FullwayBounceBack, HalfwayBounceBack
from lbm.boundaries.forces import Forces
from lbm.boundaries.inlet import INLET_KINDS, Inlet
from lbm.boundaries.moving_wall import MovingWall
from lbm.boundaries.outflow import Outflow

__all__ = ["BoundaryCondition", "Footprint", "StepState", "FullwayBounceBack", "HalfwayBounceBack", "Forces",
           "INLET_KINDS", "Inlet", "MovingWall", "Outflow"]
