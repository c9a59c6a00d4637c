"""scripts/jax_versions_table.py (the structural tables of docs/studies.md, "JAX 0.10.2 against 0.12.0.1") and the
argument checks of scripts/compare_jax_versions.sh."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import jax
from helpers.paths import REPO
from helpers.scripts import load_script

table_script = load_script("jax_versions_table")


def record(ynn_us: float, kernels: int) -> dict:
    """A bench record with the fields the table reads."""
    names = [f"loop_fusion.{i}" for i in range(kernels)]
    return {
        "case": "periodic", "lattice": "d2q9", "grid": [64, 64], "variant": "xla", "precision": "float32",
        "collision": "bgk", "mlups": {"median": 10.0},
        "fusion_kinds": {"kLoop": kernels, "__ynn_fusion": 1},
        "special_fusions": [{"fusion": "ynn_fusion", "kind": "__ynn_fusion",
                             "op_name": "jit(chunk)/while/body/timestep/equilibrium/reduce_sum"}],
        "evidence": {"kernels_per_step": kernels + 1, "steps_per_loop_body": 1, "bytes_per_cell_step": 100.0,
                     "cost_bytes_per_cell_step": 120.0, "cost_flops_per_cell_step": 50.0,
                     "kernels": [{"name": n, "kind": "kLoop", "stages": ["stream"], "bytes_per_cell_step": 8.0}
                                 for n in names]
                     + [{"name": "ynn_fusion", "kind": "kCustom", "stages": ["equilibrium"],
                         "bytes_per_cell_step": 16.0}]},
        "kernel_times": {"total_us_per_step": ynn_us + 100.0 * kernels,
                         "kernels": {"ynn_fusion": {"us_per_step": ynn_us, "share": 0.5},
                                     **{n: {"us_per_step": 100.0, "share": 0.1} for n in names},
                                     "while.1": {"us_per_step": 7.0, "share": 0.01}}},
    }


def test_table_sets_the_two_sides_side_by_side() -> None:
    lines = table_script.table(record(5000.0, 3), record(500.0, 4), ("jax A", "jax B"), 2)
    text = "\n".join(lines)
    assert lines[0] == "### periodic 64x64 d2q9 bgk xla float32"
    assert "| kernels per step | 4.0 | 5.0 |" in text
    assert "| device µs per step, __ynn_fusion (of the 25 costliest kernels) | 5000 | 500 |" in text
    assert "| device µs per step, kLoop (of the 25 costliest kernels) | 300 | 400 |" in text
    assert f"| device µs per step, {table_script.OTHER} (of the 25 costliest kernels) | 7 | 7 |" in text
    assert "`ynn_fusion` (timestep/equilibrium/reduce_sum)" in text  # the op it comes from, without the call path
    assert "| costliest kernel 1 | `ynn_fusion` __ynn_fusion equilibrium: 5000 µs (50%) |" in text


def test_read_takes_plain_and_gzipped_files(tmp_path: Path) -> None:
    doc = {"records": [record(1.0, 1)]}
    plain, packed = tmp_path / "bench.json", tmp_path / "bench.json.gz"
    plain.write_text(json.dumps(doc))
    packed.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert table_script.read(str(plain)) == table_script.read(str(packed)) == doc


def test_compare_jax_versions_refuses_an_environment_of_another_version() -> None:
    """--python-a names an existing environment; one whose jax is not the version asked for stops before any bench."""
    run = subprocess.run(["bash", "scripts/compare_jax_versions.sh", "--python-a", sys.executable, "--python-b",
                          sys.executable, "0.0.1", jax.__version__], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert f"has jax {jax.__version__}, not 0.0.1" in run.stderr
    bad = subprocess.run(["bash", "scripts/compare_jax_versions.sh", "--no-such-option", "0.0.1", "0.0.2"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage:" in bad.stderr
