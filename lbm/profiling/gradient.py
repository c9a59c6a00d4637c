"""The stages of a gradient program: which pass of which stage a kernel or an executable belongs to.

Reverse-mode differentiation of a run (lbm.diff) gives one program with three passes over the
stages: the forward pass, the recomputation of checkpointed segments during the backward pass, and
the backward pass proper (the stages' adjoints, in reverse order). Their rows are named
``collide``, ``collide (recompute)`` and ``collide (backward)`` (:func:`pass_name`).

JAX keeps each stage's ``jax.named_scope`` in the op_name metadata of every pass and marks the pass
by the path around it (jax 0.12): ``jit(value)/jvp()/while/body/.../collide/mul`` (forward),
``jit(value)/transpose(jvp())/.../checkpoint/rematted_computation/.../collide/mul`` (recomputed) and
``jit(value)/transpose(jvp())/.../checkpoint/while/body/.../collide/mul`` (backward); a scope JAX
folds into the transform's name (``transpose(jvp(collide))``) counts the same. :func:`gradient_stages`
reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from lbm.stages import split_scope

BACKWARD = "backward"
RECOMPUTE = "recompute"
PASSES = ("", RECOMPUTE, BACKWARD)
"""The passes of a gradient program in execution order ("": the forward pass)."""
_TRANSPOSE = re.compile(r"(^|/)transpose\(")
_REMAT = re.compile(r"(^|/)(rematted_computation|remat|checkpoint\(rematted)")
_NAMES = re.compile(r"[A-Za-z_][A-Za-z_0-9+]*")


def pass_name(stage: str, kind: str) -> str:
    """The row of ``stage`` in pass ``kind`` ("" forward, :data:`RECOMPUTE`, :data:`BACKWARD`): ``collide (backward)``."""
    return f"{stage} ({kind})" if kind else stage


def pass_of(op_name: str) -> str:
    """The pass an op_name path belongs to: "" (forward), :data:`RECOMPUTE` or :data:`BACKWARD`."""
    if not _TRANSPOSE.search(op_name):
        return ""
    return RECOMPUTE if _REMAT.search(op_name) else BACKWARD


def gradient_stages(op_name: str, stages: Iterable[str]) -> list[str]:
    """The rows (``stage`` or ``stage (pass)``) of the stages named in an op_name path, in path order."""
    wanted = set(stages)
    kind = pass_of(op_name)
    found: list[str] = []
    for word in _NAMES.findall(op_name):  # path components, and names inside a transform's parentheses
        for stage in split_scope(word):
            if stage in wanted and pass_name(stage, kind) not in found:
                found.append(pass_name(stage, kind))
    return found
