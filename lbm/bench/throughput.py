"""Throughput of one configuration: warm-up, timed repeats, MLUPS, roofline fraction, compile time, memory, HLO.

A configuration is a case (``periodic``: the Taylor-Green box, the bare kernel; ``cavity``: the lid-driven cavity
on the box's grid, half-way walls resting and moving, so its time per cell against the box's is what the walls cost;
``cylinder``: a step with inlet, outflow, bounce-back and forces), a lattice, a grid, a
precision, a collision and a variant:

``auto``          fused mode, the engine ``auto`` picks (native where available)
``native``        fused mode, the generated C++ kernel (lbm.engines.native)
``xla``           fused mode, the stage functions composed in one jit (the reference)
``naive``         the naive fused JAX step of lbm.bench.naive (periodic box only)
``instrumented``  instrumented mode: one jit per stage, a Python loop over steps
``lbmpy``         a same-run peer: lbmpy's generated C kernel (lbm.bench.peers; periodic box only)

Clock: host wall clock around each dispatch, synchronised with block_until_ready, so a
repeat's time is device execution plus dispatch; compilation is never inside it. Where the work runs on the host's
CPU, each repeat's process CPU time is recorded beside it (``mlups.cpu_values``); where it runs on an accelerator
the process's CPU time measures the host's dispatch and waiting, not the work, so ``cpu_values`` is None and
``cpu_clock`` says why (``work_platform`` names where the work ran). Where a group of configurations (one case,
grid, precision and collision) holds a peer, or ``collisions=[...]`` lists several collisions (one case, grid,
precision and variant), :func:`measure_interleaved` times their repeats in turn (each one's repeat r, the order
rotated every round), so that a change of the machine's load during the run reaches both sides of their ratio alike.

Steps per repeat (``steps=auto``): enough for ``min_time_s`` at the fastest of three 2-step probe calls, rounded
up to a power of two. The
compiled-program facts of a fused record (fusions, memory, and the per-cell-and-step ``evidence``
of lbm.bench.evidence) come from a chunk of a fixed EVIDENCE_STEPS steps, never from the timed
chunk, so two runs of the same code record the same facts whatever the machine's speed. An instrumented
record's evidence comes from each stage's own executable (lbm.bench.evidence.stages_evidence).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from lbm.bench import DEFAULT_COLLISION
from lbm.bench.evidence import EVIDENCE_STEPS, program_evidence, stages_evidence
from lbm.bench.peers import PEERS
from lbm.roofline import lbm_bytes_per_cell

CASES = {"periodic": "taylor_green", "cavity": "cavity", "cylinder": "cylinder"}
VARIANTS = ("auto", "native", "pallas", "xla", "naive", "instrumented", *PEERS)
PRECISIONS = {"float32": ("float32", "compute"), "float64": ("float64", "compute"),
              "f16-storage": ("float32", "float16"), "bf16-storage": ("float32", "bfloat16")}
"""bench precision -> (compute dtype, fused-mode storage)."""
STORAGE_ITEMSIZE = {"float16": 2, "bfloat16": 2}
CLOCK = "host wall clock around each dispatch, synchronised with block_until_ready; compilation excluded"
CPU_CLOCK = "process CPU time of each repeat (all this process's threads; other processes' time not counted)"

ProgressCallback = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    """One measured configuration."""

    case: str
    lattice: str
    grid: tuple[int, ...]
    variant: str
    precision: str = "float32"
    collision: str = DEFAULT_COLLISION

    @property
    def label(self) -> str:
        """Short human-readable name."""
        return f"{self.case} {'x'.join(map(str, self.grid))} {self.lattice} {self.collision} {self.variant} {self.precision}"


@dataclasses.dataclass(frozen=True)
class Timing:
    """How long and how often to measure."""

    repeats: int = 5
    warmup: int = 1
    min_time_s: float = 0.5
    steps: int | None = None  # None: chosen so that one repeat lasts about min_time_s
    max_steps: int = 100_000
    steps_per_dispatch: int = 0  # 0: all the steps of a repeat in one dispatch (fused variants)
    stage_steps: int = 3  # instrumented: synchronised steps timed per stage
    kernel_profile: int = 20  # fused: steps of one profiled call for per-kernel times (0 = off)


def make_setup(cfg: BenchConfig) -> Any:
    """The case Setup of a configuration (composed and validated like ``python -m lbm run``)."""
    from lbm.simulation import prepare

    compute, _ = PRECISIONS[cfg.precision]
    overrides = [f"case={CASES[cfg.case]}", f"lattice={cfg.lattice}", f"collision={cfg.collision}",
                 f"precision={compute}", "steps=1", f"grid.nx={cfg.grid[0]}", f"grid.ny={cfg.grid[1]}"]
    if len(cfg.grid) == 3:
        overrides.append(f"grid.nz={cfg.grid[2]}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prepare(overrides)[1]


# --- runners: each returns (advance(f, n) -> f, compile(f, n) -> seconds, info dict) ------------

class _Runner:
    """Uniform interface over the variants: compile a chunk, run it, describe it."""

    mode = "fused"
    engine = ""

    def compile(self, f: jnp.ndarray, n: int) -> float:
        """Compile the n-step chunk for ``f`` (once); returns the seconds its compilation took."""
        raise NotImplementedError

    def run(self, f: jnp.ndarray, n: int) -> jnp.ndarray:
        """Advance ``f`` by ``n`` steps (compiled already) and return the new populations."""
        raise NotImplementedError

    def describe(self, f: jnp.ndarray, n: int) -> dict[str, Any]:
        """HLO and memory facts about the compiled n-step chunk."""
        return {}

    def start(self, f: jnp.ndarray) -> Any:
        """The state a timed run starts from, for populations ``f`` handed over (fused runs donate them: no copy, so
        that the device holds the populations once, D3Q19 512^3 on a 16 GiB TPU)."""
        return f

    def populations(self, state: Any) -> Any:
        """The populations ``(Q, *grid)`` of a state that :meth:`run` returned."""
        return state

    def platform(self, state: Any) -> str:
        """The platform the work runs on (cpu, gpu, tpu): that of the state's arrays."""
        return next(iter(self.populations(state).devices())).platform


class _FusedRunner(_Runner):
    def __init__(self, setup: Any, engine: str, storage: str, steps_per_dispatch: int) -> None:
        from lbm.engines import make_engine

        t0 = time.perf_counter()
        self.stepper = make_engine(setup, "fused", engine=engine, storage=storage)
        self.setup_s = time.perf_counter() - t0
        self.engine = self.stepper.name
        self.k = steps_per_dispatch

    def _chunk(self, n: int) -> int:
        return n if not self.k else min(self.k, n)

    def compile(self, f: jnp.ndarray, n: int) -> float:
        k = self._chunk(n)
        self.stepper.compile(f, k)
        if n % k:
            self.stepper.compile(f, n % k)
        times = self.stepper.compile_times
        return times[f"fused[{k}]"] + (times[f"fused[{n % k}]"] if n % k else 0.0)

    def run(self, f: jnp.ndarray, n: int) -> jnp.ndarray:
        k = self._chunk(n)
        done = 0
        while done < n:
            m = min(k, n - done)
            f, _ = self.stepper.advance(f, m)
            done += m
        return f

    def start(self, f: jnp.ndarray) -> Any:
        return self.stepper.place(f)  # as the run loop holds them between chunks (the pallas 2D pair: its view)

    def populations(self, state: Any) -> Any:
        return self.stepper.canonical(state)

    def describe(self, f: jnp.ndarray, n: int) -> dict[str, Any]:
        compiled = self.stepper.compile(f, EVIDENCE_STEPS)
        info = hlo_facts(compiled, EVIDENCE_STEPS, nbytes(f), math.prod(f.shape[1:]))
        if self.stepper.name == "native":
            info["kernel_build_or_load_s"] = self.stepper.build_time_s
            info["boundary_cells"] = 0 if self.stepper.block is None else self.stepper.block.size
        elif self.stepper.note:
            info["native_unavailable"] = self.stepper.note
        return info


class _NaiveRunner(_Runner):
    mode = "naive"
    engine = "naive"

    def __init__(self, setup: Any) -> None:
        self.setup = setup
        self._compiled: dict[int, Any] = {}
        self._seconds: dict[int, float] = {}

    def compile(self, f: jnp.ndarray, n: int) -> float:
        from lbm.bench.naive import naive_runner

        if n not in self._compiled:
            t0 = time.perf_counter()
            self._compiled[n] = naive_runner(self.setup.lattice, self.setup.omega_plus, n).lower(f).compile()
            self._seconds[n] = time.perf_counter() - t0
        return self._seconds[n]

    def run(self, f: jnp.ndarray, n: int) -> jnp.ndarray:
        return self._compiled[n](f)

    def describe(self, f: jnp.ndarray, n: int) -> dict[str, Any]:
        self.compile(f, EVIDENCE_STEPS)
        return hlo_facts(self._compiled[EVIDENCE_STEPS], EVIDENCE_STEPS, nbytes(f), math.prod(f.shape[1:]))


class _InstrumentedRunner(_Runner):
    mode = "instrumented"
    engine = "per-stage jit"

    def __init__(self, setup: Any, stage_steps: int) -> None:
        from lbm.engines.instrumented import InstrumentedEngine

        self.setup = setup
        self.stepper = InstrumentedEngine(setup)
        self.stage_steps = stage_steps

    def compile(self, f: jnp.ndarray, n: int) -> float:
        if not self.stepper.compile_times:
            self.stepper.compile(f, 1)  # compiles every stage once
        return self.stepper.compile_time_s

    def run(self, f: jnp.ndarray, n: int) -> jnp.ndarray:
        return self.stepper.advance(f, n)[0]

    def describe(self, f: jnp.ndarray, n: int) -> dict[str, Any]:
        return {"stages": stage_times(self.setup, self.setup.initial_populations(), self.stage_steps),
                "compile_s_per_stage": dict(self.stepper.compile_times),
                "evidence": stages_evidence(self.stepper.describe(), math.prod(f.shape[1:]))}


class _PeerRunner(_Runner):
    """lbmpy's kernel (lbm.bench.peers); its state is the peer itself, which holds the populations."""

    mode = "peer"

    def __init__(self, setup: Any, collision: str) -> None:
        from lbm.bench.peers import LbmpyPeer

        self.peer = LbmpyPeer(setup, collision)
        self.seconds: float | None = None
        self.engine = "lbmpy"

    def compile(self, f: jnp.ndarray, n: int) -> float:
        if self.seconds is None:
            self.seconds = self.peer.build()
            info = self.peer.info
            self.engine = f"lbmpy {info['lbmpy']} ({info['vector_isa']}, OpenMP {info['openmp_threads'] or '?'} threads)"
        return self.seconds

    def start(self, f: jnp.ndarray) -> Any:
        return self.peer.start(f)

    def run(self, f: Any, n: int) -> Any:
        return (f if f is self.peer else self.peer.start(f)).run(n)

    def populations(self, state: Any) -> Any:
        return state.populations()

    def platform(self, state: Any) -> str:
        return "cpu"  # lbmpy's C kernel runs on the host's cores whatever device JAX has

    def describe(self, f: jnp.ndarray, n: int) -> dict[str, Any]:
        return {"peer": dict(self.peer.info)}


def nbytes(f: Any) -> int:
    """Bytes of populations ``f`` (an array or a ShapeDtypeStruct)."""
    return math.prod(f.shape) * jnp.dtype(f.dtype).itemsize


def stage_times(setup: Any, f: jnp.ndarray, steps: int) -> dict[str, dict[str, float]]:
    """Per-stage execution time of instrumented mode: each stage synchronised, median over ``steps`` steps (ms)."""
    from lbm.engines.instrumented import InstrumentedEngine

    stepper = InstrumentedEngine(setup, sync=True)
    spans: dict[str, list[float]] = {name: [] for name in stepper.stages}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            t0 = time.perf_counter()
            out = fn(*args)  # sync=True: returns after the stage has executed
            spans[name].append(time.perf_counter() - t0)
            return out
        return call

    stepper.stages = {name: timed(name, fn) for name, fn in stepper.stages.items()}
    f = f + 0
    f, _ = stepper.step(f)  # compiles; not counted
    for v in spans.values():
        v.clear()
    for _ in range(steps):
        f, _ = stepper.step(f)
    jax.block_until_ready(f)
    total = sum(statistics.median(v) for v in spans.values() if v)
    return {name: {"median_ms": 1e3 * statistics.median(v), "share": statistics.median(v) / total if total else 0.0}
            for name, v in spans.items() if v}


def hlo_facts(compiled: Any, steps: int, population_bytes: int, cells: int) -> dict[str, Any]:
    """Fusions, custom calls, XLA's bytes-accessed estimate, planned memory and the per-step evidence of a chunk."""
    from lbm.hlo import compiled_cost, parse_hlo, planned_bytes, program_facts

    text = compiled.as_text()
    cost = compiled_cost(compiled)
    facts: dict[str, Any] = {**program_facts(parse_hlo(text)), "steps_in_chunk": steps,
                             "evidence": program_evidence(text, cost, cells, steps)}
    nbytes = cost["bytes_accessed"]
    if nbytes is not None:
        facts["cost_analysis_bytes_accessed"] = float(nbytes)
        facts["cost_analysis_note"] = ("XLA's estimate for the compiled chunk; a while loop's body is counted once "
                                       "and custom calls (native kernels) count as zero")
    memory = planned_bytes(compiled)
    if memory is not None:  # memory analysis is optional per backend
        planned, temp = memory
        facts["memory"] = {
            "population_bytes": int(population_bytes),
            "planned_peak_bytes": planned,
            "planned_peak_over_population": planned / population_bytes,
            "temp_bytes": temp,
            "source": "XLA memory_analysis of the compiled chunk: arguments + outputs - aliased + temporaries",
        }
    return facts


def make_runner(cfg: BenchConfig, setup: Any, timing: Timing) -> _Runner:
    """The runner of a variant (raises ValueError for combinations that do not exist)."""
    _, storage = PRECISIONS[cfg.precision]
    if cfg.variant in PEERS:
        from lbm.bench.peers import refusal

        reason = refusal(cfg.case, cfg.collision, storage)
        if reason:
            raise ValueError(reason)
        return _PeerRunner(setup, cfg.collision)
    if cfg.variant == "naive":
        if cfg.case != "periodic":
            raise ValueError("the naive step is defined for the periodic box only")
        if storage != "compute":
            raise ValueError("the naive step stores populations in the compute dtype only")
        return _NaiveRunner(setup)
    if cfg.variant == "instrumented":
        if storage != "compute":
            raise ValueError("instrumented mode stores populations in the compute dtype only")
        return _InstrumentedRunner(setup, timing.stage_steps)
    return _FusedRunner(setup, cfg.variant, storage, timing.steps_per_dispatch)


ABOVE_ROOFLINE = ("above the roofline at a memory-bound size: the bandwidth probe streams slower than this kernel, "
                  "so the probe is wrong (not the kernel)")
CACHE_RESIDENT = "cache-resident: the working set fits in the last-level cache, which DRAM bandwidth does not bound"
ON_CHIP = ("above the roofline with a working set that fits in the device's on-chip memory (a TPU's VMEM): part of its "
           "traffic may not reach the HBM that the probe streams from")


def working_set(record: dict[str, Any]) -> tuple[int, str]:
    """The bytes a record's program holds while it runs, and where the figure comes from."""
    planned = (record.get("memory") or {}).get("planned_peak_bytes")
    if planned:
        return int(planned), "XLA memory_analysis of the compiled chunk (planned peak)"
    return int(record["cells"] * record["bytes_per_cell_update"] // 2), "the populations (no memory analysis)"


def apply_roofline(record: dict[str, Any], bandwidth_gbs: float | None, cache_bytes: int | None = None,
                   on_chip_bytes: int | None = None) -> None:
    """Set a record's roofline MLUPS and fraction of the roofline for a bandwidth (GB/s); none if None.

    With the last-level cache's size (``cache_bytes``), a record whose working set fits in it is ``cache_resident``:
    its GB/s over the roofline stays in ``gbs_over_roofline``, its ``fraction_of_roofline`` is None (memory does not
    bound it). ``roofline_check`` says which, or that a memory-bound record is above the roofline (the probe is
    then wrong), or, with the device's on-chip memory (``on_chip_bytes``: a TPU's VMEM, which a program uses as it is
    compiled, not as a cache), that a record above it holds a working set that fits there (``on_chip``)."""
    for key in ("roofline_mlups", "fraction_of_roofline", "gbs_over_roofline", "roofline_check", "cache_resident",
                "on_chip", "working_set_bytes", "working_set_source"):
        record.pop(key, None)
    if not bandwidth_gbs:
        return
    ws, source = working_set(record)
    resident = None if cache_bytes is None else ws <= cache_bytes
    ratio = record["effective_gbs"] / bandwidth_gbs
    record.update(working_set_bytes=ws, working_set_source=source, cache_resident=resident,
                  roofline_mlups=bandwidth_gbs * 1e3 / record["bytes_per_cell_update"], gbs_over_roofline=ratio)
    if resident:
        record.update(fraction_of_roofline=None, roofline_check=CACHE_RESIDENT)
        return
    record["fraction_of_roofline"] = ratio
    if ratio <= 1:
        record["roofline_check"] = "ok"
    elif on_chip_bytes is not None and ws <= on_chip_bytes:
        record.update(on_chip=True, roofline_check=ON_CHIP)
    else:
        record["roofline_check"] = ABOVE_ROOFLINE


def roofline_warnings(records: list[dict[str, Any]]) -> list[str]:
    """One line per record above the roofline at a memory-bound size (the probe is wrong there)."""
    out = []
    for r in records:
        if r.get("roofline_check") == ABOVE_ROOFLINE:
            out.append(f"{r['case']} {'x'.join(map(str, r['grid']))} {r['lattice']} {r['collision']} {r['variant']} "
                       f"{r['precision']}: {100 * r['fraction_of_roofline']:.1f} % of the roofline, working set "
                       f"{r['working_set_bytes'] / 2**20:.1f} MiB: {ABOVE_ROOFLINE}")
    return out


PROBES = 3
"""Timed 2-step calls of ``steps=auto``'s probe: the fastest sets the steps (a neighbour's burst slows one call)."""


def auto_steps(runner: _Runner, f0: jnp.ndarray, timing: Timing) -> int:
    """Steps per repeat for ``steps=auto``: enough for ``min_time_s`` at the fastest of :data:`PROBES` 2-step calls,
    rounded up to a power of two, at most ``max_steps``."""
    probe = 2
    runner.compile(f0, probe)
    f = jax.block_until_ready(runner.run(runner.start(f0), probe))
    per_step = math.inf
    for _ in range(PROBES):
        t0 = time.perf_counter()
        f = jax.block_until_ready(runner.run(f, probe))
        per_step = min(per_step, max((time.perf_counter() - t0) / probe, 1e-7))
    n = int(min(timing.max_steps, 2 ** math.ceil(math.log2(max(2, math.ceil(timing.min_time_s / per_step))))))
    return n + n % 2


class Measurement:
    """One configuration set up, compiled and warmed up; then timed repeat by repeat, and its record."""

    def __init__(self, cfg: BenchConfig, timing: Timing, progress: ProgressCallback | None = None) -> None:
        say = self.say = progress or (lambda _: None)
        self.cfg, self.timing = cfg, timing
        say(f"{cfg.label}: setting up")
        self.setup = setup = make_setup(cfg)
        self.runner = runner = make_runner(cfg, setup, timing)
        f0 = setup.initial_populations()
        self.f0 = jax.ShapeDtypeStruct(f0.shape, f0.dtype)
        """The initial populations' shape and dtype: the arrays are handed to the runs (donated by the fused ones)
        and built afresh where needed, so that the device holds the populations once (lbm.cases.base.Setup)."""
        # steps per repeat: given, or enough for min_time_s, rounded up to a power of two (even: the AA pattern
        # runs in pairs; and two runs of the same code at different loads mostly time the same program)
        if timing.steps is None:
            self.n = auto_steps(runner, f0, timing)  # runs on f0 (handed over)
            f0 = setup.initial_populations()
        else:
            self.n = timing.steps
        n = self.n
        say(f"{cfg.label}: compiling {n} steps")
        self.compile_s = runner.compile(f0, n)
        self.f = runner.start(f0)
        del f0
        self.platform = runner.platform(self.f)
        for w in range(timing.warmup):
            say(f"{cfg.label}: warm-up {w + 1}/{timing.warmup}")
            self.f = jax.block_until_ready(runner.run(self.f, n))
        self.times: list[float] = []
        self.cpu_times: list[float] = []

    def repeat(self) -> None:
        """Time one repeat of ``n`` steps (host wall clock and process CPU time)."""
        self.say(f"{self.cfg.label}: repeat {len(self.times) + 1}/{self.timing.repeats} ({self.n} steps)")
        c0, t0 = time.process_time(), time.perf_counter()
        self.f = jax.block_until_ready(self.runner.run(self.f, self.n))
        self.times.append(time.perf_counter() - t0)
        self.cpu_times.append(time.process_time() - c0)

    def _advance(self, steps: int) -> Any:
        """Advance the timed state by ``steps`` (untimed: the kernel profile's call) and return it."""
        self.f = self.runner.run(self.f, steps)
        return self.f

    def record(self, bandwidth_gbs: float | None) -> dict[str, Any]:
        """The bench.json record of the repeats timed (raises FloatingPointError if the populations blew up)."""
        cfg, setup, runner, timing, n, say = self.cfg, self.setup, self.runner, self.timing, self.n, self.say
        if not bool(jnp.all(jnp.isfinite(jnp.asarray(runner.populations(self.f))))):
            raise FloatingPointError(f"{cfg.label}: populations became non-finite during the benchmark")
        cells, q, times = math.prod(setup.shape), setup.lattice.q, self.times
        mlups = [cells * n / t / 1e6 for t in times]
        med = statistics.median(mlups)
        _, storage = PRECISIONS[cfg.precision]
        itemsize = STORAGE_ITEMSIZE.get(storage, jnp.dtype(setup.dtype).itemsize) if runner.mode == "fused" else \
            jnp.dtype(setup.dtype).itemsize
        bpc = lbm_bytes_per_cell(q, itemsize)
        record: dict[str, Any] = {
            "case": cfg.case, "case_config": CASES[cfg.case], "lattice": cfg.lattice, "q": q, "grid": list(setup.shape),
            "cells": cells, "variant": cfg.variant, "mode": runner.mode, "engine": runner.engine,
            "precision": cfg.precision, "compute_dtype": str(jnp.dtype(setup.dtype)),
            "storage": storage if runner.mode == "fused" and storage != "compute" else str(jnp.dtype(setup.dtype)),
            "collision": cfg.collision, "steps_per_repeat": n,
            "steps_per_dispatch": {"fused": timing.steps_per_dispatch or n, "naive": n}.get(runner.mode, 1),
            "repeats": len(times), "warmup": timing.warmup,
            "mlups": {"median": med, "min": min(mlups), "max": max(mlups),
                      "spread_pct": 100.0 * (max(mlups) - min(mlups)) / med, "values": mlups,
                      # cell updates per second of this process's CPU time (all its threads): what compare judges,
                      # since the time other processes hold the cores does not count in it; none where the work
                      # runs on an accelerator (the host's CPU time is then its dispatch, near zero)
                      "cpu_values": cpu_mlups(cells * n, self.cpu_times, self.platform)},
            "work_platform": self.platform,
            "cpu_clock": cpu_clock(self.platform),
            "seconds_per_step_median": statistics.median(times) / n,
            "bytes_per_cell_update": bpc,
            "effective_gbs": med * 1e6 * bpc / 1e9,
            "compile_s": self.compile_s,
            "clock": CLOCK,
        }
        apply_roofline(record, bandwidth_gbs)
        say(f"{cfg.label}: reading the compiled program")
        record.update(runner.describe(self.f0, n))
        if runner.mode in ("fused", "naive") and timing.kernel_profile:
            from lbm.bench.kernels import kernel_times

            say(f"{cfg.label}: tracing one call for per-kernel times")
            traced = min(n, timing.kernel_profile)
            runner.compile(self.f0, traced)
            record["kernel_times"] = kernel_times(lambda: self._advance(traced), traced)
        return record


def cpu_mlups(updates: int, cpu_times: list[float], platform: str) -> list[float] | None:
    """MLUPS by the process CPU time of each repeat, or None where the work runs on an accelerator (``platform``)."""
    if platform != "cpu":
        return None
    return [updates / max(c, 1e-9) / 1e6 for c in cpu_times]


def cpu_clock(platform: str) -> str:
    """What ``mlups.cpu_values`` measures on ``platform``, or why it is n/a there."""
    if platform == "cpu":
        return CPU_CLOCK
    return (f"n/a: the work runs on the {platform}; this process's CPU time measures the host's dispatch and waiting, "
            "not the work (the wall clock, synchronised with the device, is the only clock of these repeats)")


def measure(cfg: BenchConfig, timing: Timing, bandwidth_gbs: float | None, progress: ProgressCallback | None = None
            ) -> dict[str, Any]:
    """Measure one configuration; returns its bench.json record."""
    m = Measurement(cfg, timing, progress)
    for _ in range(timing.repeats):
        m.repeat()
    return m.record(bandwidth_gbs)


MeasureError = (ValueError, RuntimeError, FloatingPointError)
"""What measuring a configuration raises when it cannot be measured (the bench skips it and says why)."""


def measure_interleaved(cfgs: list[BenchConfig], timing: Timing, progress: ProgressCallback | None = None
                        ) -> list[dict[str, Any] | Exception]:
    """Measure configurations with their repeats in turn (round r: each one's repeat r, the order rotated by one every
    round); those of one variant (the collisions of ``collisions=[...]``) run the steps of its first one. One record,
    or the error that stopped it, per configuration."""
    failed: dict[int, Exception] = {}
    ready: dict[int, Measurement] = {}
    steps: dict[str, int] = {}
    for k, cfg in enumerate(cfgs):
        try:
            ready[k] = m = Measurement(cfg, dataclasses.replace(timing, steps=steps.get(cfg.variant, timing.steps)),
                                       progress)
            steps.setdefault(cfg.variant, m.n)
        except MeasureError as exc:
            failed[k] = exc
    for r in range(timing.repeats):
        order = list(ready)
        shift = r % max(1, len(order))
        for k in order[-shift:] + order[:-shift]:  # shift 0: order[0:] + order[:0]
            try:
                ready[k].repeat()
            except MeasureError as exc:
                failed[k] = exc
                del ready[k]
    several = len({m.cfg.collision for m in ready.values()}) > 1
    names = " / ".join(m.cfg.variant + (f" {m.cfg.collision}" if several else "") for m in ready.values())
    out: list[dict[str, Any] | Exception] = []
    for k in range(len(cfgs)):
        try:
            out.append(failed[k] if k in failed else ready[k].record(None) | {
                "interleaved": f"repeats in turn with the same run's {names}, the order rotated by one every round"})
        except MeasureError as exc:
            out.append(exc)
    return out
