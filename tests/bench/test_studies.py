"""Studies of how JAX runs the solver: batching strategies, compile vs run, export bundles."""

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers.paths import REPO

from lbm.bench.batching import count_fusions, findings, run_study
from lbm.cli import main


@pytest.mark.slow
def test_batching_strategies_agree_with_single_runs(tmp_path):
    result = run_study([1, 3], 16, 8, 1, tmp_path, progress=lambda s: None)
    recs = result["records"]
    assert {(r["strategy"], r["members"]) for r in recs} == {(s, b) for s in ("loop", "map", "vmap") for b in (1, 3)}
    for r in recs:
        assert r["max_abs_diff_vs_single"] < 1e-5, r
        assert r["compile_s"] > 0 and r["mlups"] > 0 and r["peak_memory_bytes"] > 0
    by = {(r["strategy"], r["members"]): r for r in recs}
    # the Python loop unrolls members into the program; map and vmap keep one member's program
    assert by[("loop", 3)]["jaxpr_eqns"] > 2.5 * by[("loop", 1)]["jaxpr_eqns"]
    assert by[("map", 3)]["jaxpr_eqns"] <= by[("map", 1)]["jaxpr_eqns"] + 5
    assert by[("vmap", 3)]["jaxpr_eqns"] <= by[("vmap", 1)]["jaxpr_eqns"] + 5
    for name in ("batching.json", "batching.csv", "compile_time_vs_B.png", "throughput_vs_B.png"):
        assert (tmp_path / name).exists()
    assert sorted(p.name for p in (tmp_path / "jaxpr").glob("jaxpr_*")) == [
        "jaxpr_loop_B3.txt", "jaxpr_map_B3.txt", "jaxpr_vmap_B3.txt"]
    assert any("loop: from B=1 to B=3" in line for line in findings(recs))


def test_count_fusions_reads_hlo():
    hlo = "ENTRY e {\n  %a = f32[4] fusion(%p), kind=kLoop\n  ROOT %b = f32[4] fusion(%a), kind=kLoop\n}"
    assert count_fusions(hlo) == 2


def test_study_cli_errors_are_one_line(capsys):
    assert main(["study", "batching", "--members", "0"]) == 2
    assert main(["study", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("lbm: error: ") for e in err)


@pytest.mark.slow
def test_export_bundle_reruns_without_lbm(tmp_path):
    out = tmp_path / "bundle"
    assert main(["study", "export", "grid.nx=60", "grid.ny=27", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    names = [e["name"] for e in manifest["entries"]]
    assert names == ["outflow", "macroscopic", "equilibrium", "inlet", "collide", "bounce_back", "forces", "stream",
                     "fused[10]"]
    assert manifest["entries"][0]["inputs"][0] == [[9, 60, 27], "float32"]
    # the rerun script imports nothing from lbm: run it with lbm hidden from the import path
    code = ("import sys, runpy; sys.modules['lbm'] = None; sys.argv = ['rerun', sys.argv[1], '--repeats', '2']; "
            f"runpy.run_path({str(REPO / 'scripts' / 'rerun_export.py')!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    timed = [ln.split()[0] for ln in proc.stdout.splitlines()[2:]]
    assert timed == names


def test_exported_stage_computes_what_the_stage_computes(tmp_path):
    import jax
    from helpers.runs import run_config
    from jax import export

    from lbm.bench.export import write_bundle
    from lbm.kernels.collisions import collide
    from lbm.simulation import make_case

    setup = make_case(run_config("case=taylor_green", "grid.nx=12", "grid.ny=10")).setup()
    write_bundle(setup, tmp_path)
    exp = export.deserialize(bytearray((tmp_path / "stage_collide.jaxexport").read_bytes()))
    rng = np.random.default_rng(0)
    f = jax.numpy.asarray(rng.random((9, 12, 10), dtype=np.float32))
    feq = jax.numpy.asarray(rng.random((9, 12, 10), dtype=np.float32))
    u = jax.numpy.asarray(0.01 * rng.random((2, 12, 10), dtype=np.float32))
    rho = jax.numpy.sum(f, axis=0)
    # the stage takes and returns the leaves of the step state: f, t, rho, u, feq (then collided, post)
    out = exp.call(f, jax.numpy.int32(0), rho, u, feq)
    direct = jax.jit(lambda f, feq, u: collide(f, feq, u, setup.lattice, setup.omega_plus, setup.omega_minus))(f, feq, u)
    assert len(out) == 7
    np.testing.assert_allclose(np.asarray(out[5]), np.asarray(direct), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(out[0]), np.asarray(f))


@pytest.mark.slow
def test_compile_study_small(tmp_path):
    assert main(["study", "compile", "--grids", "16,32", "--steps", "1,5", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "compile.json").read_text())
    assert [x["grid"] for x in result["vs_grid"]] == [[16, 16], [32, 32]]
    pc = result["persistent_cache"]
    assert pc["cache_files"] > 0
    # the cold process filled the cache, the warm one found every executable there (its speed-up is the study's)
    assert pc["off"]["new_cache_files"] == 0 and pc["cold"]["new_cache_files"] == pc["cache_files"]
    assert pc["warm"]["new_cache_files"] == 0
    assert set(result["stages_cylinder"]) == {"outflow", "macroscopic", "equilibrium", "inlet", "collide",
                                              "bounce_back", "forces", "stream"}
    assert "skipped" in (tmp_path / "compile.md").read_text()


@pytest.mark.slow
def test_validate_command_reports_and_exits_by_result(tmp_path, capsys):
    assert main(["validate", "--case", "poiseuille", "--out", str(tmp_path / "v")]) == 0
    data = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert [c["check"] for c in data["checks"]] == ["poiseuille_parabola", "poiseuille_halfway_exact"]
    assert all(c["passed"] for c in data["checks"])
    assert "2/2 checks passed" in (tmp_path / "v" / "validation.md").read_text()
    # a configuration that cannot meet the bound (too coarse, too few steps) fails with exit code 1
    assert main(["validate", "--case", "poiseuille", "steps=50", "--out", str(tmp_path / "w")]) == 1
    assert "**FAIL**" in (tmp_path / "w" / "validation.md").read_text()
    assert main(["validate", "--case", "nope"]) == 2
