"""The bulk-kernel engine: a fused engine whose bulk kernel treats every cell as fluid (native, pallas), with the
boundary cells by the plan of lbm.engines.plan: gathered, run through the case's stages, written back."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from lbm.boundaries.base import BoundaryCondition, pytree_dataclass
from lbm.engines.base import EngineUnavailable
from lbm.engines.plan import Block, BlockArrays, plan_arrays, plan_block
from lbm.engines.xla import FusedEngine


@pytree_dataclass
class PlanParams:
    """The params of a bulk-kernel engine's step: the boundary-cell block's arrays, and the dense conditions."""

    block: BlockArrays | None
    dense: Any


class BulkKernelEngine(FusedEngine):
    """Base of the engines whose bulk kernel treats every cell as fluid (native, pallas): the boundary-cell plan."""

    block: Block | None = None
    rest_scheme = "push"
    """The scheme whose slots of the cells held at rest (``Slots.rest``) address the state a chunk ends in."""

    def at_rest(self, a: jnp.ndarray, params: Any) -> jnp.ndarray:
        """``a`` with the populations the plan's cells held at rest (lbm.engines.plan.Block.rest) sent set to rest: in
        a chunk the kernel steps those cells as bulk cells, and what they hold reaches only each other and the block's
        solid cells, whose post-collision populations the block overwrites."""
        if self.block is None or self.block.rest.size == 0:
            return a
        slots = params.block.slots[self.rest_scheme].rest.reshape(-1)
        with jax.named_scope("bounce_back"):
            return a.reshape(-1).at[slots].set(jnp.zeros((), a.dtype), unique_indices=True).reshape(a.shape)

    def block_arrays(self, block: Block | None, boundaries: tuple[BoundaryCondition, ...]) -> BlockArrays | None:
        """The arrays of ``block`` (held as :attr:`block`) for ``boundaries``; EngineUnavailable where a block form
        needs a layout this block does not have."""
        self.block = block
        try:
            return plan_arrays(block, boundaries)
        except ValueError as exc:
            raise EngineUnavailable(f"boundary plan: {exc}") from None

    def plan_boundaries(self) -> None:
        """The block of every boundary cell (lbm.engines.plan.plan_block), its arrays in params."""
        setup = self.setup
        block = self.block_arrays(plan_block(setup.lattice, setup.shape, setup.boundaries), setup.boundaries)
        self.params = jax.tree_util.tree_map(jnp.asarray, PlanParams(block=block, dense=self.params))
        self._stages = tuple(s for s in setup.stages if s != "stream")

    def _dense_params(self) -> Any:
        return self.params.dense
