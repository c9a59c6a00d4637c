"""Compile lbm's programs over a matrix of lattice x collision x case x grid x engine, each in its own process, so
that a compiler abort (XLA's TPU compiler ends the process with SIGABRT; issue 37) is one line, not the end of the
list. One line per configuration: OK | ABORT | ERROR | REFUSED | SKIPPED, the engine compiled, the seconds (deviceless:
of the compile; on the device: the run's compile_time_s), the reason.

  deviceless (libtpu, no chip; e.g. the accelerator environment of scripts/accel_env.sh):
    python scripts/compile_matrix.py [--set issue|sizes|pairwise|all] [--target v5e] [--jobs 2]
  on the device (the chip: a 20-step `python -m lbm run` per configuration, one process at a time; first a PROBE
  line: the compile guard of lbm.bench.probe answering while a process holds the device):
    python scripts/compile_matrix.py --device [--set issue] [--budget 100]

Sets: ``issue`` the 3D grids of issue 37 (taylor_green_3d, D3Q27 cumulant 32^3..128^3 and BGK, D3Q19 BGK; pallas);
``sizes`` every 3D size 32, 48, 64, 96, 128 on both 3D lattices and three cases (pallas); ``pairwise`` a
covering design in which every pair of values of lattice, collision, case, grid (32, 64, 128) and engine (pallas,
xla) occurs, but collision x case (UNPAIRED) (what CI's accelerator lane compiles: tests/scripts/test_compile_matrix.py);
``all`` the three. Exit code 1 when a configuration aborted or failed, 0 otherwise (REFUSED: lbm refused the
configuration in one line, not a crash).
Works with Python 3.11 and jax 0.10.2 (the TPU machine's) as with jax 0.12.
"""


import argparse
import concurrent.futures
import dataclasses
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LATTICES = ("d2q9", "d3q19", "d3q27")
COLLISIONS = ("bgk", "trt", "mrt", "regularized", "recursive_regularized", "kbc", "cumulant")
CASES = ("taylor_green", "taylor_green_3d", "cavity", "poiseuille", "cylinder", "duct", "obstacle", "schafer_turek")
"""Every case (lbm/configs/case); obstacle with a sphere (a disc in 2D) made here, schafer_turek 2D-1 / 3D-1Z."""
ENGINES = ("pallas", "xla")
PAIRWISE_SIZES = (32, 64, 128)
ALL_SIZES = (32, 48, 64, 96, 128)
STEPS = ["steps=20", "output.every=10"]
"""Every run: 20 steps in chunks of 10 (one chunk length to compile)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration: lattice, collision, case, grid size N (N^3 in 3D, N^2 in 2D), engine."""

    lattice: str
    collision: str
    case: str
    size: int
    engine: str

    @property
    def name(self) -> str:
        """A one-word label."""
        dims = 3 if self.lattice != "d2q9" else 2
        return f"{self.engine} {self.lattice} {self.collision} {self.case} {self.size}^{dims}"


def valid(c: Config) -> bool:
    """Whether lbm offers the combination (a 3D-only case on D2Q9 and the cumulant on D3Q19 it does not)."""
    if c.lattice == "d2q9" and c.case in ("taylor_green_3d", "duct"):
        return False
    return not (c.collision == "cumulant" and c.lattice == "d3q19")


def overrides(c: Config, scratch: Path) -> list[str]:
    """The ``lbm run`` overrides of a configuration (masks for the obstacle written into ``scratch``)."""
    import numpy as np

    d = 3 if c.lattice != "d2q9" else 2
    out = [f"case={c.case}", f"lattice={c.lattice}", f"collision={c.collision}", f"engine={c.engine}", *STEPS]
    if c.case == "schafer_turek":  # the grid follows from cells per diameter: N / 8 (4, 8, 16)
        out += [f"case.variant={'3D-1Z' if d == 3 else '2D-1'}", f"case.cells_per_diameter={max(4, c.size // 8)}"]
        return out + (["grid.nz=16"] if d == 3 else [])
    out += [f"grid.nx={c.size}", f"grid.ny={c.size}"] + ([f"grid.nz={c.size}"] if d == 3 else [])
    if c.case == "obstacle":
        r = max(2, c.size // 16)
        axes = np.mgrid[tuple(slice(-r, r + 1) for _ in range(d))]
        mask = scratch / f"ball{d}d_{r}.npy"
        if not mask.exists():
            np.save(mask, sum(a * a for a in axes) <= r * r)
        out.append(f"case.mask={mask}")
    return out


COST = {"d2q9": 0.3, "d3q19": 1.0, "d3q27": 2.0, "xla": 3.0, "pallas": 1.0, 32: 1.0, 64: 1.3, 128: 1.8,
        "bgk": 1.0, "trt": 1.0, "regularized": 1.5, "mrt": 2.0, "recursive_regularized": 3.0, "kbc": 3.0,
        "cumulant": 4.0, "taylor_green": 1.0, "taylor_green_3d": 1.0}
"""A rough relative compile cost per value (a product over the factors; 2 for a case with walls), read off the
deviceless v5e compile times: the xla engine's D3Q27 programs with the heavier collisions take minutes."""


START = 0.4
"""A child process's start (Python, jax, libtpu) in COST's units."""


def cost(c: Config) -> float:
    """The relative compile cost of a configuration (COST)."""
    return math.prod(COST.get(v, 2.0) for v in dataclasses.astuple(c))


FACTORS = ("lattice", "collision", "case", "size", "engine")
UNPAIRED = (("collision", "case"),)
"""Factor pairs the design does not cover: the collision is each cell's arithmetic, the case the program's structure
(its boundary cells, walls, inlets); every collision still meets every lattice, grid and engine, and every case
every lattice, grid and engine. Covering collision x case too took 75 configurations instead of 60 (the 7 x 8 pairs
drive the design), and CI's whole run over its 8 minutes (issue 37, item 1)."""


def paired(i: int, j: int) -> bool:
    """Whether the design covers the pairs of values of factors i and j (FACTORS; not those in UNPAIRED)."""
    return (FACTORS[i], FACTORS[j]) not in UNPAIRED and (FACTORS[j], FACTORS[i]) not in UNPAIRED


def pairwise(sizes: tuple[int, ...] = PAIRWISE_SIZES) -> list[Config]:
    """A covering design: every valid pair of values of any two factors (but UNPAIRED's) in at least one
    configuration; greedy, each step the configuration covering the most new pairs per unit of cost (its COST and a
    process's START)."""
    factors = (LATTICES, COLLISIONS, CASES, sizes, ENGINES)
    candidates = [Config(*v) for v in itertools.product(*factors) if valid(Config(*v))]

    def pairs(c: Config) -> set[tuple[int, object, int, object]]:
        v = dataclasses.astuple(c)
        return {(i, v[i], j, v[j]) for i, j in itertools.combinations(range(len(v)), 2) if paired(i, j)}

    uncovered = set().union(*(pairs(c) for c in candidates))
    chosen: list[Config] = []
    while uncovered:
        best = max(candidates, key=lambda c: len(pairs(c) & uncovered) / (cost(c) + START))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen


def issue() -> list[Config]:
    """The grids of issue 37 on the pallas engine: taylor_green_3d on D3Q27 (cumulant 32^3..128^3, BGK 32^3 and
    96^3) and D3Q19 (BGK 64^3, 128^3)."""
    cfgs = [Config("d3q27", "cumulant", "taylor_green_3d", n, "pallas") for n in ALL_SIZES]
    cfgs += [Config("d3q27", "bgk", "taylor_green_3d", n, "pallas") for n in (32, 96)]
    return cfgs + [Config("d3q19", "bgk", "taylor_green_3d", n, "pallas") for n in (64, 128)]


def sizes() -> list[Config]:
    """Every 3D size on both 3D lattices: the periodic box, the cavity's walls and lid, the duct's walls and force."""
    kinds = {"taylor_green_3d": {"d3q19": "kbc", "d3q27": "cumulant"}, "cavity": {"d3q19": "bgk", "d3q27": "mrt"},
             "duct": {"d3q19": "trt", "d3q27": "regularized"}}
    return [Config(lat, kinds[case][lat], case, n, "pallas") for case in kinds for lat in ("d3q19", "d3q27")
            for n in ALL_SIZES]


SETS = {"issue": issue, "sizes": sizes, "pairwise": pairwise}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one configuration ended: status OK | ABORT | ERROR | REFUSED, the engine compiled, seconds, reason."""

    config: Config
    status: str
    engine: str = ""
    seconds: float = 0.0
    reason: str = ""

    def line(self) -> str:
        """The configuration's one line."""
        took = f"{self.seconds:6.1f} s" if self.seconds else " " * 8
        engine = f" ({self.engine})" if self.engine and self.engine != self.config.engine else ""
        return f"{self.status:<7} {self.config.name + engine:<58} {took}  {self.reason}".rstrip()


def _reason(stderr: str) -> str:
    for line in stderr.splitlines():
        if "Check failed" in line:
            return line[line.index("Check failed"):][:160]
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip() and not ln.startswith(("E1", "W1", "I1"))]
    return lines[-1][:160] if lines else ""


def _ended(c: Config, code: int, stderr: str, engine: str, seconds: float) -> Outcome:
    if code < 0:
        return Outcome(c, "ABORT", engine, seconds, f"{signal.Signals(-code).name}: {_reason(stderr)}")
    if code == 2 and "lbm: error:" in stderr:
        return Outcome(c, "REFUSED", engine, seconds, _reason(stderr))
    return Outcome(c, "ERROR", engine, seconds, f"exit {code}: {_reason(stderr)}")


def deviceless(c: Config, target: str, scratch: Path, timeout: float) -> Outcome:
    """Compile a configuration's chunk for ``target`` without the device, in a child (lbm.bench.probe)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "lbm.bench.probe", target, "auto", *overrides(c, scratch)]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(c, "ERROR", "", time.perf_counter() - t0, f"no answer within {timeout:.0f} s")
    said = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    engine = said[-1].get("engine", "") if said else ""
    if res.returncode == 0 and said and "compile_s" in said[-1]:
        return Outcome(c, "OK", engine, said[-1]["compile_s"])
    if said and "error" in said[-1]:  # the compiler raised (lbm.bench.probe.COMPILE_ERROR)
        return Outcome(c, "ERROR", engine, time.perf_counter() - t0, said[-1]["error"][:160])
    return _ended(c, res.returncode, res.stderr, engine, time.perf_counter() - t0)


BATCH_CHILD = """
import json, sys
from lbm.bench.probe import _child
from lbm.errors import LbmError
for line in sys.stdin:
    i, argv = json.loads(line)
    print(json.dumps({"config": i}), flush=True)
    try:
        code = _child(argv)
    except LbmError as exc:
        print(json.dumps({"refused": str(exc)}), flush=True)
        code = 2
    print(json.dumps({"exit": code}), flush=True)
"""
"""The batch child: lbm.bench.probe's compile for each configuration read from stdin, in one process; a marker line
before each (its index) and its exit code after, so that the parent knows which configuration an abort ended."""


def _batch_outcome(c: Config, said: list[dict], seconds: float) -> Outcome:
    """A finished configuration's outcome from the batch child's lines about it (as :func:`deviceless` reads its
    child's)."""
    engine = next((d["engine"] for d in reversed(said) if "engine" in d), "")
    last = said[-1] if said else {}
    if last.get("exit") == 0 and len(said) > 1 and "compile_s" in said[-2]:
        return Outcome(c, "OK", engine, said[-2]["compile_s"])
    if "refused" in (said[-2] if len(said) > 1 else {}):
        return Outcome(c, "REFUSED", engine, seconds, said[-2]["refused"][:160])
    errors = [d["error"] for d in said if "error" in d]
    return Outcome(c, "ERROR", engine, seconds, errors[-1][:160] if errors else f"exit {last.get('exit')}")


def _batch_child(todo: list[int], stdin: str, env: dict[str, str], timeout: float) -> tuple[dict, int | None, str]:
    """Run the batch child on ``stdin``, stopping it when a configuration gives no answer within ``timeout`` seconds
    (from its marker; the first one's from the start); its lines per configuration, its exit code (None: stopped) and
    its stderr."""
    import queue
    import threading

    said: dict[int, list[dict]] = {}
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-c", BATCH_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, text=True, env=env, cwd=REPO)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=lambda: [*map(lines.put, child.stdout), lines.put(None)], daemon=True).start()
        child.stdin.write(stdin)
        child.stdin.close()
        current, code = todo[0], None
        while True:
            try:
                ln = lines.get(timeout=timeout)
            except queue.Empty:  # this configuration hangs: stop the child
                child.kill()
                child.wait()
                break
            if ln is None:
                code = child.wait()
                break
            if ln.startswith("{"):
                d = json.loads(ln)
                if set(d) == {"config"}:
                    current = d["config"]
                    said[current] = []
                else:
                    said.setdefault(current, []).append(d)
        err.seek(0)
        return said, code, err.read()


def deviceless_batch(configs: list[Config], target: str, scratch: Path, timeout: float) -> list[Outcome]:
    """:func:`deviceless` for several configurations, compiled one after the other in one child (one start of Python,
    jax and libtpu for all; ``timeout`` per configuration); a configuration that ends the child (an abort, a time-out)
    gets its own outcome, as in :func:`deviceless`, and those after it are compiled in a new child."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done: dict[int, Outcome] = {}
    while len(done) < len(configs):
        todo = [i for i in range(len(configs)) if i not in done]
        stdin = "".join(json.dumps([i, [target, "auto", *overrides(configs[i], scratch)]]) + "\n" for i in todo)
        t0 = time.perf_counter()
        said, code, stderr = _batch_child(todo, stdin, env, timeout)
        for i, lines in said.items():
            if lines and "exit" in lines[-1]:
                done[i] = _batch_outcome(configs[i], lines, time.perf_counter() - t0)
        # the child ended in this configuration (or before the first one's marker)
        ended = next(i for i in [*said, *todo] if i not in done) if len(done) < len(configs) else None
        if ended is not None:
            engine = next((d["engine"] for d in reversed(said.get(ended, [])) if "engine" in d), "")
            done[ended] = (Outcome(configs[ended], "ERROR", engine, time.perf_counter() - t0,
                                   f"no answer within {timeout:.0f} s") if code is None
                           else _ended(configs[ended], code, stderr, engine, time.perf_counter() - t0))
    return [done[i] for i in range(len(configs))]


def on_device(c: Config, scratch: Path, timeout: float) -> Outcome:
    """A 20-step ``python -m lbm run`` of a configuration on this machine's device, in a child (no compile probe:
    the run's own compile is what is checked)."""
    run_dir = scratch / c.name.replace(" ", "_").replace("^", "")
    env = {**os.environ, "LBM_COMPILE_PROBE": "0", "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "lbm", "run", *overrides(c, scratch), "output.plots=false", "output.progress=none",
           f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(c, "ERROR", "", time.perf_counter() - t0, f"no answer within {timeout:.0f} s")
    wall = time.perf_counter() - t0
    metrics = run_dir / "metrics.json"
    if res.returncode == 0 and metrics.exists():
        m = json.loads(metrics.read_text())
        return Outcome(c, "OK", m.get("engine", ""), m.get("compile_time_s", 0.0),
                       f"{m.get('device', '')}, {m.get('mlups', 0):.0f} MLUPS, status {m.get('status')}, "
                       f"{wall:.1f} s in all")
    return _ended(c, res.returncode, res.stderr, "", wall)


PROBE_CHECK = """
import json, sys, time
import jax
from lbm.config import load
from lbm.simulation import make_case
from lbm.bench.probe import guard
print(json.dumps({"device": jax.devices()[0].device_kind}), flush=True)  # this process now holds the device
t0 = time.perf_counter()
p = guard(make_case(load(sys.argv[1:])).run)
print(json.dumps({"status": p and p.status, "engine": p and p.engine, "seconds": round(time.perf_counter() - t0, 1),
                  "message": p and p.message}), flush=True)
"""
"""The guard's check on a device: this process opens the device, then the probe compiles in a child without it."""


def probe_check(c: Config, scratch: Path, timeout: float) -> str:
    """One line: whether the compile probe (lbm.bench.probe.guard, LBM_COMPILE_PROBE=auto) answers while a process
    holds the device, and what it costs (a run's start pays it once per program)."""
    env = {**os.environ, "LBM_COMPILE_PROBE": "auto", "LBM_PROBE_CACHE": str(scratch / "probe-cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-c", PROBE_CHECK, *overrides(c, scratch)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"PROBE   {c.name}: no answer within {timeout:.0f} s"
    said = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or len(said) < 2:
        return f"PROBE   {c.name}: exit {res.returncode}: {_reason(res.stderr)}"
    p = said[-1]
    if p["status"] is None:
        return f"PROBE   {c.name}: not probed on {said[0]['device']} (LBM_COMPILE_PROBE=auto probes on a TPU)"
    return (f"PROBE   {c.name}: guard on {said[0]['device']}: {p['status']} (engine {p['engine']}) in "
            f"{p['seconds']} s {p['message'] or ''}").rstrip()


def main(argv: list[str] | None = None) -> int:
    """Compile (or run, --device) every configuration of the chosen set; one line each; 1 if any failed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", choices=[*SETS, "all"], default="issue")
    p.add_argument("--device", action="store_true", help="run on this machine's device instead of compiling for "
                   "--target without one")
    p.add_argument("--target", default="v5e", help="deviceless target (lbm/targets; default v5e)")
    p.add_argument("--jobs", type=int, default=1, help="deviceless compiles at once (the device: always 1)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    p.add_argument("--only", default="", help="only configurations whose line contains this text")
    p.add_argument("--list", action="store_true", help="print the configurations, compile nothing")
    p.add_argument("--budget", type=float, default=0.0, help="--device: start no configuration after this many "
                   "seconds (the rest are listed as SKIPPED); 0: no limit")
    p.add_argument("--no-probe-check", action="store_true", help="--device: leave out the compile probe's check (the "
                   "guard of lbm.bench.probe run while a process holds the device)")
    a = p.parse_args(argv)
    # a stop (SIGTERM) ends the configuration running in the foreground too: subprocess.run kills its child on the
    # exception, so no child is left holding the device
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = list(SETS) if a.set == "all" else [a.set]
    cfgs = list(dict.fromkeys(c for n in names for c in SETS[n]() if a.only in c.name))
    if a.list:
        print("\n".join(c.name for c in cfgs))
        return 0
    where = "on this machine's device" if a.device else f"for {a.target} without the device"
    print(f"compile_matrix: {len(cfgs)} configurations ({a.set}) {where}, one process each", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lbm-matrix-") as tmp:
        scratch = Path(tmp)
        if a.device:
            if not a.no_probe_check:
                print(probe_check(cfgs[0], scratch, a.timeout), flush=True)
            outcomes = []
            for c in cfgs:
                if a.budget and time.perf_counter() - t0 > a.budget:
                    outcomes.append(Outcome(c, "SKIPPED", reason=f"--budget {a.budget:.0f} s spent"))
                else:
                    outcomes.append(on_device(c, scratch, a.timeout))
                print(outcomes[-1].line(), flush=True)
        else:
            with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
                futures = [pool.submit(deviceless, c, a.target, scratch, a.timeout) for c in cfgs]
                outcomes = []
                for f in futures:
                    outcomes.append(f.result())
                    print(outcomes[-1].line(), flush=True)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("OK", "ABORT", "ERROR", "REFUSED", "SKIPPED")}
    print("compile_matrix: " + ", ".join(f"{n} {s}" for s, n in counts.items())
          + f" in {time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if counts["ABORT"] or counts["ERROR"] else 0


if __name__ == "__main__":
    sys.exit(main())
