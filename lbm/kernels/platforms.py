"""Which form of a kernel a platform compiles (:func:`cell_form`): "cpu", or "default" for a GPU or TPU."""

from __future__ import annotations

import jax


def cell_form(platform: str | None = None) -> str:
    """The key of lbm.diff.adjoint.CELL_FORMS (and of the other per-platform forms) for a platform (cpu, cuda, gpu,
    tpu; None: jax's default backend), chosen when the step is traced: a form chosen in the program
    (``jax.lax.platform_dependent``) traces and compiles both."""
    return "cpu" if (platform or jax.default_backend()) == "cpu" else "default"
