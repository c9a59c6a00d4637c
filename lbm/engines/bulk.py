"""The bulk-kernel engine: a fused engine whose bulk kernel treats every cell as fluid (native, pallas), with the
boundary cells by the plan of lbm.engines.plan."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lbm.engines.plan import plan_arrays, plan_block
from lbm.engines.xla import FusedEngine


class BulkKernelEngine(FusedEngine):
    """Base of the engines whose bulk kernel treats every cell as fluid (native, pallas): the boundary-cell plan."""

    def plan_boundaries(self) -> None:
        """The block of boundary cells (lbm.engines.plan), its slots and block-form conditions in params."""
        setup = self.setup
        self.block = plan_block(setup.lattice, setup.shape, setup.boundaries)
        self.params = jax.tree_util.tree_map(jnp.asarray, {"dense": self.params,
                                                           "block": plan_arrays(self.block, setup.boundaries)})
        self._stages = tuple(s for s in setup.stages if s != "stream")

    def _dense_params(self) -> Any:
        return self.params["dense"]
