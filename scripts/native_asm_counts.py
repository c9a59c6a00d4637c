"""Count what the compiler made of the native kernel's cell body per collision: vector ops, divisions, stack spills.

    .venv/bin/python scripts/native_asm_counts.py [--lattice d3q27] [--storage float32] [KIND ...]

For each collision kind (default: bgk mrt regularized recursive_regularized kbc) the generated header and
kernels.cc are compiled to assembly (``g++ -S``) with the flags the kernel cache builds with
(lbm.engines.native.build.cxxflags), and the assembly of the whole library is counted: instructions on 512-bit
registers, vector divisions, and stores of vector registers to the stack (spills). The counts cover every
kernel of the library (periodic rows, boundary cells, ...), so compare them between kinds, not with a cell count.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def count(asm: str) -> dict[str, int]:
    """Counts in an assembly listing: zmm instructions, vector divisions, vector stores to the stack."""
    lines = asm.splitlines()
    spill = re.compile(r"vmov(aps|ups)\s+%zmm\d+, -?\d*\(%r[sb]p\)")
    return {"zmm_instructions": sum("%zmm" in ln for ln in lines),
            "vector_divisions": sum(bool(re.search(r"vdivp[sd]\s", ln)) for ln in lines),
            "stack_stores": sum(bool(spill.search(ln)) for ln in lines)}


def assembly(lattice: str, storage: str, kind: str) -> str:
    """The assembly of the native library for one collision kind (bgk: no collision kernel of its own)."""
    import jax

    from lbm.engines.native import build
    from lbm.engines.native.codegen import KernelSpec, header
    from lbm.lattice import LATTICES

    spec = KernelSpec(LATTICES[lattice], storage, False, False, "", "" if kind == "bgk" else kind)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "lbm_generated.h").write_text(header(spec))
        (Path(tmp) / "kernels.cc").write_text(build.kernel_source())
        flags = [f for f in build.cxxflags() if f != "-shared"]
        cmd = [build.compiler() or "c++", *flags, f"-I{jax.ffi.include_dir()}", "-I.", "-S", "kernels.cc", "-o", "k.s"]
        subprocess.run(cmd, cwd=tmp, check=True, capture_output=True)
        return (Path(tmp) / "k.s").read_text()


def main(argv: list[str]) -> int:
    """Print one row of counts per kind."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lattice", default="d3q27")
    ap.add_argument("--storage", default="float32")
    ap.add_argument("kinds", nargs="*", default=["bgk", "mrt", "regularized", "recursive_regularized", "kbc"])
    args = ap.parse_args(argv)
    print(f"| {args.lattice} {args.storage} | zmm instructions | vector divisions | vector stores to the stack |")
    print("|---|---|---|---|")
    for kind in args.kinds:
        c = count(assembly(args.lattice, args.storage, kind))
        print(f"| {kind} | {c['zmm_instructions']} | {c['vector_divisions']} | {c['stack_stores']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
