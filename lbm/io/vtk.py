"""VTK image data (.vti) of density, velocity, vorticity and solid for ParaView, in the run's precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lbm.io.fields import vorticity, vorticity_vector


def write_vti(path: Path, fields: dict[str, np.ndarray]) -> Path:
    """Write rho, velocity (vector), vorticity and solid (UInt8) as cell data on a uniform grid; returns the .vti path.

    Floats keep the dtype of ``fields["u"]`` (Float32 for a float32 run). In 3D, ``vorticity`` is the
    magnitude (as in fields.npz) and ``vorticity_vector`` the vector.
    """
    from pyevtk.hl import imageToVTK

    u, rho = fields["u"], fields["rho"]
    solid = np.asarray(fields["solid"], dtype=bool)
    dtype = u.dtype if u.dtype in (np.float32, np.float64) else np.float64

    def cells(a: np.ndarray, kind: type = dtype) -> np.ndarray:
        return np.ascontiguousarray(a[..., None] if rho.ndim == 2 else a, dtype=kind)

    comps = [cells(u[a]) for a in range(u.shape[0])]
    if len(comps) == 2:
        comps.append(np.zeros_like(comps[0]))
    vort = fields["vorticity"] if "vorticity" in fields else vorticity(u, solid)
    data: dict[str, object] = {"density": cells(rho), "velocity": tuple(comps), "solid": cells(solid, np.uint8),
                               "vorticity": cells(vort)}
    if u.shape[0] == 3:
        data["vorticity_vector"] = tuple(cells(w) for w in vorticity_vector(u, solid))
    path.parent.mkdir(parents=True, exist_ok=True)
    return Path(imageToVTK(str(path.with_suffix("")), cellData=data))
