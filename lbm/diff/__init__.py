"""Differentiable runs: exact derivatives of a run's observables by its continuous config keys (docs/differentiable.md).

- :func:`lbm.diff.run.differentiable_run`: parameter values -> final populations, fields and force
  observables, a jax function built on the stage functions of lbm.engines.timestep;
- :func:`lbm.diff.api.value_and_grad` (``lbm.value_and_grad``): overrides, keys, objective -> value and
  derivatives; :func:`lbm.diff.api.finite_difference`: the same derivative from ``lbm.run`` itself;
- lbm.diff.parameters (the keys of each case and how they enter the Setup), lbm.diff.checkpointing (none,
  every, sqrt, binomial), lbm.diff.objectives (named objectives per case), lbm.diff.adjoint (the hand-written
  adjoints of the core stages, and the conditions' forms with theirs, asked of each condition: a half-way wall's
  lives in lbm.boundaries.bounce_back);
- lbm.diff.instrumented (``mode=instrumented``: every stage's forward and backward pass its own executable),
  lbm.diff.profile (``profile.enabled=true``: the device time of each stage in each pass).
"""

from lbm.diff.api import finite_difference, value_and_grad
from lbm.diff.run import differentiable_run

__all__ = ["differentiable_run", "finite_difference", "value_and_grad"]
