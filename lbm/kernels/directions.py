"""Per-direction populations: a ``(Q, *grid)`` array split along Q into a tuple of Q arrays, with arithmetic.

The collision operators (lbm.kernels.collisions) are written once for both forms: the stacked array the
xla and instrumented engines run, and :class:`Directions`, what a Pallas kernel body holds (Triton needs
power-of-two tensor shapes, so a cell block is one array per direction). The helpers here give each
operation the form of its operand: on an array one jax.numpy call, on Directions its
direction-by-direction equivalent.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import jax.numpy as jnp


def _operator(op: Callable[[Any, Any], Any]) -> tuple[Callable[..., Directions], Callable[..., Directions]]:
    """The forward and reflected methods of a binary operator on Directions."""

    def forward(self: Directions, other: Any) -> Directions:
        return self._apply(other, op)

    def reflected(self: Directions, other: Any) -> Directions:
        return self._apply(other, op, swap=True)

    return forward, reflected


class Directions(tuple):
    """Q per-direction arrays of one shape, with elementwise arithmetic: a ``(Q, *grid)`` array split along Q.

    Between two Directions an operator works direction by direction; with a scalar or a grid-shaped array it
    broadcasts that operand over the directions, as NumPy broadcasts a ``grid`` array over ``(Q, *grid)``.
    Indexing with an int gives one direction; with a sequence of ints, those directions (as ``f[opposite]``).
    """

    __slots__ = ()
    __array_ufunc__ = None  # a NumPy scalar on the left defers to the reflected operator

    def _apply(self, other: Any, op: Callable[[Any, Any], Any], swap: bool = False) -> Directions:
        if isinstance(other, Directions):
            pairs = zip(other, self, strict=True) if swap else zip(self, other, strict=True)
            return Directions(op(a, b) for a, b in pairs)
        return Directions(op(other, a) if swap else op(a, other) for a in self)

    __add__, __radd__ = _operator(operator.add)
    __sub__, __rsub__ = _operator(operator.sub)
    __mul__, __rmul__ = _operator(operator.mul)
    __truediv__, __rtruediv__ = _operator(operator.truediv)

    def __neg__(self) -> Directions:
        return Directions(-a for a in self)

    def __getitem__(self, index: Any) -> Any:
        """One direction (an int), or the directions a sequence of ints names, in its order."""
        if isinstance(index, (int, np.integer, slice)):
            return tuple.__getitem__(self, index)
        return Directions(tuple.__getitem__(self, int(i)) for i in index)

    @property
    def dtype(self) -> Any:
        """The arrays' dtype."""
        return self[0].dtype

    def astype(self, dtype: Any) -> Directions:
        """Each array cast to ``dtype``."""
        return Directions(a.astype(dtype) for a in self)


Pops: TypeAlias = "jnp.ndarray | Directions"  # jax is imported where a kernel runs, not where the config reads kinds
"""Populations (or any per-direction quantity): a ``(Q, *grid)`` array or its :class:`Directions`."""


def split(x: Any) -> bool:
    """Whether ``x`` holds one array per direction (a tuple or list) rather than one stacked array."""
    return isinstance(x, (tuple, list))


def stack(xs: Sequence[jnp.ndarray], like: Pops) -> Pops:
    """``xs`` in the form of ``like``: stacked along a new first axis, or as Directions."""
    import jax.numpy as jnp

    return Directions(xs) if split(like) else jnp.stack(xs)


def qsum(x: Pops) -> jnp.ndarray:
    """The sum over the first axis (the directions)."""
    import jax.numpy as jnp

    return sum(x[1:], x[0]) if split(x) else jnp.sum(x, axis=0)


def per_direction(v: np.ndarray, like: Any, d: int) -> Pops:
    """Static per-direction constants ``v`` that broadcast against fields shaped like ``like`` (D fields or a grid)."""
    if split(like):
        return Directions(float(x) for x in v)
    import jax.numpy as jnp

    return jnp.asarray(v.reshape((-1,) + (1,) * d), like.dtype)

