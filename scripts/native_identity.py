"""Bitwise check of the native engine across kernel changes: a case's final fields and drag history.

    .venv/bin/python scripts/native_identity.py save REF.npz [overrides...]
    .venv/bin/python scripts/native_identity.py check REF.npz [overrides...]

Runs ``lbm.run(["engine=native", *overrides])`` (default: the cylinder case, 3000 steps) in a temporary run
directory and saves (save) or compares bit for bit (check) the final fields and every column
of forces.csv (the drag coefficient ``cd`` among them). ``check`` exits 1 and names the first difference.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

DEFAULT = ["case=cylinder", "steps=3000"]


def arrays(overrides: list[str]) -> dict[str, np.ndarray]:
    """The run's final fields (fields.npz) and its force history (forces.csv: fx, fy, cd, cl per step), by name."""
    import lbm

    with tempfile.TemporaryDirectory() as tmp:
        lbm.run(["engine=native", *(overrides or DEFAULT)], run_dir=tmp)
        out = dict(np.load(Path(tmp) / "fields.npz"))
        forces = Path(tmp) / "forces.csv"
        if forces.exists():  # 10 significant digits: every float32 value round-trips
            table = np.genfromtxt(forces, delimiter=",", names=True)
            out.update({f"forces.{name}": table[name] for name in table.dtype.names})
    return out


def main(argv: list[str]) -> int:
    """save | check REF.npz [overrides...]."""
    if len(argv) < 2 or argv[0] not in ("save", "check"):
        print("usage: native_identity.py save|check REF.npz [overrides...]", file=sys.stderr)
        return 2
    mode, path, overrides = argv[0], argv[1], argv[2:]
    got = arrays(overrides)
    if mode == "save":
        np.savez(path, **got)
        print(f"saved {len(got)} arrays to {path}: {sorted(got)}")
        return 0
    ref = dict(np.load(path))
    for name in sorted(set(ref) | set(got)):
        if name not in ref or name not in got:
            print(f"DIFFERENT: {name} present on one side only")
            return 1
        if ref[name].shape != got[name].shape or ref[name].tobytes() != got[name].tobytes():
            print(f"DIFFERENT: {name}")
            return 1
    print(f"bitwise identical: {len(ref)} arrays ({', '.join(sorted(ref))})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
