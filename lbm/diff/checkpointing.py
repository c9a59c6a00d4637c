"""Checkpointing policies of a differentiable run: which states reverse mode keeps, which it recomputes.

Reverse mode needs every step's intermediate values, in reverse order. ``none`` keeps them all (a
plain ``lax.scan``: memory grows with the steps). The others split the steps into segments, each a
``jax.checkpoint`` of an inner scan: the outer scan keeps only the state at the start of each segment,
and the backward pass recomputes one segment at a time from it.

- ``every``: segments of k steps (``every=k``): N/k states kept, one segment's values at a time;
- ``sqrt``: k = ceil(sqrt N): about 2 sqrt N states, one extra forward run;
- ``binomial``: the same split applied recursively over ``levels`` (default 3) nested levels, b = ceil(N^(1/L))
  segments per level: about L b states, L - 1 extra forward runs (the recursive schedule of Griewank's
  binomial checkpointing in its nested-scan form).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax

from lbm.errors import LbmError

POLICIES = ("none", "every", "sqrt", "binomial")
"""The checkpointing policies (see the module doc)."""
BINOMIAL_LEVELS = 3


def segment_lengths(policy: str, steps: int, every: int | None = None, levels: int = BINOMIAL_LEVELS) -> tuple[int, ...]:
    """Segment lengths, outermost level first (empty: no checkpoints); LbmError for an unknown policy or bad k."""
    if policy not in POLICIES:
        raise LbmError(f"checkpoint={policy!r}: choose one of {', '.join(POLICIES)}")
    if policy == "none":
        return ()
    if policy == "every":
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise LbmError(f"checkpoint='every' needs every=k, an integer >= 1 (steps between kept states), not {every!r}")
        return (every,)
    if policy == "sqrt":
        return (max(1, math.isqrt(steps - 1) + 1 if steps > 1 else 1),)
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 2:
        raise LbmError(f"checkpoint='binomial' needs levels >= 2, not {levels!r}")
    b = max(2, math.ceil(steps ** (1.0 / levels) - 1e-9))
    return tuple(b**k for k in range(levels - 1, 0, -1))


def repeat(step: Callable[[Any], Any], carry: Any, n: int, lengths: tuple[int, ...] = ()) -> Any:
    """``step`` applied ``n`` times to ``carry``, checkpointed over the nested segment ``lengths`` (outermost first)."""
    if n <= 0:
        return carry
    if not lengths:
        return jax.lax.scan(lambda c, _: (step(c), None), carry, None, length=n)[0]
    seg, inner = lengths[0], lengths[1:]
    if seg >= n:
        return repeat(step, carry, n, inner)
    segment = jax.checkpoint(lambda c: repeat(step, c, seg, inner), prevent_cse=False)
    carry = jax.lax.scan(lambda c, _: (segment(c), None), carry, None, length=n // seg)[0]
    return repeat(step, carry, n % seg, inner)
