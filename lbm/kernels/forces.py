"""Stage ``forces``: momentum exchange on an obstacle's boundary links."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from lbm.lattice import Lattice


def boundary_links(obstacle: np.ndarray, fluid: np.ndarray, lattice: Lattice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Links from fluid cells into the obstacle: (direction i, flat fluid index, flat solid index), periodic wrap."""
    dirs, src, dst = [], [], []
    shape = obstacle.shape
    flat = np.arange(obstacle.size).reshape(shape)
    for i in range(lattice.q):
        c = tuple(int(s) for s in lattice.c[i])
        if not any(c):
            continue
        # neighbour index of every cell along c_i (same periodic wrap as streaming)
        neighbour = np.roll(flat, tuple(-s for s in c), axis=tuple(range(lattice.d)))
        hits = fluid & np.roll(obstacle, tuple(-s for s in c), axis=tuple(range(lattice.d)))
        dirs.append(np.full(int(hits.sum()), i, dtype=np.int32))
        src.append(flat[hits].astype(np.int32))
        dst.append(neighbour[hits].astype(np.int32))
    return np.concatenate(dirs), np.concatenate(src), np.concatenate(dst)


def momentum_exchange(
    f_post: jnp.ndarray,
    f_bounced: jnp.ndarray,
    link_dir: jnp.ndarray,
    link_src: jnp.ndarray,
    link_dst: jnp.ndarray,
    lattice: Lattice,
) -> jnp.ndarray:
    """Force on the obstacle, shape ``(D,)``: sum over links of c_i (f*_i(x_f) + f_opp(i)(x_s)) after bounce-back."""
    q = f_post.shape[0]
    incoming = f_post.reshape(q, -1)[link_dir, link_src]
    opposite = jnp.asarray(lattice.opposite)[link_dir]
    outgoing = f_bounced.reshape(q, -1)[opposite, link_dst]
    c = jnp.asarray(lattice.c, f_post.dtype)[link_dir]
    w = jnp.asarray(lattice.w, f_post.dtype)[link_dir]
    return link_force(c, w, incoming, outgoing)


def link_force(c: jnp.ndarray, w: jnp.ndarray, incoming: jnp.ndarray, outgoing: jnp.ndarray) -> jnp.ndarray:
    """Force on the obstacle, shape ``(D,)``, from each link's direction ``c`` (links, D), weight ``w`` (links,) and
    its two populations as deviations f - w: sum of c_i (f_i + f_opp(i)), each link's 2 w_i c_i added back."""
    return jnp.sum(c * (incoming + outgoing + 2.0 * w)[:, None], axis=0)
