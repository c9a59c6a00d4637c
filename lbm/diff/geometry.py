"""Differentiable wall positions: the interpolated (BFL) wall fraction q as a smooth function of a shape's parameters.

A binary mask moves in whole cells, so the derivative of anything with respect to a radius or a
centre through it is zero. Here the link set (which fluid cell links to which solid cell) is fixed by
the mask of the unperturbed shape, and what moves continuously is where the wall cuts each link:
q(centre, semi-axes) of an ellipse (a circle: both semi-axes its radius), from the ray–ellipse
intersection of lbm.cases.cylinder.ellipse_intersect, written in jax.numpy. The BFL coefficients
(lbm.boundaries.interpolated.bfl_weights) follow from q; they are smooth in q on each side of q = 1/2
and continuous across it. The derivative is exact for every perturbation that keeps each node on its
side of the wall (the mask unchanged).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.boundaries.interpolated import InterpolatedBounceBack

ON_THE_WALL = 1e-6
"""A node closer to the curved wall than this (in link lengths, q or 1 - q) counts as on it."""


def link_geometry(wall: InterpolatedBounceBack, shape: tuple[int, ...], lattice: Any) -> tuple[np.ndarray, np.ndarray,
                                                                                               np.ndarray]:
    """Per link: the fluid node's coordinates (n, D), the link vector c_i (n, D), and whether x_f - c_i is fluid (n,)."""
    link_fluid = np.asarray(wall.link_fluid, np.int64)
    points = np.stack(np.unravel_index(link_fluid, shape), axis=1).astype(np.float64)
    links = lattice.c[np.asarray(wall.link_dir, np.int64)].astype(np.float64)
    far_is_fluid = np.asarray(wall.link_far, np.int64) != link_fluid
    return points, links, far_is_fluid


def ellipse_fraction(points: np.ndarray, links: np.ndarray, center: Any, axes: Any) -> jnp.ndarray:
    """Where an ellipse of semi-axes ``axes`` = (a, b) along x and y (a cylinder along z in 3D) cuts each link from
    ``points`` along ``links``: q, a fraction of the link (the entering root; a circle has a = b = its radius)."""
    scale = 1.0 / jnp.stack([jnp.asarray(axes[0]), jnp.asarray(axes[1])])
    p = (jnp.asarray(points[:, :2]) - jnp.stack([jnp.asarray(center[0]), jnp.asarray(center[1])])) * scale
    c = jnp.asarray(links[:, :2]) * scale
    a = jnp.sum(c * c, axis=1)
    b = 2 * jnp.sum(p * c, axis=1)
    k = jnp.sum(p * p, axis=1) - 1.0
    disc = jnp.sqrt(jnp.maximum(b * b - 4 * a * k, 1e-300))
    return (-b - disc) / (2 * a)


def bfl_weights(q: jnp.ndarray, far_is_fluid: np.ndarray) -> jnp.ndarray:
    """Linear BFL coefficients (3, n) of f*_i(x_f), f*_i(x_f - c_i), f*_ī(x_f): lbm.boundaries.interpolated.bfl_weights in jax."""
    low = (q < 0.5) & far_is_fluid
    high = q >= 0.5
    q_high = jnp.maximum(q, 0.5)
    one = jnp.ones_like(q)
    w0 = jnp.where(low, 2 * q, jnp.where(high, 1 / (2 * q_high), one))
    w1 = jnp.where(low, 1 - 2 * q, 0 * q)
    w2 = jnp.where(high, (2 * q_high - 1) / (2 * q_high), 0 * q)
    return jnp.stack([w0, w1, w2])


def moved_ellipse(wall: InterpolatedBounceBack, shape: tuple[int, ...], lattice: Any, center: Any, axes: Any
                  ) -> InterpolatedBounceBack:
    """``wall`` (the BFL wall of an ellipse) with q and its weights for the ellipse of ``center`` and semi-axes ``axes``
    (traced)."""
    points, links, far_is_fluid = link_geometry(wall, shape, lattice)
    raw = ellipse_fraction(points, links, center, axes)
    # q in [0, 1] (a node on the wall can come out a rounding outside), with the derivative of the unclipped q where
    # the clip moved it by a rounding: at a node on the wall that is the one-sided derivative in the direction that
    # keeps the mask (a clip's would be half); a q clipped further (a shape far from the mask's) keeps the clip's
    clipped = jnp.clip(raw, 0.0, 1.0)
    q = jnp.where(jnp.abs(raw - clipped) <= ON_THE_WALL, raw + jax.lax.stop_gradient(clipped - raw), clipped)
    return wall.__class__(solid=wall.solid, link_dir=wall.link_dir, link_solid=wall.link_solid,
                          link_fluid=wall.link_fluid, link_far=wall.link_far, weights=bfl_weights(q, far_is_fluid), q=q)


def moved_circle(wall: InterpolatedBounceBack, shape: tuple[int, ...], lattice: Any, center: Any, radius: Any
                 ) -> InterpolatedBounceBack:
    """``wall`` (the BFL wall of a circle) with q and its weights for the circle of ``center`` and ``radius`` (traced)."""
    return moved_ellipse(wall, shape, lattice, center, (radius, radius))
