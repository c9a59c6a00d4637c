"""How many CPU threads the native kernel shares a step among (kernels.cc, ``worker_count`` and ``run``)."""

from __future__ import annotations

import os

from lbm.errors import ConfigError

SERIAL_CELLS = 16384
"""A grid of fewer cells is stepped on one thread (kernels.cc, ``run``: a pool's hand-off costs more than it saves)."""
THREADS_ENV = "LBM_NATIVE_THREADS"
"""Environment variable that overrides native.threads (for scripts that time thread counts)."""


def host_threads() -> int:
    """The cores this process may run on (the size of XLA's intra-op pool, which the native kernel uses)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call (macOS)
        return os.cpu_count() or 1


def check_threads(threads: int) -> None:
    """Refuse native.threads above the cores this process may run on (more threads than cores only wait for each
    other)."""
    cores = host_threads()
    if threads > cores:
        raise ConfigError("native.threads", threads, f"an integer in [0, {cores}] (this process may run on {cores} "
                          "cores; 0 uses them all)")


def threads_used(threads: int, cells: int) -> int:
    """The threads that share a step of ``cells`` cells with native.threads = ``threads`` (0: all the cores)."""
    if cells < SERIAL_CELLS:
        return 1
    try:
        env = int(os.environ.get(THREADS_ENV, "0"))
    except ValueError:
        env = 0
    return env if env >= 1 else threads if threads >= 1 else host_threads()
