"""VTK image data (.vti) of density, velocity and vorticity for ParaView."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lbm.io.fields import vorticity


def write_vti(path: Path, fields: dict[str, np.ndarray]) -> Path:
    """Write rho, velocity (vector), vorticity and solid as cell data on a uniform grid; returns the .vti path."""
    from pyevtk.hl import imageToVTK

    u = fields["u"]
    rho = fields["rho"]
    pad = (lambda a: a[..., None]) if rho.ndim == 2 else (lambda a: a)
    comps = [np.ascontiguousarray(pad(u[a]), dtype=np.float64) for a in range(u.shape[0])]
    if len(comps) == 2:
        comps.append(np.zeros_like(comps[0]))
    data = {
        "density": np.ascontiguousarray(pad(rho), dtype=np.float64),
        "velocity": tuple(comps),
        "solid": np.ascontiguousarray(pad(fields["solid"]).astype(np.float64)),
    }
    if u.shape[0] == 2:
        data["vorticity"] = np.ascontiguousarray(pad(vorticity(u)), dtype=np.float64)
    else:  # magnitude of the 3D vorticity
        grads = [[np.gradient(u[i], axis=j) for j in range(3)] for i in range(3)]
        wx, wy, wz = grads[2][1] - grads[1][2], grads[0][2] - grads[2][0], grads[1][0] - grads[0][1]
        data["vorticity"] = (np.ascontiguousarray(wx), np.ascontiguousarray(wy), np.ascontiguousarray(wz))
    path.parent.mkdir(parents=True, exist_ok=True)
    out = imageToVTK(str(path.with_suffix("")), cellData=data)
    return Path(out)
