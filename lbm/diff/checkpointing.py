"""Checkpointing policies of a differentiable run: which states reverse mode keeps, which it recomputes.

Reverse mode needs the state before every step, in reverse order. :func:`run_steps` applies a step
``n`` times under ``jax.custom_vjp``: the forward pass keeps some states, and the backward pass walks
the steps in reverse, recomputing the states it did not keep from the nearest kept one and pulling the
cotangent back through each step with ``jax.vjp`` of that one step (which recomputes the step's own
intermediate values inside it: nothing per step is kept but the state). The policies:

- ``none``: every state kept (memory grows with the steps: one state per step), no recomputation;
- ``every``: the state every k steps (``every=k``): N/k states kept; the backward pass recomputes one
  segment's k states at a time into a buffer allocated once, written in place (:func:`recompute`,
  :func:`state_buffer`: one extra forward run), then pulls back through them (:func:`pull_back`); a last
  segment of N mod k steps is a second program (compiled anew);
- ``sqrt``: k the smallest divisor of N in [ceil(sqrt N), 2 ceil(sqrt N)], else ceil(sqrt N): about 2 sqrt N
  states, one extra forward run;
- ``binomial``: Griewank's binomial checkpointing (revolve): a fixed number of ``snapshots`` states
  (the first is the initial state), whatever N, each step recomputed at most r times where r is the
  smallest with C(s + r, s) >= N (:func:`binomial_schedule`; Griewank & Walther 2000, ACM TOMS 26:19).

The forward pass and the recomputation run one step per loop iteration with an optimisation barrier after each
(:func:`advance_kept`; on a GPU two, each state of the recomputation read from one of two buffers and written into
the other); a :class:`Split` step (the cell-local stages, then streaming) lets :func:`pull_back`
carry the cotangent of the collided populations from step to step, so that XLA fuses each step's adjoint with
the pull of its result, as it fuses collide and stream. Each pass is one loop whose body holds one step (or one
step's adjoint): the program compiles each once (a body of two steps, or a step peeled off a loop, is compiled
again and doubles the compile time of the gradient program, the cost of every first call).

Every policy gives the same gradient: the adjoint of each step is that of the same step function.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lbm.config.run import GRADIENT_CHECKPOINTS
from lbm.errors import LbmError
from lbm.profiling.gradient import RECOMPUTE

POLICIES = GRADIENT_CHECKPOINTS
"""The checkpointing policies (see the module doc; the config key ``gradient.checkpoint``)."""
SNAPSHOTS = 8
"""Default number of states ``binomial`` keeps (``gradient.snapshots`` in the config)."""

Step = Callable[[Any, Any], Any]
"""A step ``(carry, params) -> carry``: what is differentiated, by the carry and by the params (a pytree)."""


def segment_length(policy: str, steps: int, every: int | None = None, snapshots: int | None = None) -> int:
    """Steps between kept states (``binomial``: 0, its schedule keeps ``snapshots``); LbmError for a bad policy or k."""
    if policy not in POLICIES:
        raise LbmError(f"checkpoint={policy!r}: choose one of {', '.join(POLICIES)}")
    if policy == "none":
        return 1
    if policy == "every":
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise LbmError(f"checkpoint='every' needs every=k, an integer >= 1 (steps between kept states), not {every!r}")
        return every
    if policy == "sqrt":
        root = math.isqrt(steps - 1) + 1 if steps > 1 else 1
        return next((k for k in range(root, 2 * root + 1) if steps % k == 0), root)
    if isinstance(snapshots, bool) or not isinstance(snapshots, int) or snapshots < 1:
        raise LbmError(f"checkpoint='binomial' needs snapshots=s, an integer >= 1 (states kept), not {snapshots!r}")
    return 0


def binomial_schedule(steps: int, snapshots: int) -> np.ndarray:
    """The backward pass of ``binomial`` as actions (A, 4) int32: (source slot, steps to advance, target slot, adjoint).

    Each action takes the state in its source slot and advances it; then, if ``adjoint`` is 1, pulls the
    cotangent back through the next step from there, else stores the state in the target slot. Slot 0
    holds the initial state; the reversal of n steps from slot j with c slots (j and the free ones)
    advances m steps into a free slot, reverses the n - m steps from there with c - 1 slots and then the
    first m with c, m the smallest that lets the n - m fit within r repetitions (C(c + r, c) >= n).
    """
    actions: list[tuple[int, int, int, int]] = []

    def reverse(slot: int, n: int, free: list[int]) -> None:
        if n == 1 or not free:  # one step, or no slot left: from this slot, each step in turn
            actions.extend((slot, k, slot, 1) for k in range(n - 1, -1, -1))
            return
        c, r = len(free) + 1, 1
        while math.comb(c + r, c) < n:
            r += 1
        m = min(n - 1, max(1, n - math.comb(c - 1 + r, c - 1)))
        actions.append((slot, m, free[0], 0))
        reverse(free[0], n - m, free[1:])
        reverse(slot, m, free)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * steps + 100))
    try:
        reverse(0, steps, list(range(1, snapshots)))
    finally:
        sys.setrecursionlimit(limit)
    return np.asarray(actions, np.int32).reshape(-1, 4)


def _inexact(tree: Any) -> Any:
    """The leaves of a cotangent that carry values (float0 leaves of integer primals as None)."""
    return jax.tree_util.tree_map(lambda x: None if x.dtype == jax.dtypes.float0 else x, tree)


def _full(cotangent: Any, like: Any) -> Any:
    """A cotangent for ``like`` from :func:`_inexact`'s form: float0 zeros where the primal is an integer."""
    def leaf(ct: Any, x: Any) -> Any:
        if jnp.issubdtype(jnp.result_type(x), jnp.inexact):
            return ct
        return np.zeros(jnp.shape(x), jax.dtypes.float0)
    return jax.tree_util.tree_map(leaf, cotangent, like, is_leaf=lambda x: x is None)


def zero_cotangents(tree: Any) -> Any:
    """Zero cotangents of the inexact leaves of ``tree`` (None for the others)."""
    return jax.tree_util.tree_map(
        lambda x: jnp.zeros_like(x) if jnp.issubdtype(jnp.result_type(x), jnp.inexact) else None, tree)


def _add(a: Any, b: Any) -> Any:
    return jax.tree_util.tree_map(lambda x, y: None if x is None else x + y, a, b, is_leaf=lambda x: x is None)


def _pull(step: Step, x: Any, params: Any, lam: Any) -> tuple[Any, Any]:
    """The cotangents of (carry, params) of one step at ``x`` from the carry's cotangent ``lam`` (inexact form)."""
    y, pull = jax.vjp(step, x, params)
    x_bar, p_bar = pull(_full(lam, y))
    return _inexact(x_bar), _inexact(p_bar)


def advance(step: Step, carry: Any, params: Any, n: Any) -> Any:
    """``step`` applied ``n`` times (a traced count allowed: one step per loop iteration)."""
    return jax.lax.fori_loop(0, n, lambda _, c: step(c, params), carry)


def _barrier(carry: Any) -> Any:
    return jax.lax.optimization_barrier(carry)


def advance_kept(step: Step, carry: Any, params: Any, n: Any, paired: bool = False) -> Any:
    """``step`` applied ``n`` times (a traced count allowed unless ``paired``), each step followed by an optimisation
    barrier; ``paired``: two steps per loop iteration, as the xla engine's chunk runs them on a GPU, so that the loop
    hands its state buffer back without a copy (lbm.engines.xla.FusedEngine.paired_chunk). Not for jax's
    differentiation: the custom_vjp rules call it."""
    if not paired:
        return jax.lax.fori_loop(0, n, lambda _, c: _barrier(step(c, params)), carry)
    if n % 2:
        carry = _barrier(step(carry, params))
    return jax.lax.fori_loop(0, n // 2, lambda _, c: _barrier(step(_barrier(step(c, params)), params)), carry)


def state_buffer(state: Any, length: int, paired: bool = False) -> Any:
    """Zeros for the ``length`` states of a segment (a leading axis on each leaf); ``paired``: two buffers, the states
    of the even steps and of the odd ones, so that each step of a pair reads one buffer and writes the other in
    place (a step that reads and writes slots of one buffer has its result copied in)."""
    def zeros(n: int) -> Any:
        return jax.tree_util.tree_map(lambda x: jnp.zeros((n, *jnp.shape(x)), jnp.result_type(x)), state)

    return (zeros((length + 1) // 2), zeros(length // 2)) if paired else zeros(length)


def _slot(states: Any, k: Any, paired: bool, odd: bool) -> tuple[Any, Any]:
    """(the buffer that holds state ``k`` of :func:`state_buffer`'s layout, its index there); ``odd``: k's parity, static
    where ``paired``."""
    return (states[int(odd)], k // 2) if paired else (states, k)


def _read(states: Any, k: Any, paired: bool, odd: bool = False) -> Any:
    buffer, j = _slot(states, k, paired, odd)
    return jax.tree_util.tree_map(lambda b: jax.lax.dynamic_index_in_dim(b, j, 0, keepdims=False), buffer)


def _write(states: Any, k: Any, x: Any, paired: bool, odd: bool = False) -> Any:
    buffer, j = _slot(states, k, paired, odd)
    buffer = jax.tree_util.tree_map(lambda b, v: jax.lax.dynamic_update_index_in_dim(b, v, j, 0), buffer, x)
    if not paired:
        return buffer
    return (states[0], buffer) if odd else (buffer, states[1])


def recompute(step: Step, start: Any, params: Any, states: Any, n: int, paired: bool = False) -> Any:
    """``states`` (:func:`state_buffer`) holding the first ``n`` states from ``start`` (``start`` first, then n - 1
    steps), written in place (scope ``recompute``); ``paired`` as :func:`advance_kept`: each step reads its state from
    one buffer and writes the next into the other."""
    with jax.named_scope(RECOMPUTE):
        states = _write(states, 0, start, paired)
        if not paired:
            def fill(k: Any, c: tuple[Any, Any]) -> tuple[Any, Any]:
                x, buffer = c
                x = _barrier(step(x, params))
                return x, _write(buffer, k, x, paired)

            return jax.lax.fori_loop(1, n, fill, (start, states))[1]

        def advance_slot(k: Any, states: Any, odd: bool) -> Any:  # state k from state k - 1, of the other parity
            return _barrier(_write(states, k, step(_read(states, k - 1, paired, not odd), params), paired, odd))

        states = jax.lax.fori_loop(0, (n - 1) // 2, lambda j, b: advance_slot(2 * j + 2, advance_slot(2 * j + 1, b, True),
                                                                               False), states)
        return advance_slot(n - 1, states, True) if (n - 1) % 2 else states


class Split(NamedTuple):
    """A step as two steps ``transport(local(carry, params[0]), params[1])``: ``local`` the cell-local work (its
    carry out: the collided populations in the place of ``f``), ``transport`` the stream stage, affine in them.

    :func:`pull_back` then carries the cotangent of the collided populations from step to step: each step's
    adjoint is the cell-local adjoint followed by the pull of its result (the transpose of streaming), which XLA
    fuses as it fuses collide and stream in the forward step, instead of a pull that writes its result out.
    """

    local: Step
    transport: Step

    def __call__(self, carry: Any, params: Any) -> Any:
        """The whole step."""
        return self.transport(self.local(carry, params[0]), params[1])

    def whole(self) -> Step:
        """The same step as one function (its adjoint pulled back as a whole)."""
        return lambda carry, params: self(carry, params)


def _where(pred: Any, a: Any, b: Any) -> Any:
    return jax.tree_util.tree_map(lambda x, y: None if x is None else jnp.where(pred, x, y), a, b,
                                  is_leaf=lambda x: x is None)


def into_reverse(step: Step, point: Any, params: Any, lam: Any, p_bar: Any) -> tuple[Any, Any]:
    """What :func:`pull_back` carries, from the cotangent ``lam`` of the state after the last step (and ``p_bar``):
    ``lam`` itself, or for a :class:`Split` step the cotangent of the collided populations (streaming's transpose,
    affine: its pullback is the same at any ``point`` of the state's shape)."""
    if not isinstance(step, Split):
        return lam, p_bar
    mu, p_t = _pull(step.transport, point, params[1], lam)
    return mu, (p_bar[0], _add(p_bar[1], p_t))


def pull_back(step: Step, states: Any, n: int, params: Any, carry: Any, first: Any, paired: bool = False
              ) -> tuple[Any, Any]:
    """The reverse carry (:func:`into_reverse`) pulled back through the ``n`` steps from the first ``n`` states of
    ``states``, each step's values recomputed from its state; ``first``: whether these are the run's first steps,
    where the carry that comes out is the first state's cotangent (a Split step skips streaming's transpose there);
    ``paired``: two steps per loop iteration, as :func:`advance_kept`."""
    def back(j: Any, c: tuple[Any, Any], odd: bool = False) -> tuple[Any, Any]:  # odd: k's parity where paired
        lam, p_bar = c
        k = n - 1 - j
        x = _read(states, k, paired, odd)
        if not isinstance(step, Split):
            x_bar, p_step = _pull(step, x, params, lam)
            return x_bar, _add(p_bar, p_step)
        lam, p_l = _pull(step.local, x, params[0], lam)
        mu, p_t = _pull(step.transport, x, params[1], lam)
        initial = jnp.logical_and(first, k == 0)  # one loop body for every step: no step's adjoint compiled twice
        return _where(initial, lam, mu), (_add(p_bar[0], p_l), _add(p_bar[1], _where(initial, zero_cotangents(p_t), p_t)))

    if not paired:
        return jax.lax.fori_loop(0, n, back, carry)
    if n % 2:
        carry = back(0, carry, False)  # k = n - 1, even
    # each pair: k = n - 1 - n % 2 - 2 i (odd), then k - 1
    return jax.lax.fori_loop(0, n // 2, lambda i, c: back(n % 2 + 2 * i + 1, back(n % 2 + 2 * i, c, True), False),
                             carry)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def segmented(step: Step, segments: int, length: int, paired: bool, carry: Any, params: Any) -> Any:
    """``segments`` x ``length`` steps; the backward pass keeps each segment's first state (policies every, sqrt);
    ``paired`` as :func:`advance_kept`."""
    return jax.lax.scan(lambda c, _: (advance_kept(step, c, params, length, paired), None), carry, None,
                        length=segments)[0]


def _segmented_fwd(step: Step, segments: int, length: int, paired: bool, carry: Any, params: Any) -> tuple[Any, Any]:
    out, starts = jax.lax.scan(lambda c, _: (advance_kept(step, c, params, length, paired), c), carry, None,
                               length=segments)
    return out, (starts, params)


def _segmented_bwd(step: Step, segments: int, length: int, paired: bool, res: Any, ct: Any) -> tuple[Any, Any]:
    starts, params = res
    first = jax.tree_util.tree_map(lambda x: x[0], starts)

    def segment(state: tuple[Any, Any, Any], xs: tuple[Any, Any]) -> tuple[tuple[Any, Any, Any], None]:
        lam, p_bar, states = state
        start, index = xs
        states = recompute(step, start, params, states, length, paired)
        lam, p_bar = pull_back(step, states, length, params, (lam, p_bar), index == 0, paired)
        return (lam, p_bar, states), None

    buffer = state_buffer(first, length, paired)
    # the barrier keeps the objective's own adjoint out of streaming's transpose (else XLA copies it into each
    # direction's kernel)
    carry = into_reverse(step, first, params, _barrier(_inexact(ct)), zero_cotangents(params))
    (lam, p_bar, _), _ = jax.lax.scan(segment, (*carry, buffer), (starts, jnp.arange(segments)), reverse=True)
    return _full(lam, first), _full(p_bar, params)


segmented.defvjp(_segmented_fwd, _segmented_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def binomial(step: Step, steps: int, snapshots: int, carry: Any, params: Any) -> Any:
    """``steps`` steps; the backward pass follows :func:`binomial_schedule` with ``snapshots`` kept states."""
    return advance_kept(step, carry, params, steps)


def _binomial_fwd(step: Step, steps: int, snapshots: int, carry: Any, params: Any) -> tuple[Any, Any]:
    return advance_kept(step, carry, params, steps), (carry, params)


def _binomial_bwd(step: Step, steps: int, snapshots: int, res: Any, ct: Any) -> tuple[Any, Any]:
    carry, params = res
    actions = jnp.asarray(binomial_schedule(steps, snapshots))
    slots = jax.tree_util.tree_map(lambda x: jnp.zeros((snapshots, *jnp.shape(x)), jnp.result_type(x)).at[0].set(x),
                                   carry)

    def act(a: Any, state: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        slots, lam, p_bar = state
        source, count, target, adjoint = (actions[a, k] for k in range(4))
        with jax.named_scope(RECOMPUTE):  # the states re-run without residuals (lbm.profiling.gradient.pass_of)
            x = advance_kept(step, jax.tree_util.tree_map(lambda s: s[source], slots), params, count)

        def pull(_: None) -> tuple[Any, Any, Any]:
            x_bar, p_step = _pull(step, x, params, lam)
            return slots, x_bar, _add(p_bar, p_step)

        def keep(_: None) -> tuple[Any, Any, Any]:
            return jax.tree_util.tree_map(lambda s, v: s.at[target].set(v), slots, x), lam, p_bar

        return jax.lax.cond(adjoint == 1, pull, keep, None)

    _, lam, p_bar = jax.lax.fori_loop(0, actions.shape[0], act, (slots, _inexact(ct), zero_cotangents(params)))
    return _full(lam, carry), _full(p_bar, params)


binomial.defvjp(_binomial_fwd, _binomial_bwd)


def run_steps(step: Step, carry: Any, params: Any, steps: int, policy: str = "sqrt", every: int | None = None,
              snapshots: int | None = SNAPSHOTS, paired: bool = False) -> Any:
    """``step`` applied ``steps`` times to ``carry``, differentiable by carry and params under the checkpointing
    ``policy`` (see the module doc); ``paired``: the loops of every and sqrt two steps per iteration (on a GPU)."""
    length = segment_length(policy, steps, every, snapshots)
    if steps <= 0:
        return carry
    if policy == "binomial":
        return binomial(step, steps, min(snapshots, steps), carry, params)
    if policy == "none":  # jax's reverse mode of the plain loop: each step's intermediate values kept
        return advance(step, carry, params, steps)
    length = min(length, steps)
    carry = segmented(step, steps // length, length, paired, carry, params)
    if steps % length:  # a second program, compiled anew: sqrt picks a length that divides the steps where it can
        carry = segmented(step, 1, steps % length, paired, carry, params)
    return carry
