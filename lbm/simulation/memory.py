"""Will a run fit? Its peak memory, estimated before anything is allocated, against what the host and device have.

The estimate is analytic (no array is made, nothing is lowered or compiled), per cell of the grid:

- the populations ``Q * itemsize``, times the engine's planned peak over the populations (:data:`ENGINE_FACTOR`:
  XLA's memory analysis of the compiled chunk, arguments + outputs - aliased + temporaries, measured per engine; the
  ratio does not change with the grid, see tests/simulation/test_memory.py and scripts/memory_estimate.py);
- a host copy of the populations (the last good state kept for a divergence report, checkpoints, fields);
- the case's set-up arrays at their peak (``Case.setup_bytes_per_cell``, measured with tracemalloc per case);
- the observation, fields and plots (``Case.output_bytes_per_cell``, from the measured peak RSS of real runs).

On a CPU the device is the host: everything is counted against the host. On a GPU or TPU the populations and the
larger of the engine's temporaries and the fields are counted against each device's ``memory_stats()['bytes_limit']``
(less what is in use), the rest against the host. The host has the least of /proc/meminfo's MemAvailable,
``ulimit -v`` (RLIMIT_AS less the process's present virtual size) and the cgroup's memory limit (less its anonymous
memory).

``LBM_MEMORY_CHECK=0`` skips the check: the estimate is an upper bound (1.1x to 1.6x the measured growth of the peak
RSS per cell, docs/memory.md), so a run just past it may still fit.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
from pathlib import Path
from typing import Any

from lbm.cases import CASES
from lbm.config import RunConfig
from lbm.errors import LbmError
from lbm.lattice import LATTICES

ENV = "LBM_MEMORY_CHECK"
"""``0`` skips the check (see the module doc)."""
GIB = 2**30

ENGINE_FACTOR = {"xla": 4.1, "native": 1.1, "pallas": 2.5}
"""Planned peak of an engine's fused program over its populations (XLA memory_analysis: arguments + outputs - aliased +
temporaries). xla: 3.11 (periodic) to 3.51 (cylinder) on a CPU, 3.95 (D3Q19 256^3) and 4.00 (D2Q9 4096^2) on a TPU
v5e (docs/tpu-v5e/2026-12-06/bench_*.json); native: 1.00 periodic, 1.01 cylinder (its boundary lists as
arguments); pallas: 2.50 (TPU, D2Q9 4096^2 push kernel), 1.00 in place in 3D (:data:`PALLAS_IN_PLACE`; planes that
are not whole tiles: :data:`PALLAS_UNTILED_3D`), the 2D pair :data:`PALLAS_PAIR_2D`."""
INSTRUMENTED_FACTOR = 10.0
"""The same for mode=instrumented, which runs one jit per stage and holds the stages' outputs between them, which no
one program's analysis sees: its peak RSS grows by 459-502 B per cell (taylor_green 512^2/1024^2/2048^2,
/usr/bin/time -v and tests/simulation/test_memory.py), 6.4 populations beyond the set-up and outputs; 10 bounds it."""

SETUP_DEFAULT = 560
"""Bytes per cell of a case's Setup where the case has no measured entry (``Case.setup_bytes_per_cell``, tracemalloc
while it is built, rounded up; test_setup_bytes_bound_each_case measures every entry)."""

OUTPUT_DEFAULT = 256
"""Bytes per cell the observation (taylor_green_3d: its velocity spectra), fields and plots add where the case has no
measured entry (``Case.output_bytes_per_cell``: the slope of the measured peak RSS of two real runs at a grid and twice its side
(scripts/memory_estimate.py, steps=4) less the other terms, rounded up. Measured, bytes per cell in all (the
estimate), docs/memory.md: taylor_green 1024^2/2048^2 210-213 (308), taylor_green_3d 64^3/128^3 1013-1101 (1243),
cylinder 840x360/1680x720 318-343 (404), D3Q19 cylinder 96x48x48/192x96x96 372-416 (488), cavity 256^2/512^2 376-399
(604), D3Q19 cavity 64^3/128^3 627-647 (968))."""
SUGGEST = 0.95
"""The largest grid a refusal suggests fills this share of what is available: the process's own size moves a little
from one start to the next (its virtual size under ``ulimit -v`` by about 70 MB)."""
HEADROOM = 256 * 2**20
"""Bytes for what does not grow with the grid: compiling, the native kernels, buffers of the libraries."""


@dataclasses.dataclass(frozen=True)
class Need:
    """A run's estimated peak bytes by part; ``device`` parts live on the accelerator (on a CPU: the host)."""

    cells: int
    populations: int
    temporaries: int
    """The engine's program beyond the populations (XLA's planned temporaries, in and out buffers)."""
    host_copy: int
    setup: int
    outputs: int
    devices: int = 1

    @property
    def observation(self) -> int:
        """Bytes an accelerator holds beside the populations between chunks: the observation's programs (fields,
        reductions, taylor_green_3d's spectra) plan at most 1.63x the populations (deviceless v5e, 512^3), so the
        populations' size bounds them; the rest of :attr:`outputs` (files, plots) is the host's."""
        return self.populations

    @property
    def device(self) -> int:
        """Bytes on each accelerator at its peak: the populations with the engine's temporaries (a chunk), or with
        the observation (between chunks), split over the devices."""
        return (self.populations + max(self.temporaries, self.observation)) // self.devices

    @property
    def host_only(self) -> int:
        """Bytes on the host besides the device's."""
        return self.host_copy + self.setup + self.outputs


PALLAS_IN_PLACE = 1.1
"""The pallas engine's planned peak in 3D on a TPU: the in-place AA pair holds the populations once (1.00 on the chip,
D3Q19 256^3 and 512^3, docs/tpu-v5e/2026-12-06/), plus the boundary plan's cells or the faces' solid words (the D3Q19
cylinder 256x128x128: 1.08), where each (y, z) plane is whole (8, 128) tiles."""

PALLAS_UNTILED_3D = (1.2, 2.2)
"""Where a plane is not whole tiles (ny no multiple of 8 or nz of 128) and the kernels keep (ny, nz) (the flat view
pads as much: lbm.engines.pallas.planes.flat_plane), a bound ``a + b * L`` on the same, L = the lanes' padding
ceil(nz / 128) * 128 / nz: the kernels' layout pads z to 128 lanes, and XLA copies the populations into it.
Deviceless v5e, jax 0.10.2, before the flat view: D3Q19 box 64^3 2.00, 420x180x128 2.03, 420x184x128 1.00, 420x180x64
3.26, 256x128x32 5.00, 420x180x32 5.31; the cylinder 420x180x128 2.17, 420x180x64 3.49, 420x180x32 8.28 (an odd
chunk's push step planned up to 1.8 times these until the swap pass replaced it, lbm.engines.pallas.aa.aa_swap_step)."""

PALLAS_FLAT_3D = 1.35
"""The 3D pair's planned peak over the populations per the flat view's padding P / (ny nz), where the kernels view the
planes flat (lbm.engines.pallas.planes.flat_plane); an odd chunk's lone step is the even kernel and the swap pass, in
place like a pair (lbm.engines.pallas.aa.aa_swap_step). Deviceless v5e, jax 0.10.2 and 0.12.0.1, even chunks (planned,
and over P / (ny nz)): box 64^3 1.000 (1.00), D3Q27 96^3 1.000, 258^3 1.015 (1.00); cavity 66^3
1.287 (1.10), 258^3 1.204 (1.19); duct 64x30x30 1.250 (1.10); the cylinder (its faces' rows and force box)
128x60x32 1.351 and 1.372 (1.29), 420x180x32 1.195 (1.12), 420x180x64 1.170 (1.10)."""


PALLAS_PAIR_2D = 1.2
"""The pallas engine's planned peak in 2D on a TPU where the in-place pair runs (from 40 MiB of populations,
lbm.engines.pallas.aa.AA2D_MIN_BYTES; the view's planes of k rows of x pad y to Y, planes.row_cells, and it
plans Y / ny times this). The engine holds the populations in the kernels' view for the whole run
(lbm.engines.pallas.planes.plane_view), so a chunk copies nothing: ``lbm inspect target=v5e lattice=d2q9
case=taylor_green grid.nx=4096 grid.ny=4096 engine=pallas`` plans 1.000x the populations
(``planned_peak_over_population``), ``case=cavity`` 1.167x (its kernel walls' link bits, converted to int32 in the
view in every chunk; 1.111x since the params hold them so, twelfth session), 1.000x and 1.056x at 2048^2 (jax 0.10.2
and 0.12.0.1; it was 2.00x and 2.17x with a copy into the view and back in every chunk). The cylinder on the pair
(lbm.engines.pallas.faces: the solid words and the force's weights) 1.13x per P / ny on jax 0.10.2 (3360x1440:
1.601x; 6720x2880: 1.200x) with one row of x per plane; on planes of k rows (thirteenth session) 3360x1440 (k = 2)
1.210x, 2400x1100 (k = 8) 1.198x. An odd chunk's lone step is the even kernel and the swap pass, in place
(lbm.engines.pallas.aa.aa_swap_step; fifteenth session): with ``steps=11`` deviceless v5e (jax 0.10.2) planned 1.000x
(box) and 1.111x (cavity) at 4096^2, 1.124x and 1.249x at 4098^2, the cylinder 3360x1440 1.206x and 2400x1100 1.192x,
as 10 steps do (1.202x and 1.189x for the cylinders). Until then it was a push step out
of the view and back, or the even kernel and the streaming on the xla side where the push kernel does not fit (4098^2):
2.25x (box) and 3.04x (cavity) at 4096^2, 3.391x and 3.506x at 4098^2, the cylinder 3360x1440 3.361x (bounds 4.5 and
7.1 per P / ny)."""


def pallas_2d_pair_factor(run: RunConfig, platform: str) -> float | None:
    """The 2D in-place pair's planned peak over the populations for ``run`` on ``platform`` (None where the pallas
    engine runs the push kernel or none there): :data:`PALLAS_PAIR_2D` times the view's padding Y / ny of its planes
    of k rows of x (planes.row_group; the kernel walls, the faces and the boundary plan all take them)."""
    lattice = LATTICES[run.lattice]
    if platform != "tpu" or lattice.d != 2:
        return None
    from lbm.engines.pallas.aa import aa2d_not_chosen
    from lbm.engines.pallas.planes import pad_factor, row_group

    grid, group = tuple(run.grid), row_group(tuple(run.grid))
    if aa2d_not_chosen(lattice, grid, "float64" if run.precision == "float64" else "float32", group):
        return None  # the engine's own rule: the push kernel (or xla) runs, not the pair
    return PALLAS_PAIR_2D * pad_factor(grid, group)


def pallas_3d_factor(run: RunConfig) -> float:
    """The 3D in-place pair's planned peak over the populations on a TPU: :data:`PALLAS_IN_PLACE` where each (y, z)
    plane is whole (8, 128) tiles, :data:`PALLAS_FLAT_3D` times the padding where the kernels view the planes flat,
    else the bound :data:`PALLAS_UNTILED_3D`."""
    _, ny, nz = run.grid
    if ny % 8 == 0 and nz % 128 == 0:
        return PALLAS_IN_PLACE
    from lbm.engines.pallas.planes import flat_plane, pad_factor

    if flat_plane(tuple(run.grid)):
        return PALLAS_FLAT_3D * pad_factor(tuple(run.grid))
    a, b = PALLAS_UNTILED_3D
    return a + b * math.ceil(nz / 128) * 128 / nz


def engine_factor(run: RunConfig, platform: str, engine: str | None = None) -> tuple[str, float]:
    """The engine the run will use (``engine``: the one built for it, else as far as the config says) and its planned
    peak over the populations."""
    if run.mode == "instrumented":  # the xla engine's stages, one jit each
        return "xla", INSTRUMENTED_FACTOR
    engine = engine or run.engine
    if engine == "pallas" and platform == "tpu" and LATTICES[run.lattice].d == 3:
        return engine, pallas_3d_factor(run)
    if engine == "pallas" and (pair := pallas_2d_pair_factor(run, platform)) is not None:
        return engine, pair
    if engine == "auto":  # lbm.engines.auto_choice: native on a CPU (xla without a compiler), else pallas or xla
        if platform == "cpu" and run.devices == 1:
            from lbm.engines.native import build

            engine = "native" if build.compiler() is not None else "xla"
        else:
            engine = "xla"  # the larger of pallas and xla
    return engine, ENGINE_FACTOR.get(engine, ENGINE_FACTOR["xla"])


def estimate(run: RunConfig, platform: str = "cpu", engine: str | None = None) -> Need:
    """The peak bytes of ``run`` (its final grid, ``case.run``; ``engine``: the one built for it) by part, without
    allocating."""
    lattice = LATTICES[run.lattice]
    cells = math.prod(run.grid)
    itemsize = 8 if run.precision == "float64" else 4
    populations = lattice.q * itemsize * cells
    _, factor = engine_factor(run, platform, engine)
    case = CASES[run.case]
    setup = case.setup_bytes_per_cell.get(lattice.d, SETUP_DEFAULT) * cells
    outputs = case.output_bytes_per_cell.get(lattice.d, OUTPUT_DEFAULT) * cells
    return Need(cells=cells, populations=populations, temporaries=round((factor - 1.0) * populations),
                host_copy=populations, setup=setup, outputs=outputs, devices=max(1, run.devices))


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _field(text: str | None, key: str) -> int | None:
    """The integer after ``key`` in a /proc or cgroup file of "key value [kB]" lines."""
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[0] == key:
            return int(parts[1]) * (1024 if len(parts) > 2 and parts[2] == "kB" else 1)
    return None


def cgroup_available() -> int | None:
    """Bytes the process's cgroup still allows (its limit less its anonymous memory), None without a limit."""
    limit = (_read("/sys/fs/cgroup/memory.max") or "").strip()
    if limit and limit != "max":
        used = _field(_read("/sys/fs/cgroup/memory.stat"), "anon")
        if used is None:
            used = int((_read("/sys/fs/cgroup/memory.current") or "0").strip() or 0)
        return int(limit) - used
    v1 = (_read("/sys/fs/cgroup/memory/memory.limit_in_bytes") or "").strip()
    if v1 and int(v1) < 2**60:
        used = _field(_read("/sys/fs/cgroup/memory/memory.stat"), "rss") or 0
        return int(v1) - used
    return None


def host_available() -> tuple[int, str]:
    """Bytes the host can still give this process, and which limit says so (the least of them)."""
    found: list[tuple[int, str]] = []
    avail = _field(_read("/proc/meminfo"), "MemAvailable")
    if avail is not None:
        found.append((avail, "MemAvailable"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        size = _field(_read("/proc/self/status"), "VmSize") or 0
        found.append((soft - size, "ulimit -v"))
    cgroup = cgroup_available()
    if cgroup is not None:
        found.append((cgroup, "cgroup memory limit"))
    if not found:
        return 2**62, "no limit found"
    return min(found)


def device_available() -> tuple[int, str] | None:
    """Bytes free on the first device (``memory_stats()``: bytes_limit less bytes_in_use), None where the device does
    not say (a CPU: its memory is the host's)."""
    import jax

    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if not stats or "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)), f"{device.platform.upper()} memory"


def _gib(n: float) -> str:
    return f"{n / GIB:.3g} GiB" if n < 100 * GIB else f"{n / GIB:,.0f} GiB"


def largest_grid(grid: tuple[int, ...], cells: int) -> tuple[int, ...]:
    """``grid`` scaled alike on every axis to at most ``cells`` cells."""
    s = (cells / math.prod(grid)) ** (1 / len(grid))
    out = [max(1, int(n * s)) for n in grid]
    while math.prod(out) > cells and max(out) > 1:
        out[out.index(max(out))] -= 1
    return tuple(out)


def _parts(need: Need, on_device: bool, with_device: bool) -> list[tuple[str, int]]:
    """The named bytes counted on the device (``on_device``) or on the host (``with_device``: the host is the device)."""
    n = need.devices
    if on_device:
        return [("populations", need.populations // n),
                ("engine temporaries or the observation", max(need.temporaries, need.observation) // n)]
    device = [("populations", need.populations), ("engine temporaries", need.temporaries)] if with_device else []
    return [*device, ("host copy", need.host_copy), ("set-up", need.setup), ("fields and plots", need.outputs)]


def refusal(run: RunConfig, need: Need, host: tuple[int, str], device: tuple[int, str] | None,
            check_device: bool = True) -> str | None:
    """The one-line refusal of a run that does not fit (None when it fits); ``device`` None: the host is the device;
    ``check_device`` False: the host's part only (before the engine is known)."""
    places = [("the host", _parts(need, False, device is None), host)]
    if device and check_device:
        places.append((f"each {device[1].split()[0]}", _parts(need, True, False), device))
    for where, parts, (avail, source) in places:
        need_bytes = sum(b for _, b in parts)
        if need_bytes + HEADROOM <= avail:
            continue
        per_cell = need_bytes * (need.devices if where != "the host" else 1) / need.cells
        fits = int(SUGGEST * max(0, avail - HEADROOM) * (need.devices if where != "the host" else 1) / per_cell)
        big = "x".join(map(str, largest_grid(run.grid, fits))) if fits >= 1 else "none"
        listed = ", ".join(f"{name} {_gib(b)}" for name, b in parts)
        return (f"grid {'x'.join(map(str, run.grid))} needs ~{_gib(need_bytes + HEADROOM)} on {where} "
                f"({listed}, other {_gib(HEADROOM)}), {_gib(max(avail, 0))} are available ({source}); "
                f"the largest {run.lattice.upper()} grid of this shape that fits is {big} "
                f"({ENV}=0 skips this estimate)")
    return None


def check_fits(run: RunConfig, engine: str | None = None) -> None:
    """Refuse (LbmError, one line) a run whose estimated peak memory exceeds what the host or device has.

    Called twice by lbm.api.preflight: before the Setup is built (``engine`` None: the host, and on a CPU, whose
    memory is the device's, everything, auto being the native engine there), and on an accelerator once more with the
    engine built for the run (auto's choice depends on the Setup's walls), for the device's part.
    """
    if os.environ.get(ENV, "1") == "0":
        return
    import jax

    platform = jax.default_backend()
    if platform == "cpu" and engine is not None:
        return  # checked whole before the Setup
    device = None if platform == "cpu" else device_available()
    message = refusal(run, estimate(run, platform, engine), host_available(), device, check_device=engine is not None)
    if message:
        raise LbmError(message)


def describe(run: RunConfig, platform: str = "cpu") -> dict[str, Any]:
    """The estimate as data (bytes by part, per-cell figures), for scripts and reports."""
    need = estimate(run, platform)
    return {**dataclasses.asdict(need), "device_bytes": need.device, "host_only_bytes": need.host_only,
            "engine": engine_factor(run, platform)[0], "mode": run.mode}
