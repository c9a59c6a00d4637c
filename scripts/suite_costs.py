"""What each test of the suite costs: CPU seconds, XLA compiles, native kernel builds, subprocesses.

As a pytest plugin (one JSON line per test, appended to $SUITE_COSTS, from every xdist worker)::

    PYTHONPATH=scripts SUITE_COSTS=costs.jsonl .venv/bin/python -m pytest -p suite_costs -m "not slow"

then the summary (per file, then the dearest tests)::

    python scripts/suite_costs.py costs.jsonl [N]

CPU seconds are this process's (all threads) plus its waited children's (compilers, ``python -m lbm``
subprocesses): unlike wall time, they hardly move with the machine's load. ``compiles`` counts XLA backend compiles,
persistent-cache hits included (``hits``), and the seconds (wall, this process) spent compiling them (``compile_s``),
tracing (``trace_s``) and lowering to MLIR (``lower_s``); ``kernels`` the native libraries built (a cache miss each),
``uses`` the native kernels the test ran (a build moves to the next test that uses a kernel when the first is
left out): the summary lists, per kernel, the tests of the fast lane that use it.

The fast lane's measurement (issue 40; cold: an empty cache directory, so every XLA program and native kernel is
built): per-test costs in one process, then the 2-worker run whose wall and CPU time the lane is judged by::

    XDG_CACHE_HOME=$(mktemp -d) PYTHONPATH=.:scripts SUITE_COSTS=costs.jsonl /usr/bin/time -v \
        .venv/bin/python -m pytest -q -m "not slow" -p no:cacheprovider -p suite_costs -n 0
    XDG_CACHE_HOME=$(mktemp -d) /usr/bin/time -v .venv/bin/python -m pytest -q -m "not slow" -p no:cacheprovider

(record ``uptime`` beside each: the machine's load moves the wall time, and CPU time less).
"""

from __future__ import annotations

import collections
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

_current: dict[str, Any] = {}


def _cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _count(key: str, amount: float = 1) -> None:
    _current[key] = _current.get(key, 0) + amount


def _listen() -> None:
    """Count XLA compiles and cache hits (jax.monitoring), native builds and subprocesses (wrapped) per test."""
    import jax.monitoring

    from lbm.engines.native import build

    durations = {"/jax/core/compile/backend_compile_duration": "compile_s",
                 "/jax/core/compile/jaxpr_trace_duration": "trace_s",
                 "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s"}

    def _duration(event: str, secs: float, **kw: Any) -> None:
        if event in durations:
            _count(durations[event], secs)
            if event == "/jax/core/compile/backend_compile_duration":
                _count("compiles")

    jax.monitoring.register_event_duration_secs_listener(_duration)
    jax.monitoring.register_event_listener(
        lambda event, **kw: event == "/jax/compilation_cache/cache_hits" and _count("hits"))
    compile_kernel, register_kernel, popen_init = build._compile, build.register, subprocess.Popen.__init__

    def _compile(spec: Any, *args: Any) -> Any:
        _current.setdefault("kernels", []).append(spec.tag)
        return compile_kernel(spec, *args)

    def _register(spec: Any) -> Any:
        if spec.tag not in _current.setdefault("uses", []):
            _current["uses"].append(spec.tag)
        return register_kernel(spec)

    def _popen_init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
        _current.setdefault("subprocesses", []).append(" ".join(map(str, args))[:160] if isinstance(args, list | tuple)
                                                       else str(args)[:160])
        popen_init(self, args, *rest, **kwargs)

    build._compile, build.register, subprocess.Popen.__init__ = _compile, _register, _popen_init


def pytest_configure(config: pytest.Config) -> None:
    """Listen in the processes that run tests (xdist workers, or the only process with -n 0)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        _listen()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Measure one test (setup, call and teardown) and append its record to $SUITE_COSTS."""
    _current.clear()
    cpu, wall = _cpu(), time.perf_counter()
    yield
    rec = {"id": item.nodeid, "cpu": round(_cpu() - cpu, 3), "wall": round(time.perf_counter() - wall, 3),
           "slow": item.get_closest_marker("slow") is not None, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
           **_current}
    with open(os.environ.get("SUITE_COSTS", "suite_costs.jsonl"), "a") as fh:
        fh.write(json.dumps(rec) + "\n")


def summarise(rows: list[dict[str, Any]], n: int = 30) -> str:
    """Totals (fast and slow lanes), CPU seconds per file, and the ``n`` dearest tests."""
    total = {lane: sum(r["cpu"] for r in rows if r["slow"] == slow) for lane, slow in (("fast", False), ("slow", True))}
    kernels = sorted({k for r in rows for k in r.get("kernels", [])})
    lines = [f"{len(rows)} tests, {sum(total.values()):.1f} CPU-s (fast lane {total['fast']:.1f}, slow {total['slow']:.1f}); "
             f"{sum(r.get('compiles', 0) for r in rows)} XLA compiles ({sum(r.get('hits', 0) for r in rows)} cache hits); "
             f"{sum(len(r.get('kernels', [])) for r in rows)} native builds ({len(kernels)} kernels); "
             f"{sum(len(r.get('subprocesses', [])) for r in rows)} subprocesses",
             "jax in the test processes (wall s): " + ", ".join(f"{key} {sum(r.get(key, 0) for r in rows):.1f}"
                                                       for key in ("trace_s", "lower_s", "compile_s")),
             "", "CPU-s  tests  file"]
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for r in rows:
        per[r["id"].split("::")[0]][0] += r["cpu"]
        per[r["id"].split("::")[0]][1] += 1
    lines += [f"{cpu:6.1f} {count:5d}  {name}" for name, (cpu, count) in sorted(per.items(), key=lambda x: -x[1][0])[:n]]
    users: dict[str, list[str]] = collections.defaultdict(list)
    for r in rows:
        for tag in r.get("uses", []) if not r["slow"] else []:
            users[tag].append(r["id"])
    lines += ["", "native kernels used by the fast lane: tests  kernel  (first user)"]
    lines += [f"{len(ids):5d}  {tag}  ({ids[0]})" for tag, ids in sorted(users.items(), key=lambda x: len(x[1]))]
    lines += ["", "CPU-s compiles lane  test  [kernels built]"]
    lines += [f"{r['cpu']:6.1f} {r.get('compiles', 0):6d}  {'slow' if r['slow'] else 'fast'}  {r['id']}"
              f"{'  ' + ','.join(r['kernels']) if r.get('kernels') else ''}"
              for r in sorted(rows, key=lambda r: -r["cpu"])[:n]]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        print(summarise([json.loads(line) for line in fh if line.strip()], int(sys.argv[2]) if len(sys.argv) > 2 else 30))
