"""The host's memory bandwidth with all its threads: STREAM-like kernels in C++ (stream.cc), built like the native
LBM kernels (the same compiler and flags, the same on-disk cache) and called through ctypes.

XLA:CPU splits an elementwise loop into parts by its own cost model (``outer_dimension_partitions`` in the compiled
HLO), where the native LBM kernel streams on all of XLA's intra-op threads with its own code. These kernels stream
with as many threads, each over its own contiguous slice (first touched by it): ``copy``, ``triad`` (in place),
``copy_2buf``, ``triad_2buf`` (into another array, STREAM's) and ``planes<Q>``: Q planes read and written in place
at once, as an LBM step's populations, with the native kernel's software prefetch (``LBM_NATIVE_PREFETCH_BYTES``,
default 2048 bytes).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from lbm.engines.native.build import _exclusive, cache_dir, compiler, cxxflags
from lbm.engines.native.threads import host_threads
from lbm.environment import cpu_id
from lbm.roofline import HostProbe, Series

log = logging.getLogger("lbm")

KERNELS = {"copy": (0, 2), "triad": (1, 3), "copy_2buf": (2, 2), "triad_2buf": (3, 3)}
"""kernel -> (its number in stream.cc, arrays it names per element: reads + writes)."""
PLANES = (9, 19, 27)
"""The plane counts of the ``planes<Q>`` kernels: the lattices' Q."""
PREFETCH_BYTES = 2048
"""The native LBM kernel's default software prefetch distance (kernels.cc; LBM_NATIVE_PREFETCH_BYTES overrides)."""


STREAM_FLAGS = ("-O3", "-pthread")
"""Always -O3 (whatever LBM_NATIVE_OPT says for the LBM kernels: a probe built at -O0 would measure its own loop
overhead, not the memory); the native kernels' other flags (-march=native, the vector width) as they are."""


def source() -> str:
    """The C++ source of the kernels (stream.cc, shipped with the package)."""
    return resources.files("lbm.engines.native").joinpath("stream.cc").read_text()


def build() -> Path:
    """Compile stream.cc into the kernel cache (once per source, flags, compiler and CPU) with the native kernels'
    flags at -O3 (:data:`STREAM_FLAGS`); returns the library."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    flags = [*STREAM_FLAGS, *(f for f in cxxflags() if not f.startswith("-O"))]
    src = source()
    key = hashlib.sha256("\n".join([src, " ".join(flags), cxx, sys.platform, cpu_id()]).encode()).hexdigest()[:16]
    out = cache_dir() / f"lbm_stream_{key}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(out.with_suffix(".lock")):
        if out.exists():
            return out
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            (Path(tmp) / "stream.cc").write_text(src)
            cmd = [cxx, *flags, "stream.cc", "-o", "stream.so"]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
            if proc.returncode != 0:
                raise RuntimeError(f"stream probe build failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
            os.replace(Path(tmp) / "stream.so", out)
    log.info("built the host bandwidth probe %s", out)
    return out


@functools.cache
def library() -> ctypes.CDLL:
    """The built and loaded probe library (raises RuntimeError where it cannot be built)."""
    lib = ctypes.CDLL(str(build()))
    lib.lbm_stream.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                               ctypes.POINTER(ctypes.c_double)]
    lib.lbm_stream.restype = ctypes.c_int
    return lib


def prefetch_bytes() -> int:
    """The software prefetch distance of the ``planes`` kernels: the native kernel's (LBM_NATIVE_PREFETCH_BYTES)."""
    try:
        return max(0, int(os.environ.get("LBM_NATIVE_PREFETCH_BYTES", PREFETCH_BYTES)))
    except ValueError:
        return PREFETCH_BYTES


def _run(kernel: int, n: int, planes: int, threads: int, repeats: int, prefetch: int) -> list[float]:
    """Seconds of ``repeats`` passes of one kernel (after an untimed one)."""
    seconds = (ctypes.c_double * repeats)()
    if library().lbm_stream(kernel, n, planes, threads, repeats, prefetch, seconds) != 0:
        raise MemoryError(f"the bandwidth probe could not allocate its arrays ({n * planes * 4} bytes each)")
    return list(seconds)


def measure(nbytes: int, repeats: int, threads: int | None = None) -> list[Series]:
    """Every kernel (named ``native_<kernel>``) on ``nbytes``-byte arrays (``planes<Q>``: Q planes of nbytes / Q
    bytes, together) with ``threads`` threads (default: :func:`host_threads`); one series of pass times each."""
    threads = threads or host_threads()
    n = max(16, nbytes // 4 // 16 * 16)
    out = []
    for name, (number, arrays) in KERNELS.items():
        held = arrays if name.endswith("2buf") else arrays - 1  # in place: the written array is one of those read
        out.append(Series(f"native_{name}", arrays * n * 4, held * n * 4, _run(number, n, 1, threads, repeats, 0),
                          threads, "native"))
    prefetch = prefetch_bytes()
    for q in PLANES:
        per_plane = max(16, nbytes // 4 // q // 16 * 16)
        out.append(Series(f"native_planes{q}", 2 * q * per_plane * 4, q * per_plane * 4,
                          _run(4, per_plane, q, threads, repeats, prefetch), threads, "native"))
    return out


def probe() -> HostProbe | None:
    """:func:`measure` where JAX computes on the host's CPU and the probe builds here (a C++ compiler), else None
    (the reason logged)."""
    import jax

    if jax.default_backend() != "cpu":
        return None
    try:
        library()
    except (RuntimeError, OSError) as exc:
        log.info("no native bandwidth probe (%s): the roofline is XLA's kernels alone", str(exc).splitlines()[0])
        return None
    return measure
