"""lbm: an instrumented lattice Boltzmann flow simulator on JAX.

``lbm.run(["case=cavity", "flow.reynolds=400"])`` simulates from Python (see :mod:`lbm.api`);
``lbm.value_and_grad(overrides, wrt, objective)`` differentiates a run (see :mod:`lbm.diff`);
importing ``lbm`` itself stays cheap (no JAX until a run starts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Result", "__version__", "run", "value_and_grad"]

if TYPE_CHECKING:
    from lbm.api import Result, run
    from lbm.diff import value_and_grad


def __getattr__(name: str) -> Any:
    """``lbm.run`` and ``lbm.Result`` (from :mod:`lbm.api`), ``lbm.value_and_grad`` (:mod:`lbm.diff`), on first use."""
    if name in ("run", "Result"):
        from lbm import api

        return getattr(api, name)
    if name == "value_and_grad":
        from lbm.diff import value_and_grad

        return value_and_grad
    raise AttributeError(f"module 'lbm' has no attribute {name!r}")
