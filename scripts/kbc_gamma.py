"""KBC's entropic stabiliser gamma over a checkpointed field, computed in float32 and in float64 from the same state.

    python scripts/kbc_gamma.py outputs/RUN/checkpoints/checkpoint_N.npz [...]

For each checkpoint (D3Q27 or D3Q19, no body force) it recomputes lbm.kernels.collisions.kbc's split per cell
(numpy, in slabs) and prints, for each precision: percentiles of gamma, the share of cells where the
round-off guard takes gamma = 2, the share with gamma < 1.5, the dh-weighted mean of gamma (weights <dh|dh>,
the entropic size of what gamma relaxes), the median of |dh|/|ds| in the entropic norm, and the
float32-float64 difference of gamma per cell. omega is read from the checkpoint's identity (tau).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lbm.kernels.collisions import kbc_matrices
from lbm.lattice import Lattice, get_lattice


def _gamma(f: np.ndarray, lat: Lattice, omega: float, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """gamma (with the guard), <dh|dh> and <ds|ds> per cell of deviations f (Q, n), computed in ``dtype``."""
    f = f.astype(dtype)
    w = lat.w.astype(dtype)[:, None]
    c = lat.c.astype(dtype)
    drho = f.sum(axis=0)
    rho = 1 + drho
    u = (c.T @ f) / rho
    cu = c @ u
    usq = (u * u).sum(axis=0)
    feq = w * (drho + rho * (dtype(-1.5) * usq + cu * (dtype(3.0) + dtype(4.5) * cu)))
    b_mat, k_mat, s_mat = (m.astype(dtype) for m in kbc_matrices(lat))
    neq = f - feq
    m = b_mat @ neq
    ds = s_mat @ m
    dh = neq - (k_mat + s_mat) @ m
    inv = 1 / (feq + w)
    sh = (ds * dh * inv).sum(axis=0)
    hh = (dh * dh * inv).sum(axis=0)
    ss = (ds * ds * inv).sum(axis=0)
    eps = np.finfo(dtype).eps
    resolved = hh > (1e3 * eps) ** 2 * (ss + hh)
    beta = dtype(0.5 * omega)
    gamma = np.where(resolved, 1 / beta - (2 - 1 / beta) * sh / np.where(resolved, hh, 1), 2)
    return gamma.astype(np.float64), hh.astype(np.float64), ss.astype(np.float64)


def report(path: Path, slab: int) -> None:
    """Print gamma's statistics for one checkpoint, float32 and float64."""
    with np.load(path) as z:
        f = z["f"]
        meta = json.loads(bytes(z["meta"]).decode())
    ident = meta["identity"]
    lat = get_lattice(ident["lattice"])
    omega = 1.0 / float(ident["tau"])
    q = lat.q
    flat = f.reshape(q, -1)
    out: dict[type, list[np.ndarray]] = {np.float32: [[], [], []], np.float64: [[], [], []]}
    for start in range(0, flat.shape[1], slab):
        part = flat[:, start:start + slab]
        for dtype in out:
            for acc, arr in zip(out[dtype], _gamma(part, lat, omega, dtype), strict=True):
                acc.append(arr)
    print(f"{path}: step {meta['step']}, {ident['lattice']}, stored {f.dtype}, tau {ident['tau']}, cells {flat.shape[1]}")
    res = {dtype: [np.concatenate(a) for a in acc] for dtype, acc in out.items()}
    for dtype, (g, hh, ss) in res.items():
        pct = np.percentile(g, [1, 5, 25, 50, 75, 95, 99])
        print(f"  {dtype.__name__}: gamma percentiles 1/5/25/50/75/95/99 = " + " ".join(f"{p:.4f}" for p in pct))
        print(f"    guard (gamma = 2) {np.mean(g == 2):.4f} of cells; gamma < 1.5 in {np.mean(g < 1.5):.4f}; "
              f"<dh|dh>-weighted mean gamma {np.sum(g * hh) / np.sum(hh):.4f}; "
              f"median |dh|/|ds| {np.median(np.sqrt(hh / np.maximum(ss, 1e-300))):.3e}")
    dg = np.abs(res[np.float32][0] - res[np.float64][0])
    pct = np.percentile(dg, [50, 95, 99, 100])
    print("  |gamma32 - gamma64| percentiles 50/95/99/max = " + " ".join(f"{p:.2e}" for p in pct))


def main() -> None:
    """Command line: checkpoint files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--slab", type=int, default=1 << 18, help="cells per slab (memory)")
    args = parser.parse_args()
    for path in args.checkpoints:
        report(path, args.slab)


if __name__ == "__main__":
    main()
