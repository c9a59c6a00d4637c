"""The machine and software a process runs on: device, jax/jaxlib/python versions, CPU model, XLA_FLAGS.

One probe for ``bench.json`` (its ``environment``) and ``metrics.json`` (device and versions);
:func:`cpu_id` is what a ``-march=native`` build may be keyed on; :func:`precision_scope` is the one switch of
JAX's float64 arithmetic (``jax_enable_x64``), put back after the run that needed it.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")


def _cpuinfo(prefixes: tuple[str, ...]) -> list[str]:
    """The /proc/cpuinfo lines of the first CPU that start with one of ``prefixes`` (none where it is absent)."""
    try:
        lines = CPUINFO.read_text().split("\n\n", 1)[0].splitlines()
    except OSError:
        return []
    return [ln for ln in lines if ln.startswith(prefixes)]


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo where available, else what ``platform`` says)."""
    for line in _cpuinfo(("model name",)):
        return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_id() -> str:
    """CPU model and feature flags (a ``-march=native`` build runs only on the same kind of CPU)."""
    lines = _cpuinfo(("model name", "flags"))
    return "|".join(lines)[:4096] if lines else (platform.processor() or platform.machine())


def user_cache(name: str, override: str) -> Path:
    """Where lbm keeps its cache ``name``: the directory in the variable ``override`` where set, else
    ``$XDG_CACHE_HOME/lbm/<name>`` (``~/.cache`` without it)."""
    env = os.environ.get(override)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lbm" / name


def versions() -> dict[str, str]:
    """Versions of jax, jaxlib and python."""
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", jax.__version__),
            "python": platform.python_version()}


def device_label(device: Any = None) -> str:
    """``platform:device_kind`` of a device (default: the first), e.g. ``cpu:cpu`` or ``gpu:NVIDIA H200``."""
    import jax

    dev = device if device is not None else jax.devices()[0]
    return f"{dev.platform}:{getattr(dev, 'device_kind', '')}".rstrip(":")


def environment() -> dict[str, Any]:
    """Software and hardware of this process: versions, default device, device count, CPU, XLA_FLAGS."""
    import jax

    dev = jax.devices()[0]
    return {
        **versions(),
        "platform": dev.platform,
        "device": str(dev),
        "device_kind": getattr(dev, "device_kind", ""),
        "device_count": jax.device_count(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_model": getattr(dev, "device_kind", None) if dev.platform == "gpu" else None,
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "host_machine": platform.machine(),
    }


def float64_enabled() -> bool:
    """Whether JAX computes in float64 where asked (``jax_enable_x64``) in this process now."""
    import jax

    return bool(jax.config.jax_enable_x64)


def _switch_float64(on: bool) -> None:
    """The one place ``jax_enable_x64`` is switched."""
    import jax

    jax.config.update("jax_enable_x64", on)


def use_precision(precision: str) -> None:
    """Switch JAX's float64 arithmetic on for a ``precision=float64`` run (left on: callers that keep its arrays,
    e.g. :func:`lbm.simulation.prepare`'s); float32 leaves the switch as it is. Scope a whole run with
    :func:`precision_scope`, which puts it back."""
    if precision == "float64" and not float64_enabled():
        _switch_float64(True)


@contextlib.contextmanager
def precision_scope(precision: str | None = None) -> Iterator[None]:
    """Inside: float64 arithmetic on for a ``precision=float64`` run (None: as the block itself asks, through
    :func:`use_precision`); after: ``jax_enable_x64`` as it was before, so that a float32 run that follows a float64
    one in the same process computes as in a fresh process."""
    before = float64_enabled()
    if precision is not None:
        use_precision(precision)
    try:
        yield
    finally:
        if float64_enabled() != before:
            _switch_float64(before)
