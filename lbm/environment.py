"""The machine and software a process runs on: device, jax/jaxlib/python versions, CPU model, XLA_FLAGS.

One probe for ``bench.json`` (its ``environment``) and ``metrics.json`` (device and versions);
:func:`cpu_id` is what a ``-march=native`` build may be keyed on.
"""

from __future__ import annotations

import os
import platform
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
