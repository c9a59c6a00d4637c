"""python -m lbm compare: regression verdicts that respect the noise of the repeats."""

import copy
import json
import os
import subprocess
import sys

import pytest

from lbm.cli import main


def bench_doc(values, jax_version="0.12.0.1", stages=None, special=None, kernels=None):
    med = sorted(values)[len(values) // 2]
    rec = {"case": "periodic", "lattice": "d2q9", "grid": [256, 256], "variant": "xla", "precision": "float32",
           "collision": "bgk", "engine": "xla", "fusions": 12, "custom_calls": 0,
           "fusion_kinds": {"kLoop": 12}, "special_fusions": special or [],
           "mlups": {"median": med, "min": min(values), "max": max(values), "values": list(values)},
           "compile_s": 0.5}
    if stages:
        rec["stages"] = stages
    if kernels:
        rec["kernel_times"] = {"kernels": kernels}
    return {"environment": {"jax": jax_version, "XLA_FLAGS": ""}, "bandwidth": {"bandwidth_gbs": 40.0},
            "records": [rec]}


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_identical_runs_do_not_regress(tmp_path, capsys):
    doc = bench_doc([100, 101, 99, 100.5, 99.5])
    assert main(["compare", write(tmp_path, "a.json", doc), write(tmp_path, "b.json", doc)]) == 0
    assert "no regression" in capsys.readouterr().out


def test_noise_is_not_a_regression(tmp_path):
    a = bench_doc([100, 92, 108, 97, 103])
    b = bench_doc([96, 90, 104, 95, 101])  # -4% median, inside the spread of both runs
    assert main(["compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)]) == 0


def test_a_clear_slowdown_is_flagged_with_its_cause(tmp_path, capsys):
    a = bench_doc([100, 101, 99, 100.5, 99.5], stages={"stream": {"median_ms": 1.0}, "collide": {"median_ms": 2.0}},
                  kernels={"fusion.3": {"us_per_step": 100.0, "share": 0.5}, "ynn_fusion": {"us_per_step": 10.0, "share": 0.05}})
    b = bench_doc([70, 71, 69, 70.5, 69.5], jax_version="0.10.2",
                  stages={"stream": {"median_ms": 1.0}, "collide": {"median_ms": 3.1}},
                  special=[{"fusion": "ynn_fusion", "kind": "__ynn_fusion", "op_name": "jit(chunk)/macroscopic/reduce_sum"}],
                  kernels={"fusion.3": {"us_per_step": 101.0, "share": 0.3}, "ynn_fusion": {"us_per_step": 140.0, "share": 0.6}})
    out_md = tmp_path / "report.md"
    assert main(["compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b), "--out", str(out_md)]) == 1
    text = capsys.readouterr().out
    assert "**SLOWER**" in text and "-30.0%" in text
    assert "| jax | 0.12.0.1 | 0.10.2 |" in text
    assert "| collide | 2.000 | 3.100 | +55.0% |" in text
    assert "Largest change of one kernel: `ynn_fusion`, __ynn_fusion from `macroscopic/reduce_sum`" in text
    assert "fusion_kinds" not in text or "__ynn_fusion" in text
    assert out_md.read_text() == text.rstrip("\n") or out_md.read_text().strip() == text.strip()


def test_faster_is_reported_but_not_a_failure(tmp_path, capsys):
    a = bench_doc([100, 101, 99])
    b = bench_doc([150, 151, 149])
    assert main(["compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)]) == 0
    assert "faster" in capsys.readouterr().out


@pytest.mark.parametrize("content", ["", "{not json", json.dumps({"records": []}), json.dumps([1, 2])])
def test_bad_input_exits_2(tmp_path, content, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = write(tmp_path, "good.json", bench_doc([1, 2, 3]))
    assert main(["compare", str(bad), good]) == 2
    assert main(["compare", good, str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("lbm: error: ") for e in err)


def test_configurations_only_in_one_file_are_listed(tmp_path, capsys):
    a = bench_doc([100, 100, 100])
    b = copy.deepcopy(a)
    b["records"][0]["grid"] = [512, 512]
    assert main(["compare", write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)]) == 0
    assert "Not compared" in capsys.readouterr().out


def run_bench(tmp_path, name, xla_flags):
    env = {**os.environ, "XLA_FLAGS": xla_flags}
    proc = subprocess.run([sys.executable, "-m", "lbm", "bench", "cases=[periodic]", "variants=[xla]",
                           "grid.nx=96", "grid.ny=96", "repeats=5", "min_time_s=0.15", "bandwidth.enabled=false",
                           "kernel_profile=4", f"hydra.run.dir={tmp_path / name}"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return str(tmp_path / name / "bench.json")


def test_a_real_compiler_made_slowdown_is_caught(tmp_path, capsys):
    """Without LLVM's optimisations (an XLA flag) the same step is slower: compare must say so and show the flag."""
    base = run_bench(tmp_path, "base", "")
    slow = run_bench(tmp_path, "slow", "--xla_backend_optimization_level=0")
    assert main(["compare", base, slow]) == 1
    out = capsys.readouterr().out
    assert "**SLOWER**" in out and "--xla_backend_optimization_level=0" in out
