"""The xla engine with ``parallel.partitioner=gspmd``: the unsharded xla step with sharded populations, split by XLA's
SPMD partitioner."""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from lbm.cases.base import Setup
from lbm.engines.sharded.layout import Layout, OnMesh
from lbm.engines.xla import XlaEngine


class GspmdEngine(OnMesh, XlaEngine):
    """The unsharded xla step with sharded populations: XLA's SPMD partitioner splits it (the comparison)."""

    name = "xla"
    partitioner = "gspmd"

    def __init__(self, setup: Setup, shape: tuple[int, ...], storage: str = "compute") -> None:
        super().__init__(setup, storage)
        self.layout = Layout(setup, shape)
        self.params = jax.device_put(self.params, NamedSharding(self.layout.mesh, P()))
        self.note = f"mesh {'x'.join(map(str, shape))}, XLA SPMD partitioning of the dense step"

    def chunk_function(self, n: int) -> Any:
        """The xla chunk, jitted with the populations sharded in and out."""
        inner = super().chunk_function(n)
        fs = self.layout.sharding()
        rep = NamedSharding(self.layout.mesh, P())
        return jax.jit(inner, in_shardings=(fs, rep, rep), out_shardings=(fs, rep), donate_argnums=0)
