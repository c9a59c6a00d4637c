"""``python -m lbm inspect target=NAME [run overrides]``: compile the fused chunk for a device without one.

The chunk is the one ``engine=auto`` runs on that target (on a GPU or TPU: ``pallas``), for the
configured case, grid, lattice and precision. It is compiled ahead of time: ``cpu`` with the
installed jaxlib, CUDA targets through a CUDA plugin (``jax-cuda12-plugin`` or ``-cuda13-``, no GPU or
driver needed), TPU targets through libtpu. Targets are data: ``lbm/targets/<name>.yaml`` (platform, the
GPU description or TPU topology, the spec HBM bandwidth and its source).

The loop body of the compiled chunk (the while loop of ``lax.scan``) is read by
:func:`lbm.hlo.loop_traffic`: one row per kernel with the stages it contains and the bytes it
reads and writes per cell and step (the model's assumptions are in lbm/hlo.py), and a summary
with the projection at the target's spec bandwidth and XLA's planned peak memory of the chunk over
the populations (``planned_peak_over_population``: memory_analysis, arguments + outputs - aliased +
temporaries, one device's; the chunk takes the populations as the run loop holds them, engine.place).
Writes ``inspect.json`` and the optimised HLO (``chunk.hlo.txt``) into the run directory (``--out DIR``
or ``hydra.run.dir=DIR``; default ``outputs/inspect/<date>/<time>``).

A multi-device target (``target=v5e:2x2``: a 4-chip TPU topology; ``target=h100:1x1x4``: the CUDA
plugin's partitions x hosts x GPUs per host; or ``target=v5e parallel.devices=4``) compiles the
sharded chunk (lbm.engines.sharded, shard_map over a mesh of the topology's chips; ``parallel.mesh``
chooses the shards, default the TPU's chip grid or all GPUs along x). The HLO is one device's: per-cell
figures are per cell of its shard, and ``parallel`` in inspect.json lists the collectives per step
(kind, stages, in the loop body or once per chunk, bytes each device sends) and the halo bytes counted
there against those the lattice calls for (lbm.engines.sharded.halo.halo_bytes).

The CUDA and TPU compilers live in a separate environment (an installed CUDA plugin prints an
initialisation error at every start on a machine without a GPU): ``bash scripts/accel_env.sh``,
then ``.venv-accel/bin/python -m lbm inspect target=h100``.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.bench.targets import (
    Target,
    chunk_for_target,
    compile_chunk,
    engine_for,
    load_target,
    prepare_environment,
    target_for_run,
    target_mesh,
    target_names,
    target_sharding,
)
from lbm.errors import LbmError

SCHEMA = "lbm-inspect/1"
HLO_FILE = "chunk.hlo.txt"
MIN_CHUNK_STEPS = 4
"""A chunk of fewer steps may be unrolled by XLA (no loop left to read); inspect compiles at least this many."""

def inspect_run(run: Any, target: Target, overrides: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """Compile the configured run's chunk for ``target`` and read its loop body; (inspect.json record, HLO text)."""
    import dataclasses

    import jax
    import jaxlib
    import numpy as np

    from lbm import parallel
    from lbm.hlo import loop_traffic
    from lbm.roofline import lbm_bytes_per_cell
    from lbm.simulation import chunk_size, prepare
    from lbm.stages import HALO, STAGES

    shape = None
    if target.devices > 1:
        run = dataclasses.replace(run, mesh_shape=None, parallel=dataclasses.replace(run.parallel, devices=1))
    case, setup = prepare(run)
    run = case.run
    if target.devices > 1:  # checked against the case's own grid (schafer_turek derives it from its diameter)
        wanted = run.parallel.mesh or (list(target.mesh) if len(target.mesh) <= len(setup.shape) else None)
        shape = parallel.mesh_shape(target.devices, wanted, setup.shape)
    n = max(MIN_CHUNK_STEPS, chunk_size(run, target.platform))
    mesh = target_mesh(target, shape) if shape is not None else None
    sharding = target_sharding(target) if mesh is None else jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    fn, args, engine, note, halo_plan_bytes = chunk_for_target(setup, engine_for(target, run.engine), n, target.platform, mesh)
    text, compile_s, planned = compile_chunk(fn, args, sharding, target)
    loop = loop_traffic(text, (*STAGES, HALO))
    steps = max(1, n // loop.trip_count) if loop.trip_count > 1 else n
    cells = int(np.prod(setup.shape))
    shard = [g // m for g, m in zip(setup.shape, shape or [1] * len(setup.shape), strict=True)]
    per = float(int(np.prod(shard)) * steps)  # the HLO of a sharded chunk is one device's: per cell of its shard
    populations = setup.lattice.q * int(np.prod(shard)) * np.dtype(setup.dtype).itemsize  # one device's
    bytes_per = loop.bytes / per
    minimum = lbm_bytes_per_cell(setup.lattice.q, np.dtype(setup.dtype).itemsize)
    target_part = _target_record(target, sharding)
    bandwidth = target_part["bandwidth_gbs"]
    record = {
        "schema": SCHEMA,
        "target": target_part,
        "engine": engine, "engine_note": note,
        "case": run.case, "lattice": setup.lattice.name, "collision": run.collision, "precision": run.precision,
        "grid": list(setup.shape), "cells": cells, "cells_per_device": int(np.prod(shard)), "chunk_steps": n,
        "stages": list(setup.stages),
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "compile_time_s": round(compile_s, 3),
        "hlo_file": HLO_FILE, "loop_body": loop.body, "trip_count": loop.trip_count,
        "kernels_per_step": len(loop.kernels) / steps,
        "steps_per_loop_body": steps,
        "bytes_per_cell_step": bytes_per,
        "bytes_per_cell_step_upper_bound": loop.upper_bound / per,
        "on_chip_bytes_per_cell_step": loop.on_chip_bytes / per,
        "min_bytes_per_cell_step": minimum,
        "traffic_ratio": bytes_per / minimum,
        # below the minimum the loop keeps its state on chip (TPU VMEM): memory bandwidth does not bound it
        "projected_mlups": bandwidth * 1e9 / bytes_per / 1e6 if bytes_per >= minimum else None,
        "projected_fraction_of_roofline": minimum / bytes_per if bytes_per >= minimum else None,
        "note": "" if bytes_per >= minimum else (
            f"the loop body keeps its state in on-chip memory ({loop.on_chip_bytes / per:.0f} B/cell/step there, "
            f"{bytes_per:.1f} B in memory): memory bandwidth does not bound it, no projection"),
        "planned_peak_bytes": planned, "population_bytes": populations,
        "planned_peak_over_population": planned / populations if planned is not None else None,
        "planned_source": "XLA memory_analysis of the compiled chunk, one device: arguments + outputs - aliased + "
                          "temporaries",
        "kernels": _kernel_rows(loop.kernels, per),
        "traffic_model": "per top-level instruction of the loop body: the part of each operand its outputs need, "
                         "read once, and its results written once; in-place dynamic-update-slice/scatter write the "
                         "update only; on-chip memory spaces (TPU VMEM) apart (lbm/hlo.py, loop_traffic)",
        "overrides": list(overrides or []),
    }
    if shape is not None:
        record["parallel"] = sharded_record(text, setup, shape, steps, n, target, engine, halo_plan_bytes)
        if record["projected_mlups"] is not None:  # every device at the spec bandwidth, the halo not counted
            record["projected_mlups"] *= target.devices
    return record, text


def _target_record(target: Target, sharding: Any) -> dict[str, Any]:
    """The record's ``target``: its name, platform, devices and bandwidth (measured here where it names none)."""
    bandwidth, source = target.bandwidth_gbs, target.bandwidth_source
    if bandwidth is None:
        from lbm.engines.native.stream import probe
        from lbm.roofline import measure_bandwidth

        bandwidth = round(measure_bandwidth(nbytes=128 * 2**20, repeats=3, host=probe())["bandwidth_gbs"], 1)
    devices = getattr(sharding, "device_set", set())
    return {"name": target.name, "platform": target.platform, "device": target.device,
            "device_kind": sorted({d.device_kind for d in devices})[0] if devices else target.device,
            "devices": target.devices, "topology": target.topology,
            "bandwidth_gbs": bandwidth, "bandwidth_source": source}


def _kernel_rows(kernels: Sequence[Any], per: float) -> list[dict[str, Any]]:
    """The record's ``kernels``: each loop-body kernel's bytes per cell and step (``per`` cell updates per loop)."""
    return [{"name": k.name, "kind": k.kind, "opcode": k.opcode, "stages": k.stages,
             "read_bytes_per_cell_step": k.bytes_read / per, "written_bytes_per_cell_step": k.bytes_written / per,
             "on_chip_bytes_per_cell_step": (k.on_chip_read + k.on_chip_written) / per,
             "upper_bound_bytes_per_cell_step": k.upper_bound / per}
            for k in kernels]


def sharded_record(text: str, setup: Any, shape: tuple[int, ...], steps: int, n: int, target: Target,
                   engine: str, halo_plan_bytes: int = 0) -> dict[str, Any]:
    """Devices, mesh, shards, and the collectives per step of a sharded chunk (``steps`` per loop iteration, ``n``
    per chunk), with the halo bytes counted in the HLO against those the lattice, the shards and the boundary
    plan (``halo_plan_bytes`` per shard) call for."""
    import numpy as np

    from lbm.engines.sharded import halo
    from lbm.hlo import collectives
    from lbm.stages import HALO, STAGES

    rows = [{"kind": r.kind, "stages": r.stages, "where": "loop body" if r.in_loop else "once per chunk",
             "count": r.count / (steps if r.in_loop else n),
             "bytes_per_device": r.bytes_per_device / (steps if r.in_loop else n)}
            for r in collectives(text, (*STAGES, HALO))]
    devices = math.prod(shape)
    itemsize = np.dtype(setup.dtype).itemsize
    return {
        "devices": devices, "topology": target.topology, "mesh": list(shape),
        "shard": [g // m for g, m in zip(setup.shape, shape, strict=True)], "partitioner": "shard_map",
        "collectives_per_step": rows,
        "collective_bytes_per_step": sum(r["bytes_per_device"] for r in rows),
        "halo_bytes_per_step": sum(r["bytes_per_device"] for r in rows if HALO in r["stages"]),
        # the xla step's halo extends the shard axis by axis (later faces include earlier ghost cells); the pallas
        # kernel's returns the wrapped populations on the shard's own faces, and with boundary conditions the
        # neighbours send the Q populations of the ghost cells its boundary plan reads (lbm.engines.sharded)
        "halo_bytes_per_step_expected": halo.halo_bytes(setup.lattice.c, setup.shape, shape, itemsize,
                                                            corners=engine != "pallas") / devices + halo_plan_bytes,
        "halo_plan_bytes_per_step": halo_plan_bytes,
        "halo_populations_per_face": int(halo.entering(setup.lattice.c, 0, 1).size),
        "collective_model": "per device and step: the logical bytes of each collective's operands in the compiled "
                            "chunk (what a device sends or contributes); those of the loop body per step, those XLA "
                            "moved out of the loop per chunk divided by its steps. Expected halo: the populations "
                            "entering through each shared shard face (3 of 9 for D2Q9, 5 of 19 for D3Q19) x face "
                            "cells x bytes (engine xla: the second axis' faces include the first's ghost cells; "
                            "engine pallas: the shard's own faces, plus, with boundary conditions, the Q populations of "
                            "the ghost cells its boundary plan reads, padded to one count per neighbour)",
    }


def format_report(record: dict[str, Any]) -> str:
    """The kernel table and the summary of an inspect record, as printed."""
    t = record["target"]
    lines = [f"inspect: target {t['name']} ({t['device']}, {t['platform']}), engine {record['engine']}, "
             f"{record['case']} {record['lattice']} {'x'.join(map(str, record['grid']))} {record['precision']}, "
             f"loop body {record['loop_body']} x {record['trip_count']} iterations",
             *([f"engine: {record['engine_note']}"] if record.get("engine_note") else []),
             ""]
    rows = [(k["name"], k["kind"], "+".join(k["stages"]) or "-", f"{k['read_bytes_per_cell_step']:.2f}",
             f"{k['written_bytes_per_cell_step']:.2f}") for k in record["kernels"]]
    head = ("kernel", "kind", "stages", "read B/cell/step", "written B/cell/step")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        lines.append("  ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths, strict=True))))

    def num(v: Any, fmt: str) -> str:
        return "n/a" if v is None else format(v, fmt)

    lines += ["",
              f"kernels_per_step                {record['kernels_per_step']:g}",
              f"steps_per_loop_body             {record['steps_per_loop_body']}",
              f"bytes_per_cell_step             {record['bytes_per_cell_step']:.1f} B "
              f"(every operand and result whole: {record['bytes_per_cell_step_upper_bound']:.1f} B"
              + (f"; on chip, not counted: {record['on_chip_bytes_per_cell_step']:.1f} B)"
                 if record["on_chip_bytes_per_cell_step"] else ")"),
              f"min_bytes_per_cell_step         {record['min_bytes_per_cell_step']} B (2 Q x bytes per population)",
              f"traffic_ratio                   {num(record['traffic_ratio'], '.2f')}",
              f"projected_mlups                 {num(record['projected_mlups'], '.0f')} MLUPS at "
              f"{t['bandwidth_gbs']:g} GB/s ({t['bandwidth_source']})",
              f"projected_fraction_of_roofline  {num(record['projected_fraction_of_roofline'], '.3f')}",
              f"planned_peak_over_population    {num(record['planned_peak_over_population'], '.3f')} (XLA memory_analysis "
              "of the compiled chunk: arguments + outputs - aliased + temporaries, over the populations)"]
    if record["note"]:
        lines.append(f"note: {record['note']}")
    if "parallel" in record:
        lines += ["", *format_parallel(record["parallel"])]
    if "gradient" in record:
        from lbm.bench.inspect_gradient import format_gradient

        lines += ["", *format_gradient(record["gradient"])]
    return "\n".join(lines) + "\n"


def format_parallel(p: dict[str, Any]) -> list[str]:
    """The collectives table and the halo bytes of a sharded inspect record."""
    lines = [f"{p['devices']} devices ({p['topology']}), mesh {'x'.join(map(str, p['mesh']))}, shards "
             f"{'x'.join(map(str, p['shard']))}, {p['partitioner']}; collectives per step (per device):"]
    rows = [(c["kind"], "+".join(c["stages"]) or "-", c["where"], f"{c['count']:g}", f"{c['bytes_per_device']:.1f}")
            for c in p["collectives_per_step"]] or [("none", "-", "-", "0", "0")]
    head = ("collective", "stages", "where", "count", "bytes sent")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        lines.append("  ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    lines.append(f"halo_bytes_per_step             {p['halo_bytes_per_step']:.0f} B per device (expected "
                 f"{p['halo_bytes_per_step_expected']:.0f} B: {p['halo_populations_per_face']} populations per face "
                 "x face cells x bytes" + (f", and {p['halo_plan_bytes_per_step']:.0f} B for the boundary plan's "
                                          "ghost cells" if p.get("halo_plan_bytes_per_step") else "") + ")")
    return lines


def parse_args(args: list[str]) -> tuple[str, Path | None, list[str]]:
    """(target name, output directory or None, run overrides) from the command line."""
    from lbm.config.command_line import split_hydra_args

    target, out, rest = "cpu", None, []
    it = iter(args)
    for a in it:
        if a == "--out":
            value = next(it, None)
            if value is None:
                raise LbmError("--out needs a directory")
            out = Path(value)
        elif a.startswith("--out="):
            out = Path(a.split("=", 1)[1])
        elif a.startswith("target="):
            target = a.split("=", 1)[1]
        elif a.startswith("hydra.run.dir="):
            out = Path(a.split("=", 1)[1]).expanduser()
        else:
            rest.append(a)
    overrides, multirun, _ = split_hydra_args(rest, "inspect", ("--out",))
    if multirun:
        raise LbmError("inspect compiles one configuration, not a sweep")
    return target, out, overrides


def main(args: list[str]) -> int:
    """``python -m lbm inspect [target=NAME] [--out DIR | hydra.run.dir=DIR] [run overrides]``; exit 0, 2 on bad input."""
    from lbm.config import load
    from lbm.config.command_line import check_writable

    if any(a in ("-h", "--help") for a in args):
        print("usage: python -m lbm inspect target=NAME [--out DIR] [run overrides, e.g. case=taylor_green grid.nx=1024]\n"
              "compile the fused chunk that engine=auto runs on a target, without the device; print the kernels of its\n"
              "loop body with their bytes per cell and step; write inspect.json and the optimised HLO (chunk.hlo.txt)\n"
              f"targets: {', '.join(target_names())} (lbm/targets/*.yaml); GPU and TPU targets need the compilers:\n"
              "bash scripts/accel_env.sh, then .venv-accel/bin/python -m lbm inspect target=h100 ...\n"
              "several devices: target=v5e:2x2 (TPU chips), target=h100:1x1x4 (partitions x hosts x GPUs per host),\n"
              "or target=NAME parallel.devices=N [parallel.mesh=[a,b]]: the sharded chunk, its collectives and halo bytes\n"
              "gradient=true [gradient.wrt=KEY,KEY gradient.objective=NAME gradient.checkpoint=POLICY]: also the program\n"
              "of lbm.value_and_grad over the run's steps, its kernels and bytes per cell and step by stage and pass")
        return 0
    from lbm.bench.inspect_gradient import gradient_options

    gradient, args = gradient_options(args)
    name, out, overrides = parse_args(args)
    target = load_target(name)
    prepare_environment(target)
    if target.devices > 1 and not any(o.lstrip("+~").startswith("parallel.devices=") for o in overrides):
        overrides = [*overrides, f"parallel.devices={target.devices}"]  # the target's chips (parallel.mesh checks)
    run = load(overrides)
    target = target_for_run(target, run.devices)
    out = out or Path("outputs/inspect") / datetime.datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    if (out / "inspect.json").exists():
        raise LbmError(f"{out} already holds an inspect.json; choose another --out")
    check_writable(out)
    record, text = inspect_run(run, target, overrides)
    out.mkdir(parents=True, exist_ok=True)
    if gradient is not None:
        from lbm.bench.inspect_gradient import GRADIENT_HLO_FILE, inspect_gradient

        record["gradient"], gradient_text = inspect_gradient(overrides, gradient, target, record)
        (out / GRADIENT_HLO_FILE).write_text(gradient_text)
    (out / HLO_FILE).write_text(text)
    (out / "inspect.json").write_text(json.dumps(record, indent=2) + "\n")
    print(format_report(record), end="")
    print(f"wrote {out / 'inspect.json'} and {out / HLO_FILE}")
    return 0
