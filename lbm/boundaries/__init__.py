"""Boundary conditions, one module each (frozen pytree dataclasses; see lbm.boundaries.base)."""

from lbm.boundaries.base import BoundaryCondition, Footprint, StepState
from lbm.boundaries.bounce_back import FullwayBounceBack, HalfwayBounceBack
from lbm.boundaries.characteristic import CharacteristicOutlet
from lbm.boundaries.forces import Forces
from lbm.boundaries.inlet import INLET_KINDS, TIME_PROFILES, Inlet
from lbm.boundaries.interpolated import InterpolatedBounceBack
from lbm.boundaries.moving_wall import MovingWall
from lbm.boundaries.outflow import Outflow
from lbm.boundaries.parabolic import ParabolicBounceBack
from lbm.boundaries.pressure import PRESSURE_KINDS, PressureOutlet

__all__ = ["BoundaryCondition", "Footprint", "StepState", "CharacteristicOutlet", "FullwayBounceBack",
           "HalfwayBounceBack", "Forces",
           "INLET_KINDS", "TIME_PROFILES", "Inlet", "InterpolatedBounceBack", "MovingWall", "Outflow",
           "ParabolicBounceBack", "PRESSURE_KINDS", "PressureOutlet"]
