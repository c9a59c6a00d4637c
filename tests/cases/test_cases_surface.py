"""Obstacles from triangle surfaces: trimesh's solid nodes and the exact ray-surface wall fractions q."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from lbm.boundaries.interpolated import InterpolatedBounceBack
from lbm.boundaries.interpolated import ball_intersect as sphere_intersect
from lbm.cases.surface import ball, placed, read_surface, solid_nodes, surface_intersect
from lbm.errors import ConfigError
from lbm.lattice import D3Q19

# trimesh (and the scipy it pulls in) is imported by the tests that use it, not at collection in every worker
pytestmark = pytest.mark.skipif(importlib.util.find_spec("trimesh") is None, reason="trimesh is not installed")

SHAPE = (24, 24, 24)
CENTER = (11.3, 12.1, 11.7)
RADIUS = 6.3


def sphere(subdivisions: int) -> object:
    """A unit icosphere placed as the test sphere (its vertices lie on the analytic sphere)."""
    import trimesh

    return placed(trimesh.creation.icosphere(subdivisions=subdivisions, radius=1.0), RADIUS, CENTER)


def analytic_links() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fluid points, link vectors and analytic q of the analytic sphere's wall links."""
    bfl = InterpolatedBounceBack.from_shape(ball(CENTER, RADIUS, SHAPE), sphere_intersect(CENTER, RADIUS), D3Q19)
    points = np.stack(np.unravel_index(np.asarray(bfl.link_fluid), SHAPE), axis=1).astype(np.float64)
    return points, D3Q19.c[np.asarray(bfl.link_dir)].astype(np.float64), np.asarray(bfl.q)


def brute_force_q(mesh: object, points: np.ndarray, links: np.ndarray) -> np.ndarray:
    """The nearest crossing of each segment with any triangle, in float64, by testing every triangle."""
    tri = np.asarray(mesh.triangles, np.float64)
    v0, e1, e2 = tri[:, 0], tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    best = np.full(len(points), np.inf)
    for k, (p, d) in enumerate(zip(points, links, strict=True)):  # Moller-Trumbore against all triangles
        best[k] = _nearest(p, d, v0, e1, e2)
    return best


def _nearest(p: np.ndarray, d: np.ndarray, v0: np.ndarray, e1: np.ndarray, e2: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.cross(d, e2)
        a = np.einsum("ij,ij->i", e1, h)
        s = p - v0
        u = np.einsum("ij,ij->i", s, h) / a
        qv = np.cross(s, e1)
        v = (qv @ d) / a
        t = np.einsum("ij,ij->i", e2, qv) / a
        hit = (u >= -1e-12) & (v >= -1e-12) & (u + v <= 1 + 1e-12) & (t > 0)
    return float(t[hit].min())


@pytest.mark.slow
def test_the_sphere_surface_has_the_analytic_spheres_solid_nodes() -> None:
    assert np.array_equal(solid_nodes(sphere(4), SHAPE), ball(CENTER, RADIUS, SHAPE))


def test_wall_fractions_are_the_exact_ray_surface_distances() -> None:
    mesh = sphere(3)
    points, links, _ = analytic_links()
    q = surface_intersect(mesh)(points, links)
    assert np.all(np.isfinite(q)) and np.all((q > 0) & (q <= 1))
    assert np.max(np.abs(q - brute_force_q(mesh, points, links))) < 1e-9


def test_wall_fractions_converge_to_the_analytic_sphere_at_second_order() -> None:
    points, links, exact = analytic_links()
    errors = [np.max(np.abs(surface_intersect(sphere(n))(points, links) - exact)) for n in (3, 4, 5)]
    assert errors[2] < 0.03
    for coarse, fine in zip(errors, errors[1:], strict=False):  # facets halve per subdivision: error / 4
        assert 3.0 < coarse / fine < 5.5


def test_an_open_empty_or_unreadable_surface_is_refused_in_one_line(tmp_path: Path) -> None:
    import trimesh

    mesh = trimesh.creation.box()
    opened = trimesh.Trimesh(mesh.vertices, mesh.faces[:-2])
    opened.export(tmp_path / "open.stl")
    with pytest.raises(ConfigError, match="watertight.*open edges"):
        read_surface(tmp_path / "open.stl")
    (tmp_path / "text.stl").write_text("this is not a mesh\n")
    with pytest.raises(ConfigError, match="case.mask") as info:
        read_surface(tmp_path / "text.stl")
    assert "\n" not in str(info.value)
    trimesh.creation.box().export(tmp_path / "box.obj")
    assert read_surface(tmp_path / "box.obj").is_watertight


def _sphere_run(tmp_path: Path, **extra: str) -> list[str]:
    import trimesh

    trimesh.creation.icosphere(subdivisions=4, radius=1.0).export(tmp_path / "sphere.stl")
    overrides = {"case": "obstacle", "case.mask": str(tmp_path / "sphere.stl"), "case.scale": "4.2",
                 "case.center": "[12.3,11.6,11.8]", "lattice": "d3q19", "grid.nx": "48", "grid.ny": "24",
                 "grid.nz": "24", "flow.reynolds": "20", "steps": "500", **extra}
    return [f"{k}={v}" for k, v in overrides.items()]


@pytest.mark.slow
@pytest.mark.native_optimised  # a long native run (tests/conftest.py)
def test_the_stl_spheres_drag_equals_the_analytic_spheres(tmp_path: Path) -> None:
    """Same solid nodes, q from the triangulated surface or the exact sphere: drag within 0.3% (measured 0.11%)."""
    import dataclasses

    from lbm.boundaries.interpolated import bfl_weights
    from lbm.engines import make_engine
    from lbm.simulation import prepare

    case, setup = prepare(_sphere_run(tmp_path))
    bcs = list(setup.boundaries)
    k = next(i for i, b in enumerate(bcs) if isinstance(b, InterpolatedBounceBack))
    stl = bcs[k]
    center, radius = (12.3, 11.6, 11.8), 4.2
    assert np.array_equal(np.asarray(stl.solid), ball(center, radius, setup.solid.shape))
    points = np.stack(np.unravel_index(np.asarray(stl.link_fluid), setup.solid.shape), axis=1).astype(np.float64)
    q = sphere_intersect(center, radius)(points, D3Q19.c[np.asarray(stl.link_dir)])
    assert 0 < np.max(np.abs(q - np.asarray(stl.q))) < 0.05  # the facets of a 5120-triangle sphere
    far_is_fluid = np.asarray(stl.link_far) != np.asarray(stl.link_fluid)
    bcs[k] = dataclasses.replace(stl, q=q, weights=bfl_weights(q, far_is_fluid))
    drag = []
    for s in (setup, dataclasses.replace(setup, boundaries=tuple(bcs))):
        _, aux = make_engine(s, "fused", engine="auto").advance(s.initial_populations(), 500)
        drag.append(float(np.asarray(aux["force"])[-200:, 0].mean()))
    assert drag[1] > 0
    assert abs(drag[0] - drag[1]) / drag[1] < 3e-3


def test_surface_obstacles_are_refused_in_one_line_before_anything_is_written(tmp_path: Path, capsys) -> None:
    import trimesh

    from lbm.cli import main

    box = trimesh.creation.box()
    trimesh.Trimesh(box.vertices, box.faces[:-2]).export(tmp_path / "open.stl")
    cases = {
        "open": [*_sphere_run(tmp_path)[:-1], f"case.mask={tmp_path / 'open.stl'}"],
        "2d": [*_sphere_run(tmp_path), "lattice=d2q9", "grid.nz=null"],
        "too big": [*_sphere_run(tmp_path), "case.scale=40"],
    }
    for name, overrides in cases.items():
        out = tmp_path / f"run-{name.replace(' ', '_')}"
        assert main(["run", *overrides, f"hydra.run.dir={out}"]) == 2, name
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "case.mask" in err, (name, err)
        assert not out.exists()


def test_a_sphere_in_a_narrow_channel_is_flagged_for_blockage_and_resolution(tmp_path: Path) -> None:
    """Issue 39 item 6: D = 8 in a 24^2 cross-section: the surface's own extent over the channel's, the frontal area."""
    import trimesh

    from lbm.config import load
    from lbm.simulation import make_case

    trimesh.creation.icosphere(subdivisions=2, radius=1.0).export(tmp_path / "sphere.stl")
    case = make_case(load(["case=obstacle", f"case.mask={tmp_path / 'sphere.stl'}", "case.scale=4", "lattice=d3q19",
                           "grid.nx=48", "grid.ny=24", "grid.nz=24"]))
    out = case.confinement()
    assert out["blockage_ratio"] == pytest.approx(case.diameter / 24) and 7.8 < case.diameter <= 8.0
    assert out["frontal_area"] == case.reference_area == case.obstacle()[0].any(axis=0).sum()
    assert "blockage_note" in out and "resolution_note" in out
