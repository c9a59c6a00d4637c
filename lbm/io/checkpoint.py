"""Checkpoints: the full simulation state in one .npz, written atomically, the last few kept."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from lbm.errors import LbmError

FORMAT = "lbm-checkpoint-1"
DEVIATIONS = "f - w"
"""The ``populations`` a checkpoint records: deviations from the rest weights, as the engines hold them
(lbm.kernels.equilibrium). A checkpoint without the key holds the populations f themselves (ABSOLUTE)."""
ABSOLUTE = "f"
REPRESENTATIONS = (DEVIATIONS, ABSOLUTE)
COMPATIBLE_KEYS = ("case", "lattice", "grid", "precision", "collision", "tau", "u_lattice", "case_params", "trt_magic")
"""What must match between a checkpoint and the run that resumes it."""


GLOB = "checkpoint_*.npz"
"""Finished checkpoints (a partial write has another name, see partial_path)."""


def checkpoint_path(directory: Path, step: int) -> Path:
    """The file name of the checkpoint at ``step``."""
    return directory / f"checkpoint_{step:010d}.npz"


def save_checkpoint(
    directory: Path,
    step: int,
    f: np.ndarray,
    identity: dict[str, Any],
    state: dict[str, np.ndarray],
    keep: int,
) -> Path:
    """Write populations (deviations f - w, :data:`DEVIATIONS`), step, run identity and accumulated state; keep the
    newest ``keep`` checkpoints."""
    directory.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(directory, step)
    tmp = partial_path(path)
    meta = {"format": FORMAT, "step": int(step), "populations": DEVIATIONS, "identity": identity}
    arrays = {f"state/{k}": np.asarray(v) for k, v in state.items()}
    with open(tmp, "wb") as fh:
        np.savez(fh, f=np.asarray(f), meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    for old in sorted(directory.glob(GLOB))[:-keep] if keep > 0 else []:
        old.unlink()
    for stale in directory.glob(".checkpoint_*.partial"):  # left by a write that was killed midway
        stale.unlink(missing_ok=True)
    return path


def partial_path(path: Path) -> Path:
    """Where a checkpoint is written before its atomic rename: hidden, and not matching GLOB."""
    return path.with_name(f".{path.stem}.partial")


def find_checkpoint(path: Path) -> Path:
    """The checkpoint file named by ``path``: a file, a run directory, or its checkpoints/ directory (newest)."""
    path = Path(path).expanduser()
    if path.is_file():
        return path
    for directory in (path / "checkpoints", path):
        if directory.is_dir():
            found = sorted(directory.glob(GLOB))
            if found:
                return found[-1]
    if not path.exists():
        raise LbmError(f"checkpoint.resume={path}: no such file or directory")
    raise LbmError(f"checkpoint.resume={path}: no checkpoint_*.npz found there (nor in its checkpoints/)")


READ_ERRORS = (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, EOFError, UnicodeDecodeError)
"""What numpy, zipfile and json raise for a file that is not a readable checkpoint."""


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint: f, step, identity, state arrays and what f holds (``populations``: one of
    :data:`REPRESENTATIONS`); a clear LbmError if it is not a readable one."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = _meta(z)
            state = {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith("state/")}
            return {"f": z["f"], "step": int(meta["step"]), "identity": meta["identity"], "state": state, "path": path,
                    "populations": meta.get("populations", ABSOLUTE)}
    except READ_ERRORS as exc:
        raise unreadable(path, exc) from None


def read_header(path: Path) -> dict[str, Any]:
    """A checkpoint's step, identity, what its populations hold, their shape and dtype, without reading the arrays."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = _meta(z)
        with zipfile.ZipFile(path) as archive, archive.open("f.npy") as fh:
            major, _ = np.lib.format.read_magic(fh)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(fh)
        return {"step": int(meta["step"]), "identity": meta["identity"], "shape": tuple(shape), "dtype": np.dtype(dtype),
                "populations": meta.get("populations", ABSOLUTE), "path": path}
    except READ_ERRORS as exc:
        raise unreadable(path, exc) from None


def _meta(z: Any) -> dict[str, Any]:
    """The metadata record of an open checkpoint archive (ValueError when it is not lbm's)."""
    if "meta" not in z.files or "f" not in z.files:
        raise ValueError("it holds no populations and metadata")
    meta = json.loads(bytes(z["meta"]).decode())
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"unknown format {meta.get('format') if isinstance(meta, dict) else meta!r}")
    if not isinstance(meta.get("identity"), dict) or not isinstance(meta.get("step"), int):
        raise ValueError("its metadata has no step and run identity")
    if meta.get("populations", ABSOLUTE) not in REPRESENTATIONS:
        raise ValueError(f"its populations are {meta['populations']!r}, which this version does not know "
                         f"(it reads {' or '.join(map(repr, REPRESENTATIONS))}): a newer lbm wrote it")
    return meta


def unreadable(path: Path, exc: BaseException) -> LbmError:
    """The one-line error for a file that is not a readable checkpoint (numpy's own advice left out)."""
    if isinstance(exc, ValueError) and any(k in str(exc) for k in ("format", "holds no", "metadata", "populations are")):
        why = str(exc)
    elif isinstance(exc, (zipfile.BadZipFile, EOFError)) or "pickle" in str(exc):
        why = "it is not an .npz archive of arrays, or it is truncated"
    elif isinstance(exc, OSError) and exc.strerror:
        why = exc.strerror.lower()
    else:
        why = "its contents are damaged"
    return LbmError(f"checkpoint.resume={path}: not a readable lbm checkpoint ({why}); give a checkpoint_*.npz that "
                    "lbm wrote, or its run directory")


def check_compatible(saved: dict[str, Any], current: dict[str, Any], path: Path) -> None:
    """Refuse to resume when the case, lattice, grid, precision or physics differ."""
    for key in COMPATIBLE_KEYS:
        a, b = saved.get(key), current.get(key)
        if isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
            continue
        if a != b:
            raise LbmError(
                f"cannot resume from {path}: it has {key}={_show(a)} but this run has {key}={_show(b)}; "
                f"use the same {key} (or start a new run without checkpoint.resume)"
            )


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "x".join(map(str, value)) if all(isinstance(v, int) for v in value) else str(value)
    return str(value)
