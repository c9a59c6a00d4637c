"""fields.npz at the walls: the walls' own velocity in solid cells, wall-aware vorticity; VTK and frames."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from helpers.runs import run_config

from lbm.io.fields import vorticity, wall_derivative, with_wall_velocity
from lbm.simulation import simulate


def channel(nx: int = 4, ny: int = 12) -> tuple[dict[str, np.ndarray], float, np.ndarray]:
    """A half-way-wall channel holding the parabola u = y'(H - y') (y' = j - 1/2); its du/dy' = H - 2 y' exactly."""
    height = ny - 2
    y = np.arange(ny) - 0.5
    ux = np.tile(y * (height - y), (nx, 1))
    ux[:, [0, -1]] = 0.37  # what bounced populations imply in the wall rows: not the wall's velocity
    solid = np.zeros((nx, ny), bool)
    solid[:, [0, -1]] = True
    fields = {"rho": np.ones((nx, ny)), "u": np.stack([ux, np.zeros_like(ux)]), "solid": solid}
    return fields, height, height - 2 * y


def test_solid_cells_hold_the_wall_velocity_and_fluid_cells_are_untouched():
    fields, _, _ = channel()
    wall = np.zeros_like(fields["u"])
    wall[0, :, -1] = 0.05  # the upper wall moves along x
    out = with_wall_velocity(fields, wall)
    assert np.all(out["u"][0, :, -1] == 0.05) and np.all(out["u"][:, :, 0] == 0.0)
    assert np.array_equal(out["u"][:, :, 1:-1], fields["u"][:, :, 1:-1])
    assert np.all(with_wall_velocity(fields, None)["u"][:, fields["solid"]] == 0.0)  # resting walls


def test_wall_vorticity_matches_the_analytic_parabola_at_the_wall_rows():
    fields, _, dudy = channel()
    out = with_wall_velocity(fields, None, periodic=(True, False))
    omega = out["vorticity"]
    # vorticity = -du/dy, exact for a parabola at every fluid row, the rows next to the walls included
    assert np.allclose(omega[:, 1:-1], -dudy[1:-1], rtol=0, atol=1e-12)
    assert np.all(omega[:, [0, -1]] == 0.0)
    # the central difference across the wall cells (np.gradient) misses the wall rows by a cell's worth
    naive = -np.gradient(out["u"][0], axis=1)
    assert np.abs(naive[:, 1] - (-dudy[1])).max() > 0.2 * abs(dudy[1])


def test_wall_derivative_of_a_moving_wall_and_the_domain_edges():
    solid = np.array([False, False, False, True])
    a = np.array([0.0, 1.0, 4.0, 5.0])  # nodes 0..2, then a wall at x = 2.5 moving with 5
    d = wall_derivative(a, solid, 0)
    # node 2: the slope at x = 2 of the parabola through (1, 1), (2, 4) and (2.5, 5)
    assert d[2] == pytest.approx(np.polyval(np.polyder(np.polyfit([1.0, 2.0, 2.5], [1.0, 4.0, 5.0], 2)), 2.0))
    assert d[1] == pytest.approx(2.0) and d[0] == pytest.approx(1.0) and d[3] == 0.0  # central; one-sided; solid
    wave = np.cos(2 * np.pi * np.arange(16) / 16)
    assert wall_derivative(wave, np.zeros(16, bool), 0, periodic=True)[0] == pytest.approx(0.0, abs=1e-15)
    assert wall_derivative(wave, np.zeros(16, bool), 0)[0] == pytest.approx(wave[1] - 1.0)


def test_3d_vorticity_is_the_magnitude_of_the_curl():
    nx, ny, nz = 4, 8, 5
    y = np.arange(ny, dtype=float)[None, :, None] * np.ones((nx, ny, nz))
    u = np.stack([0.01 * y, np.zeros_like(y), np.zeros_like(y)])  # simple shear: curl = (0, 0, -0.01)
    w = vorticity(u, np.zeros((nx, ny, nz), bool), periodic=(True, False, True))
    assert np.allclose(w, 0.01, atol=1e-15)


def wall_aware_reference(u: np.ndarray, lid: float) -> np.ndarray:
    """Vorticity of the fluid row under the lid by a quadratic fit through two fluid nodes and the lid (y = +1/2)."""
    ux, uy = u[0], u[1]
    j = ux.shape[1] - 2
    rows = []
    for i in range(2, ux.shape[0] - 2):  # away from the side walls: central dv/dx
        coef = np.polyfit([-1.0, 0.0, 0.5], [ux[i, j - 1], ux[i, j], lid], 2)
        rows.append((uy[i + 1, j] - uy[i - 1, j]) / 2 - coef[1])
    return np.array(rows)


@pytest.mark.slow
def test_cavity_fields_hold_the_lid_velocity_and_wall_aware_vorticity(tmp_path):
    metrics = simulate(run_config("case=cavity", "grid.nx=24", "grid.ny=24", "steps=1500", "output.plots=false",
                                  "precision=float64"), tmp_path / "r")
    with np.load(tmp_path / "r" / "fields.npz") as f:
        u, solid, omega = f["u"], f["solid"], f["vorticity"]
    lid = metrics["u_lattice"]
    assert np.all(u[0, 1:-1, -1] == lid) and np.all(u[1, :, -1] == 0.0)
    rest = solid.copy()
    rest[1:-1, -1] = False  # the lid's edge cells belong to the resting side walls
    assert np.all(u[:, rest] == 0.0)
    under_lid = omega[2:-2, -2]
    assert np.all(under_lid < 0)  # the lid drags the fluid: strongly negative vorticity just beneath it
    assert np.allclose(under_lid, wall_aware_reference(u, lid), rtol=1e-9, atol=1e-15)


def vti_arrays(path) -> dict[str, str]:
    """Name -> VTK type of the cell arrays of a .vti file."""
    head = path.read_bytes().split(b"<AppendedData")[0].decode()
    root = ET.fromstring(head + "</VTKFile>")
    return {a.get("Name"): a.get("type") for a in root.iter("DataArray")}


def test_vtk_and_animation_of_a_float32_run(tmp_path, monkeypatch):
    """The fast lane's representative of VTK and frames: a float32 run writes Float32 VTK and one-scale frames."""
    from lbm.io import plots

    limits: list[tuple[float | None, float]] = []
    real_frame = plots.frame

    def recording_frame(*args, **kwargs):
        out = real_frame(*args, **kwargs)
        limits.append((args[3] if len(args) > 3 else kwargs.get("limit"), out))
        return out

    monkeypatch.setattr(plots, "frame", recording_frame)
    metrics = simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=40", "output.every=20",
                                  "output.vtk=true", "output.animation=true", "output.plots=false", "engine=xla"),
                       tmp_path / "r")
    run_dir = tmp_path / "r"
    vtis = sorted((run_dir / "vtk").glob("*.vti"))
    assert [p.name for p in vtis] == ["fields_0000000020.vti", "fields_0000000040.vti"]
    types = vti_arrays(vtis[0])
    assert types == {"density": "Float32", "velocity": "Float32", "solid": "UInt8", "vorticity": "Float32"}
    assert "plots/vorticity.gif" in metrics["outputs"]
    from PIL import Image

    with Image.open(run_dir / "plots" / "vorticity.gif") as gif:
        assert gif.n_frames == 2
    (first_in, first), (second_in, second) = limits
    assert first_in is None and second_in == first == second  # the first frame's scale, kept for the next


def test_frames_share_one_colour_scale_and_show_a_colour_bar(tmp_path):
    from PIL import Image

    from lbm.io.plots import frame

    fields, _, _ = channel(16, 12)
    fields = with_wall_velocity(fields, None)
    decayed = {**fields, "u": 0.3 * fields["u"], "vorticity": 0.3 * fields["vorticity"]}
    limit = frame(tmp_path / "a.png", fields, 1)
    assert frame(tmp_path / "b.png", decayed, 2, limit) == limit
    frame(tmp_path / "c.png", decayed, 2)  # scaled to itself: looks like the first frame
    a, b, c = (np.asarray(Image.open(tmp_path / f"{n}.png").convert("RGB"), dtype=int) for n in "abc")
    assert a.shape == b.shape
    changed_fixed = (np.abs(a - b).sum(axis=2) > 30).mean()
    changed_own = (np.abs(a - c).sum(axis=2) > 30).mean()
    assert changed_fixed > 0.2 and changed_own < 0.01  # a decay is visible on one scale, not on per-frame scales
    assert limit == pytest.approx(float(np.percentile(np.abs(fields["vorticity"][:, 1:-1]), 99.5)))
    # a uniform shear has vorticity -0.01 everywhere (blue): red pixels can only be the colour bar's
    y = np.arange(12, dtype=float)[None, :] * np.ones((16, 12))
    shear = with_wall_velocity({"rho": np.ones((16, 12)), "u": np.stack([0.01 * y, 0 * y]),
                                "solid": np.zeros((16, 12), bool)}, None)
    frame(tmp_path / "d.png", shear, 3, 0.01)
    d = np.asarray(Image.open(tmp_path / "d.png").convert("RGB"), dtype=int)
    assert ((d[..., 0] > 150) & (d[..., 2] < 80)).sum() > 100


def test_frame_limit_from_the_config_and_refused_when_not_positive(tmp_path):
    from lbm.errors import ConfigError
    from lbm.simulation import Outputs

    run = run_config("case=taylor_green", "output.frame_limit=0.002")
    assert Outputs(run, tmp_path, None).frame_limit == 0.002  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="output.frame_limit"):
        run_config("case=taylor_green", "output.frame_limit=0")


@pytest.mark.slow
def test_poiseuille_run_writes_the_analytic_wall_shear(tmp_path):
    """A steady TRT channel (magic 3/16: the parabola is exact on half-way walls): fields.npz's vorticity is -du/dy."""
    metrics = simulate(run_config("case=poiseuille", "grid.nx=4", "grid.ny=10", "collision=trt", "precision=float64",
                                  "steps=auto", "output.plots=false"), tmp_path / "r")
    with np.load(tmp_path / "r" / "fields.npz") as f:
        omega, u = f["vorticity"], f["u"]
    height, force, nu = 8.0, metrics["derived"]["body_force"], metrics["nu"]
    y = np.arange(1, 9) - 0.5
    dudy = force / (2 * nu) * (height - 2 * y)  # the wall rows y' = 1/2 and H - 1/2 included
    assert np.all(u[:, :, [0, -1]] == 0.0)
    assert np.allclose(omega[:, 1:-1], -dudy, rtol=1.5e-6, atol=0)  # measured 5.0e-7; np.gradient: 0.30


def test_fields_npz_is_compressed_when_small_and_stored_plainly_when_large(tmp_path, monkeypatch):
    """Both forms read back equal; a large one is not compressed (zlib writes GBs of fields in minutes)."""
    import zipfile

    from lbm.io import fields as io_fields

    arrays = {"rho": np.linspace(0.9, 1.1, 4096, dtype=np.float32).reshape(64, 64), "solid": np.zeros((64, 64), bool)}
    for limit, stored in ((1 << 30, zipfile.ZIP_DEFLATED), (1000, zipfile.ZIP_STORED)):
        monkeypatch.setattr(io_fields, "COMPRESS_FIELDS_BYTES", limit)
        path = tmp_path / f"fields-{limit}.npz"
        io_fields.write_fields(path, arrays)
        assert {i.compress_type for i in zipfile.ZipFile(path).infolist()} == {stored}
        with np.load(path) as back:
            assert all(np.array_equal(back[k], v) for k, v in arrays.items())
        assert not list(tmp_path.glob("*.tmp.npz"))
