"""``python -m lbm bench [hydra overrides]``: bandwidth, then throughput of each configuration; writes bench.json.

Every job's configuration is composed and validated before Hydra starts, so bad input
gives one line and exit code 2 and writes nothing (the same contract as ``run``).
"""

from __future__ import annotations

import datetime
import itertools
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lbm.bench import DEFAULT_COLLISION
from lbm.errors import ConfigError, LbmError

if TYPE_CHECKING:
    from lbm.config.schema import BenchSchema

SCHEMA = "lbm-bench/1"


# --- configuration -------------------------------------------------------------------------

def compose_bench(overrides: list[str]) -> dict[str, Any]:
    """The resolved, key-checked bench config (without Hydra's own node) for a list of overrides."""
    from lbm.config import compose

    return compose(overrides, config_name="bench", command="bench")


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _grid(key: str, value: Any, dims: int) -> tuple[int, ...]:
    from lbm.config import check_int

    if isinstance(value, (list, tuple)):
        if len(value) != dims:
            raise ConfigError(key, value, f"{dims} sizes for a {dims}D lattice, or one size n for n^{dims}")
        return tuple(check_int(key, v, 4) for v in value)
    n = check_int(key, value, 4)
    return (n,) * dims


def read_bench(cfg: dict[str, Any]) -> BenchSchema:
    """The typed tree of a composed bench config (the sections run's config has too: lattice, grid, collision)."""
    from lbm.config.run import read_tree
    from lbm.config.schema import BenchSchema

    return read_tree(cfg, BenchSchema)


def plan(cfg: dict[str, Any]) -> dict[str, Any]:
    """Validate a composed bench config; returns the configurations to measure and the timing (raises ConfigError)."""
    from lbm.bench.peers import PEERS, check_peers, refusal
    from lbm.bench.throughput import CASES, PRECISIONS, VARIANTS, BenchConfig, Timing
    from lbm.config import check_bool, check_choice, check_float, check_int
    from lbm.config.run import validate_collision, validate_grid
    from lbm.config.sections import Bandwidth
    from lbm.engines import REFUSED_STORAGES
    from lbm.lattice import LATTICES

    tree = read_bench(cfg)
    lattice = check_choice("lattice", tree.lattice.name, tuple(LATTICES))
    dims = LATTICES[lattice].d
    collisions = _collisions(tree.collisions, validate_collision(tree.collision).name, lattice)
    cases = [check_choice("cases", c, tuple(CASES)) for c in _as_list(tree.cases)]
    variants = [check_choice("variants", v, VARIANTS) for v in _as_list(tree.variants)]
    precisions = [check_choice("precision", p, tuple(PRECISIONS)) for p in _as_list(tree.precision)]
    for p in precisions:
        if PRECISIONS[p][1] in REFUSED_STORAGES:
            usable = ", ".join(q for q, (_, st) in PRECISIONS.items() if st not in REFUSED_STORAGES)
            raise ConfigError("precision", p, f"one of {usable}", REFUSED_STORAGES[PRECISIONS[p][1]])
    if not cases or not variants or not precisions:
        raise ConfigError("cases/variants/precision", "[]", "at least one value each")

    # Only what will run is validated: the box sizes for the periodic case and the cavity (the same grids: what the
    # walls cost per cell), the cylinder's grid for the cylinder.
    grids: dict[str, list[tuple[int, ...]]] = {}
    for boxed in {"periodic", "cavity"} & set(cases):
        grids[boxed] = ([_grid("sizes", s, dims) for s in _as_list(tree.sizes)] if tree.sizes is not None
                        else [validate_grid(tree.grid, lattice)])
    if "cylinder" in cases:
        from lbm.config import load
        from lbm.simulation import make_case

        cylinder = validate_grid(tree.cylinder_grid, lattice, "cylinder_grid")
        grids["cylinder"] = [cylinder]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ov = ["case=cylinder", f"lattice={lattice}", "steps=1",
                  *(f"grid.{a}={n}" for a, n in zip(("nx", "ny", "nz"), cylinder, strict=False))]
            make_case(load(ov))

    timing = Timing(
        repeats=check_int("repeats", tree.repeats, 1),
        warmup=check_int("warmup", tree.warmup, 0),
        min_time_s=check_float("min_time_s", tree.min_time_s, 0.0),
        steps=None if tree.steps == "auto" else check_int("steps", tree.steps, 1),
        max_steps=check_int("max_steps", tree.max_steps, 1),
        steps_per_dispatch=check_int("steps_per_dispatch", tree.steps_per_dispatch, 0),
        stage_steps=check_int("stage_steps", tree.stage_steps, 1),
        kernel_profile=check_int("kernel_profile", tree.kernel_profile, 0),
    )
    bw = tree.bandwidth
    bandwidth = Bandwidth(enabled=check_bool("bandwidth.enabled", bw.enabled),
                          bytes=check_int("bandwidth.bytes", bw.bytes, 2**20),
                          repeats=check_int("bandwidth.repeats", bw.repeats, 1))
    output = tree.output
    if not isinstance(output, str) or not output.endswith(".json") or os.sep in output:
        raise ConfigError("output", output, "a file name ending in .json (written into the run directory)")

    configs: list[tuple[BenchConfig, str | None]] = []  # (config, reason it is skipped)
    for case in cases:
        for grid in grids[case]:
            for precision, variant, collision in itertools.product(precisions, variants, collisions):
                c = BenchConfig(case=case, lattice=lattice, grid=grid, variant=variant, precision=precision,
                                collision=collision)
                storage = PRECISIONS[precision][1]
                skip = None
                naive_one = case == "periodic" and storage == "compute" and collision == DEFAULT_COLLISION
                if variant == "naive" and not naive_one:
                    skip = "the naive step is a BGK periodic box stored in the compute dtype"
                elif variant == "instrumented" and storage != "compute":
                    skip = "instrumented mode stores populations in the compute dtype"
                elif variant in PEERS:
                    skip = refusal(case, collision, storage)
                configs.append((c, skip))
    check_peers(configs)
    return {"configs": configs, "timing": timing, "bandwidth": bandwidth, "output": output,
            "collisions": collisions if tree.collisions is not None else None}


def _collisions(listed: Any, collision: str, lattice: str) -> list[str]:
    """The collisions to measure: ``collisions`` (each with its group's defaults; the first is the baseline of the
    ratios) or else the ``collision`` group's one; each checked to run on ``lattice`` (raises ConfigError)."""
    from lbm.config import check_choice
    from lbm.kernels.collisions import COLLISION_KINDS

    if listed is None:
        names, key = [collision], "collision"
    else:
        key = "collisions"
        names = [check_choice(key, c, tuple(sorted(COLLISION_KINDS))) for c in _as_list(listed)]  # kinds, not auto
        if not names:
            raise ConfigError(key, "[]", "a list of collision names, the baseline first, e.g. collisions=[bgk,kbc,"
                              "cumulant] (or null: the collision group's one alone)")
        if len(set(names)) < len(names):
            raise ConfigError(key, f"[{','.join(names)}]", "each collision once")
        if collision != DEFAULT_COLLISION:
            raise ConfigError("collision", collision, f"{DEFAULT_COLLISION} (the default) beside collisions=[...]",
                              "collisions= takes each collision with its group's defaults: drop collision= or list it "
                              "in collisions=")
    for name in names:
        op = COLLISION_KINDS.get(name)
        if op is not None and op.lattices is not None and lattice not in op.lattices:
            raise ConfigError(key, name, f"a collision that runs on lattice={lattice}", f"{name} runs on "
                              f"{', '.join(op.lattices)} only: {op.lattice_reason}")
    return names


# --- environment ---------------------------------------------------------------------------

def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def environment() -> dict[str, Any]:
    """Software and hardware this bench ran on (lbm.environment) and the native kernels' compiler."""
    from lbm.engines.native import build as native
    from lbm.environment import environment as probe

    return {**probe(), "native_compiler": native.compiler(), "native_cxxflags": native.cxxflags()}


# --- running -------------------------------------------------------------------------------

def run_bench(cfg: dict[str, Any], run_dir: Path, console: Any = None) -> dict[str, Any]:
    """Measure everything the config asks for and write bench.json into ``run_dir``; returns the document."""
    from lbm.environment import precision_scope

    if read_bench(cfg).parallel.devices is not None:
        return run_scaling(cfg, run_dir)
    p = plan(cfg)
    with precision_scope("float64" if any(c.precision == "float64" for c, _ in p["configs"]) else None):
        return _bench(cfg, p, run_dir, console)


def _bench(cfg: dict[str, Any], p: dict[str, Any], run_dir: Path, console: Any) -> dict[str, Any]:
    """:func:`run_bench` once the plan ``p`` is made and the precision set."""
    from lbm.bench.report import print_table, summary, write_json
    from lbm.bench.throughput import apply_roofline, roofline_warnings
    from lbm.engines.native.stream import probe
    from lbm.roofline import measure_bandwidth

    log = logging.getLogger("lbm.bench")
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m lbm bench " + " ".join(cfg.get("_overrides", [])),
        "config": {k: v for k, v in cfg.items() if not k.startswith("_")},
        "environment": environment(),
        "load_average_start": load_average(),
    }
    progress = _Progress(console)
    host = probe() if p["bandwidth"]["enabled"] else None  # the host's threads (a CPU): lbm.engines.native.stream
    measure_bw = lambda when: measure_bandwidth(  # noqa: E731
        nbytes=p["bandwidth"]["bytes"], repeats=p["bandwidth"]["repeats"], host=host) | {"when": when}
    try:
        first = None
        if p["bandwidth"]["enabled"]:
            progress("memory bandwidth: copy and triad, in place and into another array (lbm.roofline)")
            first = measure_bw("before the configurations")
            log.info("bandwidth %.1f GB/s (%s)", first["bandwidth_gbs"], first["roofline_kernel"])
        records, skipped = _measure_configurations(p, progress, log)
        bandwidth = None
        if first is not None:
            # Measured again after the configurations: on a shared machine the load changes during a
            # run, and the roofline is the larger of the two (the fractions can only come out lower).
            progress("memory bandwidth again, after the configurations")
            bandwidth = _roofline_bandwidth(first, measure_bw("after the configurations"), log)
        doc["bandwidth"] = bandwidth
        bw = bandwidth["bandwidth_gbs"] if bandwidth else None
        for rec in records:
            apply_roofline(rec, bw, bandwidth["cache_bytes"] if bandwidth else None,
                           bandwidth.get("on_chip_bytes") if bandwidth else None)
        doc["records"] = records
        doc["roofline_warnings"] = roofline_warnings(records)
        for line in doc["roofline_warnings"]:
            log.warning("%s", line)
        doc["skipped"] = skipped
        doc["summary"] = summary(records, bw, (p["collisions"] or [None])[0])
        doc["load_average_end"] = load_average()
    finally:
        progress.close()
    path = run_dir / p["output"]
    write_json(path, doc)
    print_table(doc, console)
    print(f"wrote {path}", file=sys.stderr)
    return doc


def _measure_configurations(p: dict[str, Any], progress: _Progress,
                            log: logging.Logger) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Time the plan's configurations, group by group: (their records, the skipped ones with their reasons)."""
    from lbm.bench.throughput import MeasureError, measure, measure_interleaved

    records: list[dict[str, Any]] = []
    skipped = [{"label": c.label, "reason": skip} for c, skip in p["configs"] if skip is not None]
    todo = [c for c, skip in p["configs"] if skip is None]
    groups = measured_groups(todo, p["collisions"] is not None)
    for k, group in enumerate(groups, 1):
        say = lambda text, k=k: progress(f"[{k}/{len(groups)}] {text}")  # noqa: E731
        if len(group) > 1:  # collisions, or a peer and lbm's variants, of one configuration: repeats in turn
            results = measure_interleaved(group, p["timing"], say)
        else:
            try:
                results = [measure(group[0], p["timing"], None, say)]
            except MeasureError as exc:
                results = [exc]
        for c, rec in zip(group, results, strict=True):
            if isinstance(rec, Exception):
                skipped.append({"label": c.label, "reason": str(rec).splitlines()[0]})
                log.warning("skipped %s: %s", c.label, rec)
                continue
            records.append(rec)
            log.info("%s: %.1f MLUPS (spread %.1f%%)", c.label, rec["mlups"]["median"],
                     rec["mlups"]["spread_pct"])
    return records, skipped


def _roofline_bandwidth(first: dict[str, Any], second: dict[str, Any], log: logging.Logger) -> dict[str, Any]:
    """The larger of the bandwidths measured before and after the configurations, with both as its ``runs``."""
    bandwidth = dict(max(first, second, key=lambda b: b["bandwidth_gbs"]))
    bandwidth["runs"] = [first, second]
    log.info("bandwidth %.1f GB/s (%s) after; roofline %.1f GB/s", second["bandwidth_gbs"],
             second["roofline_kernel"], bandwidth["bandwidth_gbs"])
    return bandwidth


def measured_groups(configs: list[Any], by_collision: bool = False) -> list[list[Any]]:
    """The configurations in the order given, in groups whose repeats are timed in turn: with ``by_collision``
    (``collisions=[...]``) the collisions of one case, grid, precision and variant; where a same-run peer is among
    them, every variant of that case, grid, precision (and collision, without ``by_collision``); else one alone."""
    from lbm.bench.peers import PEERS

    base = lambda c: (c.case, c.lattice, c.grid, c.precision) + (() if by_collision else (c.collision,))  # noqa: E731
    peered = {base(c) for c in configs if c.variant in PEERS}
    groups: dict[Any, list[Any]] = {}
    for c in configs:
        groups.setdefault(base(c) + (() if base(c) in peered else (c.variant,)), []).append(c)
    return list(groups.values())


def scaling_plan(cfg: dict[str, Any]) -> tuple[list[int], tuple[int, ...], str, int]:
    """Device counts, base grid, lattice and repeats of a ``parallel.devices=[...]`` bench (raises ConfigError)."""
    from lbm.config import check_choice, check_int
    from lbm.lattice import LATTICES

    tree = read_bench(cfg)
    counts = [check_int("parallel.devices", n, 1) for n in _as_list(tree.parallel.devices)]
    lattice = check_choice("lattice", tree.lattice.name, tuple(LATTICES))
    dims = LATTICES[lattice].d
    grid = tuple(check_int(f"grid.{a}", tree.grid[a], 4) for a in ("nx", "ny", "nz")[:dims])
    return counts, grid, lattice, check_int("repeats", tree.repeats, 1)


def run_scaling(cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Strong and weak scaling of the sharded engine over ``parallel.devices`` on the periodic box; writes bench.json.

    Per device count: MLUPS of the fused chunk (shard_map and GSPMD partitioning), and the halo's share of
    a step from the instrumented sharded engine with a sync after every piece (device execution per piece).
    """
    import statistics

    import jax

    from lbm import parallel
    from lbm.bench.report import write_json
    from lbm.engines import make_engine
    from lbm.simulation import prepare

    counts, grid, lattice, repeats = scaling_plan(cfg)
    for n in counts:
        parallel.resolve_devices(n)
    steps = 20 if cfg["steps"] == "auto" else int(cfg["steps"])
    log = logging.getLogger("lbm.bench")
    rows = []
    for kind in ("strong", "weak"):
        for n in counts:
            g = (grid[0] * (n if kind == "weak" else 1),) + grid[1:]
            ov = ["case=taylor_green", f"lattice={lattice}", "steps=1", "precision=float32",
                  *(f"grid.{a}={v}" for a, v in zip(("nx", "ny", "nz"), g, strict=False))]
            _, setup = prepare(ov)
            mesh = (n,) + (1,) * (len(g) - 1)
            row: dict[str, Any] = {"scaling": kind, "devices": n, "grid": list(g), "mesh": list(mesh)}
            for part in ("shard_map", "gspmd") if n > 1 else ("single",):
                engine = make_engine(setup, "fused", "xla", mesh=mesh if n > 1 else None, partitioner=part)
                f = setup.initial_populations()
                if n > 1:
                    f = engine.place(f)
                engine.compile(f, steps)
                f = jax.block_until_ready(engine.advance(f, steps)[0])
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    f = jax.block_until_ready(engine.advance(f, steps)[0])
                    times.append(time.perf_counter() - t0)
                t = statistics.median(times)
                row[f"mlups_{part}"] = math.prod(g) * steps / t / 1e6
            if n > 1:
                row["mlups"] = max(row["mlups_shard_map"], row["mlups_gspmd"])
                inst = make_engine(setup, "instrumented", mesh=mesh, sync=True)
                row["halo_share"] = halo_share(inst, setup, repeats)
            else:
                row["mlups"] = row["mlups_single"]
                row["halo_share"] = 0.0
            rows.append(row)
            log.info("%s n=%d grid=%s: %.2f MLUPS, halo %.1f%% of the step", kind, n, g, row["mlups"],
                     100 * row["halo_share"])
    for kind in ("strong", "weak"):
        mine = [r for r in rows if r["scaling"] == kind]
        base = next((r for r in mine if r["devices"] == 1), mine[0])
        for r in mine:
            per_device = r["mlups"] / r["devices"] / (base["mlups"] / base["devices"])
            r["efficiency"] = per_device if kind == "weak" else r["mlups"] / (base["mlups"] * r["devices"] / base["devices"])
    doc = {"schema": SCHEMA, "command": "python -m lbm bench " + " ".join(cfg.get("_overrides", [])),
           "environment": environment(), "scaling": rows,
           "clock": "host wall clock per chunk of steps (MLUPS); halo share: synchronised instrumented pieces",
           "note": "forced host devices share the machine's cores: read the halo share, not the absolute speed"}
    write_json(run_dir / cfg["output"], doc)
    print(scaling_table(rows))
    return doc


def halo_share(engine: Any, setup: Any, repeats: int) -> float:
    """Median share of one step spent in the ``halo`` piece (instrumented engine, synchronised after each piece)."""
    import statistics

    import jax

    from lbm.boundaries.base import StepState
    from lbm.engines.timestep import outputs, step_index
    from lbm.stages import HALO

    f = engine.place(setup.initial_populations())
    engine.compile(f, 1)
    shares = []
    for k in range(max(3, repeats)):
        s = StepState(f=f, t=step_index(k))
        spent: dict[str, float] = {}
        for (name, _), run in zip(engine.pieces, engine.piece_runs, strict=True):
            t0 = time.perf_counter()
            s = jax.block_until_ready(run(s, engine.params))
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
        outputs(s)
        f = s.f
        shares.append(spent[HALO] / sum(spent.values()))
    return statistics.median(shares)


def scaling_table(rows: list[dict[str, Any]]) -> str:
    """The scaling rows as a text table (MLUPS, parallel efficiency, halo share)."""
    lines = [f"{'scaling':8} {'devices':>7} {'grid':>14} {'MLUPS':>8} {'shard_map':>10} {'gspmd':>8} "
             f"{'efficiency':>10} {'halo share':>10}"]
    for r in rows:
        lines.append(f"{r['scaling']:8} {r['devices']:>7} {'x'.join(map(str, r['grid'])):>14} {r['mlups']:>8.2f} "
                     f"{r.get('mlups_shard_map', float('nan')):>10.2f} {r.get('mlups_gspmd', float('nan')):>8.2f} "
                     f"{r['efficiency']:>10.2f} {100 * r['halo_share']:>9.1f}%")
    return "\n".join(lines)


class _Progress:
    """A single transient status line on stderr while the bench runs."""

    def __init__(self, console: Any = None) -> None:
        self.status = None
        self.console = console
        self.t0 = time.perf_counter()

    def __call__(self, text: str) -> None:
        line = f"bench {time.perf_counter() - self.t0:6.1f} s  {text}"
        if self.console is not None and self.console.is_terminal:
            if self.status is None:
                self.status = self.console.status(line)
                self.status.start()
            else:
                self.status.update(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()


# --- command line --------------------------------------------------------------------------

def _task(cfg: Any) -> None:
    """Hydra task: run the bench into Hydra's run directory."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf
    from rich.console import Console

    for noisy in ("jax", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["_overrides"] = list(hc.overrides.task)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_bench(resolved, run_dir, Console(stderr=True))
    except LbmError as exc:
        logging.getLogger("lbm").error("%s", exc)
        print(f"lbm: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def usage() -> str:
    """The help of ``bench``: the usage line and every option with its default (lbm/configs/bench.yaml)."""
    config = Path(__file__).resolve().parents[1] / "configs" / "bench.yaml"
    options = "\n".join(line for line in config.read_text().splitlines() if not line.startswith("#"))
    return ("usage: python -m lbm bench [key=value ...] [-m key=a,b (a sweep)]\n\n"
            "Measures the memory bandwidth, then the throughput of each configuration (MLUPS, GB/s, fraction of the "
            "roofline,\ncompile seconds, the compiled program's evidence per cell and step); writes bench.json into "
            "the run directory.\nCompare two with python -m lbm compare BASE.json NEW.json.\n\n"
            "options (key: default  # meaning), lattice and collision as in python -m lbm run:\n\n" + options + "\n")


def main(args: Sequence[str]) -> int:
    """Entry point of ``python -m lbm bench``; returns the exit code."""
    if any(a in ("-h", "--help") for a in args):
        print(usage(), end="")
        return 0

    from lbm.config.command_line import expand_jobs, run_hydra, split_hydra_args

    overrides, multirun, _ = split_hydra_args(args, "bench")
    for job in expand_jobs(overrides, multirun):
        cfg = compose_bench(job)
        if read_bench(cfg).parallel.devices is not None:
            scaling_plan(cfg)
        else:
            plan(cfg)
    return run_hydra(_task, "bench", "bench", args)



__all__ = ["main", "plan", "run_bench", "compose_bench", "environment"]
