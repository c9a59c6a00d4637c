"""Recursive regularized BGK (Malaspinas 2015; Coreixas et al. 2017): the regularized kind with the third-order
Hermite terms the lattice resolves (lbm.kernels.collisions.regularized, ``recursive``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from lbm.kernels.collisions.operator import NativeBody, rate, register
from lbm.kernels.collisions.regularized import Regularized, regularized_constants, regularized_lines


@dataclass(frozen=True)
class RecursiveRegularizedRates:
    """``collision=recursive_regularized``: the bulk rate (null: 1/tau) and the Smagorinsky constant."""

    bulk: float | None = rate(None, 0.0, 2.0)
    smagorinsky: float = rate(0.0, low_open=False)


class RecursiveRegularized(Regularized):
    """The recursive regularized collision."""

    name = "recursive_regularized"
    Rates = RecursiveRegularizedRates
    recursive = True
    native = NativeBody(rates=("omega", "bulk"), lines=functools.partial(regularized_lines, recursive=True),
                        constants=regularized_constants)


register(RecursiveRegularized())
