"""One reference step of the jnp kernels, and an engine's advanced state as numpy, for the engine tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lbm.kernels.equilibrium import equilibrium
from lbm.kernels.macroscopic import macroscopic
from lbm.kernels.streaming import stream


def reference_step(f: Any, lat: Any, collide: Callable[..., Any], force: Any) -> Any:
    """One push step of the jnp kernels: moments (with ``force``), ``collide(f, feq, u, lat, force)``, streaming."""
    drho, u = macroscopic(f, lat, force)
    return stream(collide(f, equilibrium(drho, u, lat), u, lat, force), lat)


def advanced(stepper: Any, setup: Any, n: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``n`` steps of ``stepper`` from the case's initial populations: (populations, aux), as numpy arrays."""
    f, aux = stepper.advance(setup.initial_populations(), n)
    return np.asarray(f), {k: np.asarray(v) for k, v in aux.items()}
