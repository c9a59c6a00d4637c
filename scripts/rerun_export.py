#!/usr/bin/env python3
"""Re-run and time an lbm export bundle with nothing but jax, numpy and flatbuffers installed.

usage: python scripts/rerun_export.py BUNDLE_DIR [--repeats N]

Loads manifest.json, deserializes every exported stage and fused step, feeds inputs of the
recorded shapes (floats = 1/Q, a resting fluid; integers = 0; booleans = False) and prints the
median wall time of each (host clock around a blocking call), plus the JAX version, so the same
bundle can be timed under two JAX versions side by side.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax import export


def inputs_for(exp: "export.Exported", q: int) -> tuple:
    """Concrete (args, kwargs) for the exported function's inputs."""
    leaves = []
    for aval in exp.in_avals:
        dtype = np.dtype(aval.dtype)
        if dtype.kind == "f":
            leaves.append(np.full(aval.shape, 1.0 / q, dtype))
        elif dtype.kind == "b":
            leaves.append(np.zeros(aval.shape, dtype))
        else:
            leaves.append(np.zeros(aval.shape, dtype))
    return jax.tree_util.tree_unflatten(exp.in_tree, leaves)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--repeats", type=int, default=20)
    ns = parser.parse_args()
    manifest_path = ns.bundle / "manifest.json"
    if not manifest_path.is_file():
        print(f"rerun_export: {manifest_path} not found", file=sys.stderr)
        return 2
    manifest = json.loads(manifest_path.read_text())
    q = {"d2q9": 9, "d3q19": 19, "d3q27": 27}.get(manifest.get("lattice"), 9)
    print(f"jax {jax.__version__} on {jax.devices()[0]}; bundle made with jax {manifest['jax']}, "
          f"grid {manifest['grid']} {manifest['dtype']}")
    print(f"{'entry':<16} {'median ms':>10} {'min ms':>10}")
    for entry in manifest["entries"]:
        exp = export.deserialize(bytearray((ns.bundle / entry["file"]).read_bytes()))
        args, kwargs = jax.tree_util.tree_map(jax.numpy.asarray, inputs_for(exp, q))
        jax.block_until_ready(exp.call(*args, **kwargs))  # compile
        times = []
        for _ in range(ns.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(exp.call(*args, **kwargs))
            times.append(time.perf_counter() - t0)
        print(f"{entry['name']:<16} {statistics.median(times) * 1e3:>10.3f} {min(times) * 1e3:>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
