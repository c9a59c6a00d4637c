"""The interleaved timing design of ``compare --remeasure N``: base and new measured in turn, in one time window.

Worker processes (``python -m lbm.bench.interleave CONFIGS``), one per side, each set up and compile every
configuration to re-measure: the base with ``--base-python`` (another environment) or this interpreter, under
the BASE file's XLA_FLAGS; the new one with this interpreter under the NEW file's XLA_FLAGS. Then, configuration
after configuration, rounds, each one timed repeat of both sides back to back, in the order base-new, new-base,
base-new, ... (so a drift of the machine within a round does not favour one side); each round gives one ratio
t_new / t_base of the process CPU time of the repeat (of the wall clock where the work runs on an accelerator: the
process's CPU time is then the host's dispatch, not the work). A process's speed has a part of its own that stays for all
its rounds, so the N rounds are spread over up to :data:`WORKER_PAIRS` fresh pairs of workers (JAX's persistent
compilation cache lets the later pairs load what the first compiled), and each pair of workers gives one
observation, the median of its rounds' log ratios. The slowdown is the median of these observations, with the
distribution-free 95% confidence interval of a median (order statistics, binomial coverage). The pairs stop
early where the verdict of all of them is already fixed, whatever the pairs left would give (:func:`settled`).

Before timing, each worker reports the structural evidence (lbm.bench.evidence) of what it compiled: a side
whose program differs from the one its file records (e.g. the base re-measured in this checkout after the code
changed) is named, and its rounds do not decide the verdict.
"""

from __future__ import annotations

import json
import math
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Any

from lbm.bench import DEFAULT_COLLISION
from lbm.errors import LbmError

TAG = "LBM-INTERLEAVE "
"""Prefix of the worker's protocol lines on stdout (anything else a library prints there is ignored)."""
COVERAGE = 0.95
CPU_CLOCK = "process CPU time"
WALL_CLOCK = "wall clock (the work ran on an accelerator, where the process's CPU time does not measure it)"
WAIT_S = 900.0
"""Longest wait for one answer of a worker (set-up and compilation included)."""


# --- the worker -----------------------------------------------------------------------------

def _say(obj: dict[str, Any]) -> None:
    print(TAG + json.dumps(obj), flush=True)


def worker(configs: list[dict[str, Any]]) -> None:
    """Set up and compile each configuration, report their evidence, then time one repeat of configuration ``i`` per
    ``run i`` line on stdin."""
    from lbm.environment import precision_scope

    with precision_scope("float64" if any(c["precision"] == "float64" for c in configs) else None):
        _serve(configs)


def _serve(configs: list[dict[str, Any]]) -> None:
    """:func:`worker` with the precision set."""
    import jax

    from lbm.bench.throughput import BenchConfig, Timing, make_runner, make_setup

    states, evidence, engines = [], [], []
    for config in configs:
        cfg = BenchConfig(case=config["case"], lattice=config["lattice"], grid=tuple(config["grid"]),
                          variant=config["variant"], precision=config["precision"], collision=config["collision"])
        n = int(config["steps"])
        setup = make_setup(cfg)
        runner = make_runner(cfg, setup, Timing(steps=n, steps_per_dispatch=int(config["steps_per_dispatch"])))
        f = setup.initial_populations()
        runner.compile(f, n)
        evidence.append(runner.describe(f, n).get("evidence"))
        engines.append(runner.engine)
        state = jax.block_until_ready(runner.run(runner.start(f), n))  # warm-up
        states.append([runner, state, n, runner.platform(state)])
    _say({"ready": True, "evidence": evidence, "engine": engines})
    for line in sys.stdin:
        words = line.split()
        if len(words) != 2 or words[0] != "run":
            break
        state = states[int(words[1])]
        runner, f, n, platform = state
        c0, t0 = time.process_time(), time.perf_counter()
        state[1] = jax.block_until_ready(runner.run(f, n))
        cpu = time.process_time() - c0
        # on an accelerator the process's CPU time is the host's dispatch and waiting, not the work: none
        _say({"wall_s": time.perf_counter() - t0, "cpu_s": cpu if platform == "cpu" else None})


# --- the driver -----------------------------------------------------------------------------

@dataclass
class Side:
    """One worker process: its interpreter, its XLA_FLAGS and what it told us."""

    python: str
    xla_flags: str
    proc: subprocess.Popen[str] | None = None
    log: IO[str] | None = None
    ready: dict[str, Any] = field(default_factory=dict)
    cpu_s: dict[int, list[float]] = field(default_factory=dict)
    wall_s: dict[int, list[float]] = field(default_factory=dict)

    def start(self, configs: list[dict[str, Any]], cwd: str) -> None:
        """Start the worker for ``configs`` (working directory ``cwd``, so the interpreter's own lbm is imported)."""
        env = dict(os.environ)
        env["XLA_FLAGS"] = self.xla_flags
        if "JAX_COMPILATION_CACHE_DIR" not in env:  # the later pairs of workers load what the first compiled
            env.update(JAX_COMPILATION_CACHE_DIR=os.path.join(cwd, "jax-cache"),
                       JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        self.log = tempfile.TemporaryFile("w+")
        try:
            self.proc = subprocess.Popen([self.python, "-m", "lbm.bench.interleave", json.dumps(configs)], cwd=cwd,
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                         text=True)
        except OSError as exc:
            raise LbmError(f"--remeasure: the worker {self.python} -m lbm.bench.interleave stopped: cannot start "
                           f"it ({exc.strerror})") from None

    def answer(self) -> dict[str, Any]:
        """The worker's next protocol line (LbmError with its last error line if it stopped)."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 5.0)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith(TAG):
                return json.loads(line[len(TAG):])
        raise LbmError(f"--remeasure: the worker {self.python} -m lbm.bench.interleave stopped: {self.error()}")

    def error(self) -> str:
        """The last line the worker wrote to stderr."""
        if self.log is None:
            return "(not started)"
        self.log.seek(0)
        lines = [ln for ln in self.log.read().strip().splitlines() if ln.strip()]
        older = ("No module named lbm.bench.interleave", "list indices must be integers")  # none, or one config each
        hint = (" (does that environment's lbm have this lbm.bench.interleave, one worker for every configuration? "
                "--base-python needs a base with this compare)") if any(o in ln for ln in lines for o in older) else ""
        return (lines[-1] if lines else "(no output)") + hint

    def time_one(self, i: int) -> None:
        """Time one repeat of configuration ``i``."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"run {i}\n")
        self.proc.stdin.flush()
        got = self.answer()
        self.cpu_s.setdefault(i, []).append(got["cpu_s"])
        self.wall_s.setdefault(i, []).append(got["wall_s"])

    def stop(self) -> None:
        """End the worker (at once where it never became ready: the other side failed, nothing waits for it)."""
        if self.proc is not None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=30 if self.ready else 0.1)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()


def worker_config(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What both workers measure: the configuration and the base record's steps per repeat and per dispatch."""
    n = int(base.get("steps_per_repeat") or new.get("steps_per_repeat") or 2)
    k = int(base.get("steps_per_dispatch") or n)
    return {"case": base["case"], "lattice": base["lattice"], "grid": list(base["grid"]), "variant": base["variant"],
            "precision": base["precision"], "collision": base.get("collision") or DEFAULT_COLLISION, "steps": n,
            "steps_per_dispatch": 0 if k >= n else k}


@dataclass
class Interleaved:
    """The paired rounds of one configuration, over several pairs of workers, and what they say."""

    rounds: int
    """Rounds timed, over all the pairs of workers."""
    log_ratios: list[float]
    """One per pair of workers: the median over its rounds of log(t_new / t_base), by :attr:`clock` (positive: new
    is slower)."""
    wall_ratio_median: float
    load: tuple[list[float] | None, list[float] | None]
    mismatch: list[str]
    """Sides whose compiled program differs from the one their file records (then the rounds decide nothing)."""
    planned: int = 0
    """The pairs of workers planned (more than ``log_ratios`` holds where the first ones settled the verdict:
    :func:`settled`)."""
    clock: str = CPU_CLOCK
    """The clock of the ratios: the process CPU time, or the wall clock where a side's work ran on an accelerator."""

    @property
    def slowdown(self) -> tuple[float, float, float]:
        """(median, lower, upper 95% bound) of the relative slowdown t_new / t_base - 1 over the pairs of workers
        (inf bounds: too few pairs)."""
        lo, hi = median_interval(self.log_ratios)
        return math.expm1(statistics.median(self.log_ratios)), math.expm1(lo), math.expm1(hi)

    @property
    def spread(self) -> float:
        """Interquartile range of the pairs of workers' ratios (relative): the noise they saw."""
        if len(self.log_ratios) < 4:
            return float("nan")
        q = statistics.quantiles([math.exp(x) for x in self.log_ratios], n=4)
        return q[2] - q[0]


def median_interval(values: list[float], coverage: float = COVERAGE) -> tuple[float, float]:
    """The distribution-free interval of a median: order statistics k and n+1-k with binomial coverage >= coverage
    (``(-inf, inf)`` when n is too small to reach it: below 6 values for 95%)."""
    n = len(values)
    xs = sorted(values)
    best = None
    for k in range(1, n // 2 + 1):
        outside = 2 * sum(math.comb(n, j) for j in range(k)) / 2 ** n
        if 1 - outside >= coverage:
            best = k
    if best is None:
        return -math.inf, math.inf
    return xs[best - 1], xs[n - best]


def verdict_of_rounds(log_ratios: list[float], threshold: float) -> str:
    """The timing verdict of paired rounds: REGRESSION when the 95% interval of the median log ratio lies above 0
    and the median slowdown above ``threshold``, OK when the interval lies below it, INCONCLUSIVE otherwise (and
    with too few rounds for an interval)."""
    lo, hi = median_interval(log_ratios)
    if math.isinf(hi):
        return "INCONCLUSIVE"
    if lo > 0 and math.expm1(statistics.median(log_ratios)) > threshold:
        return "REGRESSION"
    return "OK" if math.expm1(hi) < threshold else "INCONCLUSIVE"


EXTREME = 50.0
"""A log ratio beyond any measured one (e^50), standing for rounds not yet run in :func:`settled`."""


def settled(log_ratios: list[float], planned: int, threshold: float) -> bool:
    """Whether the verdict of ``planned`` rounds is already fixed by the rounds run, whatever the others give.

    The verdict only moves OK -> INCONCLUSIVE -> REGRESSION as any ratio grows, so the rounds left all at the
    lowest and all at the highest possible value bound it: where both give the same word, every outcome does.
    Stopping also waits until the rounds run give that word themselves, so the verdict (and the interval the
    report shows) of the rounds run is exactly the verdict of all ``planned`` rounds.
    """
    rest = planned - len(log_ratios)
    if rest <= 0:
        return True
    if planned < rounds_needed():
        return False
    low = verdict_of_rounds(log_ratios + [-EXTREME] * rest, threshold)
    return low == verdict_of_rounds(log_ratios + [EXTREME] * rest, threshold) == verdict_of_rounds(log_ratios,
                                                                                                  threshold)


def rounds_needed(coverage: float = COVERAGE) -> int:
    """The fewest rounds whose median interval reaches ``coverage``."""
    n = 1
    while math.isinf(median_interval([0.0] * n, coverage)[0]):
        n += 1
    return n


def load_now() -> list[float] | None:
    """The 1, 5 and 15 minute load averages now (None where the OS has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


WORKER_PAIRS = 6
"""Pairs of fresh workers the rounds are spread over. A process's speed has a part of its own, the same for all its
rounds (identical code in two workers measured 20% apart, round after round: docs/studies.md), so the unit of
replication is a pair of workers, not a round: each pair gives one observation, the median of its rounds."""


def rounds_per_pair(rounds: int) -> list[int]:
    """Rounds per pair of workers: ``rounds`` spread as evenly as possible over min(rounds, WORKER_PAIRS) pairs."""
    pairs = min(rounds, WORKER_PAIRS)
    return [rounds // pairs + (1 if k < rounds % pairs else 0) for k in range(pairs)]


@dataclass
class _Config:
    """What the pairs of workers have measured of one configuration so far."""

    recs: tuple[dict[str, Any], dict[str, Any]]
    observations: list[float] = field(default_factory=list)
    rounds: int = 0
    walls: list[float] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)
    load_start: list[float] | None = None
    done: bool = False
    clock: str = CPU_CLOCK


def measure(pairs: list[tuple[dict[str, Any], dict[str, Any]]], base_flags: str, new_flags: str, rounds: int,
            base_python: str | None, say: Any = None, threshold: float | None = None) -> list[Interleaved]:
    """Time ``rounds`` interleaved rounds of the configuration of each (base, new) record pair, spread over fresh
    pairs of workers (:func:`rounds_per_pair`; one worker per side for all the configurations); with a ``threshold``,
    a configuration stops once its first pairs of workers settle the verdict of all of them."""
    configs = [worker_config(b, n) for b, n in pairs]
    plan = rounds_per_pair(rounds)
    state = [_Config(recs) for recs in pairs]
    with tempfile.TemporaryDirectory(prefix="lbm-interleave-") as cwd:
        for b, n_rounds in enumerate(plan):
            todo = [i for i, c in enumerate(state) if not c.done]
            if not todo:
                break
            sides = {"base": Side(base_python or sys.executable, base_flags), "new": Side(sys.executable, new_flags)}
            try:
                if say:
                    say(todo[0], f"workers {b + 1}/{len(plan)}: starting both sides ({len(todo)} configuration(s))")
                for s in sides.values():
                    s.start([configs[i] for i in todo], cwd)
                for s in sides.values():
                    s.ready = s.answer()
                for j, i in enumerate(todo):
                    _pair_rounds(j, state[i], sides, n_rounds, lambda text, i=i, b=b: say and say(
                        i, f"workers {b + 1}/{len(plan)}: {text}"))
                    c = state[i]
                    c.done = (threshold is not None and not c.mismatch
                              and settled(c.observations, len(plan), threshold))
            finally:
                for s in sides.values():
                    s.stop()
    return [Interleaved(c.rounds, c.observations, statistics.median(c.walls) if c.walls else float("nan"),
                        (c.load_start, load_now()), c.mismatch, len(plan), c.clock) for c in state]


def _pair_rounds(j: int, c: _Config, sides: dict[str, Side], rounds: int, say: Any) -> None:
    """``rounds`` interleaved rounds of configuration ``j`` of the started workers; their median log ratio is one
    observation of ``c``."""
    from lbm.bench.evidence import diff

    c.load_start = c.load_start or load_now()
    for name, rec in zip(("base", "new"), c.recs, strict=True):
        got = diff(rec.get("evidence"), sides[name].ready["evidence"][j], 0.0)
        text = (f"the {name} side ({sides[name].python}, XLA_FLAGS={sides[name].xla_flags!r}) compiles another "
                f"program than the {name} file records ({got.summary()})")
        if got.kind not in ("identical", "unknown") and text not in c.mismatch:
            c.mismatch.append(text)
    for r in range(rounds):
        say(f"round {r + 1}/{rounds}")
        for name in (("base", "new") if r % 2 == 0 else ("new", "base")):
            sides[name].time_one(j)
    b, n = sides["base"], sides["new"]
    cpu = all(t is not None for t in b.cpu_s[j] + n.cpu_s[j])  # None: the work ran on an accelerator
    if not cpu:
        c.clock = WALL_CLOCK
    base_s, new_s = (b.cpu_s[j], n.cpu_s[j]) if cpu else (b.wall_s[j], n.wall_s[j])
    logs = [math.log(max(y, 1e-12) / max(x, 1e-12)) for x, y in zip(base_s, new_s, strict=True)]
    c.observations.append(statistics.median(logs))
    c.rounds += rounds
    c.walls += [y / x for x, y in zip(b.wall_s[j], n.wall_s[j], strict=True) if x > 0]


def main(args: list[str]) -> int:
    """``python -m lbm.bench.interleave CONFIGS_JSON``: the worker (see the module doc)."""
    worker(json.loads(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
