"""lbm: an instrumented lattice Boltzmann flow simulator on JAX.

``lbm.run(["case=cavity", "flow.reynolds=400"])`` simulates from Python (see :mod:`lbm.api`);
importing ``lbm`` itself stays cheap (no JAX until a run starts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Result", "__version__", "run"]

if TYPE_CHECKING:
    from lbm.api import Result, run


def __getattr__(name: str) -> Any:
    """``lbm.run`` and ``lbm.Result``, imported from :mod:`lbm.api` on first use."""
    if name in ("run", "Result"):
        from lbm import api

        return getattr(api, name)
    raise AttributeError(f"module 'lbm' has no attribute {name!r}")
