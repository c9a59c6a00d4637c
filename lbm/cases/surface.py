"""Obstacles from triangle surfaces (STL, OBJ, PLY, OFF, glTF: what trimesh reads) on 3D lattices.

A surface is read with trimesh (:func:`read_surface`; empty or open surfaces are refused with one
line), scaled by ``case.scale`` cells per mesh unit and centred at ``case.center`` (node
coordinates; :func:`placed`). Its solid cells are the lattice nodes inside it, by trimesh's
point-in-mesh test (:func:`solid_nodes`). The interpolated (Bouzidi) walls take their fractions q
from the exact distance along each fluid-to-solid link to the first triangle it crosses
(:func:`surface_intersect`): trimesh's ray engine finds the triangle (Embree, in single precision,
where embreex is installed), and q is then computed in double precision from that triangle's
plane, so the wall position is exact for the surface as given. :func:`lbm.boundaries.interpolated.ball_intersect` is the
analytic sphere, the reference a triangulated sphere is validated against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lbm.errors import ConfigError

MESH_SUFFIXES = (".stl", ".obj", ".ply", ".off", ".glb", ".gltf")
"""File types read as triangle surfaces (by trimesh)."""


def read_surface(path: Path, key: str = "case.mask") -> Any:
    """The closed triangle surface in ``path`` as a ``trimesh.Trimesh``; ConfigError if unreadable, empty or open."""
    import trimesh

    try:
        mesh = trimesh.load(str(path), force="mesh")
    except Exception as exc:  # trimesh raises many types for a malformed file
        raise ConfigError(key, str(path), f"a surface mesh trimesh can read ({type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:120]})") from None
    if not isinstance(mesh, trimesh.Trimesh) or mesh.is_empty or len(mesh.faces) == 0:
        raise ConfigError(key, str(path), "a surface mesh with at least one triangle (the file holds none)")
    if not mesh.is_watertight:
        open_edges = int(len(trimesh.grouping.group_rows(mesh.edges_sorted, require_count=1)))
        raise ConfigError(key, str(path), f"a closed (watertight) surface: this one has {open_edges} open edges; "
                          "repair it (e.g. trimesh's fill_holes) or export it closed")
    return mesh


def placed(mesh: Any, scale: float, center: tuple[float, ...]) -> Any:
    """A copy of ``mesh`` scaled by ``scale`` (cells per mesh unit) with its bounding-box centre at ``center``."""
    out = mesh.copy()
    out.apply_scale(float(scale))
    lo, hi = out.bounds
    out.apply_translation(np.asarray(center, np.float64) - (lo + hi) / 2)
    return out


def solid_nodes(mesh: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The lattice nodes (integer coordinates, grid ``shape``) inside the closed surface ``mesh``."""
    lo = np.maximum(np.ceil(mesh.bounds[0]).astype(int), 0)
    hi = np.minimum(np.floor(mesh.bounds[1]).astype(int), np.asarray(shape) - 1)
    solid = np.zeros(shape, bool)
    if np.any(hi < lo):
        return solid
    axes = [np.arange(a, b + 1) for a, b in zip(lo, hi, strict=True)]
    points = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(shape)).astype(np.float64)
    inside = np.asarray(mesh.contains(points), bool).reshape([len(a) for a in axes])
    solid[tuple(slice(a, b + 1) for a, b in zip(lo, hi, strict=True))] = inside
    return solid


def plane_fraction(triangles: np.ndarray, points: np.ndarray, links: np.ndarray) -> np.ndarray:
    """Where each segment point -> point + link meets the plane of its triangle, as a fraction of the link."""
    v0 = triangles[:, 0]
    normal = np.cross(triangles[:, 1] - v0, triangles[:, 2] - v0)
    along = np.einsum("ij,ij->i", normal, links)
    return np.einsum("ij,ij->i", normal, v0 - points) / np.where(along != 0, along, np.nan)


def first_hits(mesh: Any, points: np.ndarray, links: np.ndarray) -> np.ndarray:
    """The index of the first triangle each ray point + t link (t > 0) crosses; -1 where none."""
    hits = np.asarray(mesh.ray.intersects_first(points, links), np.int64)
    if np.any(hits < 0) and type(mesh.ray).__module__ != "trimesh.ray.ray_triangle":
        from trimesh.ray.ray_triangle import RayMeshIntersector  # double precision, for rays Embree missed

        missed = hits < 0
        hits[missed] = RayMeshIntersector(mesh).intersects_first(points[missed], links[missed])
    return hits


def surface_intersect(mesh: Any) -> Any:
    """The wall fractions q of links from fluid nodes towards solid ones, at the first triangle of ``mesh`` crossed."""
    triangles = np.asarray(mesh.triangles, np.float64)

    def intersect(points: np.ndarray, links: np.ndarray) -> np.ndarray:
        points = np.asarray(points, np.float64)
        links = np.asarray(links, np.float64)
        hits = first_hits(mesh, points, links)
        q = np.full(len(points), np.nan)
        ok = hits >= 0
        q[ok] = plane_fraction(triangles[hits[ok]], points[ok], links[ok])
        return q

    return intersect


def ball(center: tuple[float, ...], radius: float, shape: tuple[int, ...]) -> np.ndarray:
    """The lattice nodes strictly inside the ball of ``radius`` about ``center``."""
    coords = np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij")
    return sum((x - c) ** 2 for x, c in zip(coords, center, strict=True)) < radius**2
