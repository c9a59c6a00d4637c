"""Compile probes: a run's chunk compiled in a child process, so that a compiler that aborts is an answer, not the end.

XLA's TPU compiler ends the process with SIGABRT on a program it cannot lower (issue 37: a ``Check failed`` in
its fusion emitter); Python cannot catch that. Before a run compiles on a TPU, :func:`guard` compiles the same
chunks (every chunk length the run will compile, its engine, its grid) without the chip in a child process,
through the deviceless path of ``lbm inspect`` (libtpu with a topology, ``JAX_PLATFORMS=cpu``: the child never
opens the chip, which only one process may hold). If the child dies by a signal, the other engine is probed too
and the run is refused with one line naming the engine that compiles. A probe that cannot run at all (no target
for the device, no libtpu, a time-out) lets the run go on and says why in the log.

An answer is kept (``$XDG_CACHE_HOME/lbm/compile-probe``, or ``$LBM_PROBE_CACHE``) under the run's configuration,
the chunk lengths, the target, the jax, jaxlib and libtpu versions and a digest of lbm's source, so a program is
probed once. ``LBM_COMPILE_PROBE``: ``auto`` (default; probe runs in fused mode on a TPU), ``0`` (never),
``1`` (every fused run, on any platform: the child compiles for this machine's CPU where it is not a TPU).

Child: ``python -m lbm.bench.probe TARGET LENGTHS`` with the pickled RunConfig on stdin; it prints one JSON line
(the engine it compiled and the seconds) and exits 0, or dies with the compiler.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lbm.environment import user_cache
from lbm.errors import LbmError

log = logging.getLogger("lbm")

ENV = "LBM_COMPILE_PROBE"
"""auto | 0 | 1 (see the module doc)."""
TIMEOUT_S = 900.0
"""A child still compiling after this is stopped and the run goes on unprobed (a compile that long is no abort)."""
COMPILE_ERROR = 3
"""The child's exit code when the compiler raised (its message on stdout)."""
ALTERNATIVE = {"tpu": {"pallas": "xla", "xla": "pallas"}, "cuda": {"pallas": "xla", "xla": "pallas"},
               "cpu": {"native": "xla", "pallas": "xla", "xla": "native"}}
"""Per platform, the engine probed when a run's engine aborts: the one the refusal names if it compiles."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """What a child compile said: ``status`` ok | aborted (killed by a signal) | error (the compiler raised) | failed
    (no answer about the program); the engine it compiled, its seconds, a message."""

    status: str
    engine: str = ""
    seconds: float = 0.0
    message: str = ""
    cached: bool = False
    """Answered from the cache (``seconds``: the child's when it ran)."""


def _cache_dir() -> Path:
    """Where probe answers are kept ($LBM_PROBE_CACHE, else the user cache directory)."""
    return user_cache("compile-probe", "LBM_PROBE_CACHE")


def _source_digest() -> str:
    """sha256 of lbm's Python sources: another lbm may compile another program."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _versions() -> str:
    import importlib.metadata as md

    found = []
    for dist in ("jax", "jaxlib", "libtpu", "libtpu-nightly"):
        try:
            found.append(f"{dist}={md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return " ".join(found)


def probe_key(run: Any, lengths: Sequence[int], target: str) -> str:
    """The cache key of a probe: the run's configuration, chunk lengths, target, versions and lbm's source."""
    text = "\n".join([repr(run), ",".join(map(str, sorted(lengths))), target, _versions(), _source_digest()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def abort_line(stderr: str) -> str:
    """The compiler's own reason in a child's stderr (its ``Check failed`` line), shortened; '' when none."""
    for line in stderr.splitlines():
        if "Check failed" in line:
            line = line[line.index("Check failed"):]
            return line if len(line) <= 200 else line[:200] + "..."
    return ""


def run_child(command: Sequence[str], payload: bytes, timeout: float = TIMEOUT_S,
              env: dict[str, str] | None = None) -> Probe:
    """Run a probe child (``command``, ``payload`` on its stdin) and classify its end."""
    t0 = time.perf_counter()
    try:
        res = subprocess.run(list(command), input=payload, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Probe("failed", seconds=time.perf_counter() - t0, message=f"no answer within {timeout:.0f} s")
    seconds = time.perf_counter() - t0
    err = res.stderr.decode(errors="replace")
    said = []
    for line in res.stdout.decode(errors="replace").splitlines():
        try:
            said.append(json.loads(line))
        except ValueError:
            pass
    engine = said[-1].get("engine", "") if said and isinstance(said[-1], dict) else ""
    if res.returncode == COMPILE_ERROR and said and "error" in said[-1]:
        return Probe("error", engine, seconds, said[-1]["error"])
    if res.returncode < 0:
        name = signal.Signals(-res.returncode).name
        detail = abort_line(err) or err.strip()[-200:]
        return Probe("aborted", engine, seconds, f"{name}: {detail}" if detail else name)
    if res.returncode != 0:
        last = [ln for ln in err.strip().splitlines() if ln.strip()]
        return Probe("failed", engine, seconds, last[-1][:300] if last else f"exit {res.returncode}")
    if not said or "compile_s" not in said[-1]:
        return Probe("failed", engine, seconds, "the child printed no answer")
    return Probe("ok", engine, seconds)


def probe(run: Any, lengths: Sequence[int], target: str, timeout: float = TIMEOUT_S) -> Probe:
    """Compile ``run``'s chunks of ``lengths`` steps for ``target`` in a child process (deviceless on a TPU or
    GPU target), answered from the cache where this program was probed before."""
    key = probe_key(run, lengths, target)
    path = _cache_dir() / f"{key}.json"
    if path.exists():
        try:
            return dataclasses.replace(Probe(**json.loads(path.read_text())), cached=True)
        except (ValueError, TypeError):
            pass
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    command = [sys.executable, "-m", "lbm.bench.probe", target, ",".join(map(str, lengths))]
    result = run_child(command, pickle.dumps(run), timeout, env)
    if result.status != "failed":  # a failure to probe is no answer about the program
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(dataclasses.asdict(result)))
            tmp.replace(path)
        except OSError:
            pass
    return result


def device_target() -> str | None:
    """The lbm target (lbm/targets) of JAX's default device; None where none describes it."""
    import jax

    from lbm.bench.targets import load_target, target_names

    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return "cpu"
    for name in target_names():
        t = load_target(name)
        if t.platform == dev.platform and t.device == dev.device_kind:
            return name
    return None


def wanted(run: Any) -> bool:
    """Whether a run is probed: fused mode, and ``LBM_COMPILE_PROBE`` (auto: on a TPU)."""
    setting = os.environ.get(ENV, "auto").strip().lower()
    if setting not in ("auto", "0", "1"):
        raise LbmError(f"{ENV}={setting!r}: choose auto, 0 or 1")
    if setting == "0" or run.mode != "fused":
        return False
    if setting == "1":
        return True
    import jax

    return jax.default_backend() == "tpu"


def guard(run: Any, start: int = 0) -> Probe | None:
    """Refuse, in one line naming an engine that compiles, a run whose compile would abort the process; the
    probe's answer (None where the run is not probed). ``run``: as the case resolved it; ``start``: its first step."""
    if not wanted(run):
        return None
    from lbm.simulation import chunk_lengths, chunk_size

    target = device_target()
    if target is None:
        import jax

        log.info("compile probe skipped: no lbm target describes %s", jax.devices()[0].device_kind)
        return None
    lengths = sorted(chunk_lengths(start, run.steps, chunk_size(run)))
    result = probe(run, lengths, target)
    if result.status == "ok":
        log.info("compile probe (%s, engine %s, chunks of %s steps): compiles (%s)", target, result.engine,
                 ",".join(map(str, lengths)), "cached" if result.cached else f"{result.seconds:.1f} s in a child")
        return result
    if result.status == "failed":
        log.info("compile probe (%s) gave no answer, the run goes on: %s", target, result.message)
        return result
    from lbm.bench.targets import load_target

    engine = result.engine or run.engine
    other = ALTERNATIVE.get(load_target(target).platform, {}).get(engine, "xla")
    alt = probe(dataclasses.replace(run, engine=other), lengths, target)
    where = f"{target} ({'x'.join(map(str, run.grid))} {run.lattice} {run.collision})"
    if alt.status == "ok":
        advice = f"run it with engine={other}, which compiles"
    else:
        advice = f"engine={other} does not compile it either ({alt.status}: {alt.message[:120]})"
    asked = engine if engine == run.engine else f"{run.engine} ({engine})"
    what = "aborts" if result.status == "aborted" else "fails"
    raise LbmError(f"engine={asked} cannot compile this run on {where}: the compiler {what} "
                   f"({result.message}); {advice}")


def _child(argv: Sequence[str]) -> int:
    """The probe child: compile a run's chunks for a target; JSON lines on stdout, the last one the answer.

    ``TARGET LENGTHS`` (comma-separated steps): the run pickled on stdin (:func:`probe`); ``TARGET auto OVERRIDE...``:
    the run of those overrides (one device) and its own chunk lengths (scripts/compile_matrix.py).
    """
    from lbm.bench.targets import (
        chunk_for_target,
        compile_chunk,
        engine_for,
        load_target,
        prepare_environment,
        target_mesh,
        target_sharding,
        with_topology,
    )

    if len(argv) < 2:
        raise LbmError("usage: python -m lbm.bench.probe TARGET LENGTHS (run pickled on stdin) | TARGET auto "
                       "OVERRIDE...")
    target = load_target(argv[0])
    if argv[1] == "auto":
        from lbm.config import load
        from lbm.simulation import chunk_lengths, chunk_size, make_case

        run = make_case(load(list(argv[2:]))).run
        lengths = sorted(chunk_lengths(0, run.steps, chunk_size(run, target.platform)))
    else:
        lengths = [int(n) for n in argv[1].split(",") if n]
        run = pickle.loads(sys.stdin.buffer.read())
    if run.mesh_shape:
        target = with_topology(target, "", run.devices)
    prepare_environment(target)
    import jax

    from lbm.simulation import prepare

    # the mesh is the target's, not this machine's (one CPU device): the case is built as for one device
    one = dataclasses.replace(run, mesh_shape=None, parallel=dataclasses.replace(run.parallel, devices=1))
    _, setup = prepare(one)
    mesh = target_mesh(target, run.mesh_shape) if run.mesh_shape else None
    sharding = (target_sharding(target) if mesh is None
                else jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    total = 0.0
    for n in lengths:
        fn, args, engine, _, _ = chunk_for_target(setup, engine_for(target, run.engine), n, target.platform, mesh)
        print(json.dumps({"engine": engine, "compiling": n}), flush=True)  # read by the parent if the compile aborts
        try:
            total += compile_chunk(fn, args, sharding, target)[1]
        except Exception as exc:  # the compiler refused the program (e.g. out of TPU VMEM): an answer too
            print(json.dumps({"engine": engine, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}),
                  flush=True)
            return COMPILE_ERROR
    print(json.dumps({"engine": engine, "compile_s": round(total, 3), "lengths": lengths}), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_child(sys.argv[1:]))
    except LbmError as exc:
        print(f"lbm: error: {exc}", file=sys.stderr)
        sys.exit(2)
