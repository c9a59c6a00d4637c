"""The command line: bad input gives one clean line and exit code 2; runs honour the output contract."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lbm.cli import main

REPO = Path(__file__).resolve().parents[1]

BAD_INPUTS = [
    (["grid.nx=0"], "grid.nx"),
    (["grid.ny=-5"], "grid.ny"),
    (["grid.nx=abc"], "grid.nx"),
    (["steps=0"], "steps"),
    (["steps=-3"], "steps"),
    (["case=nope"], "case=nope"),
    (["lattice=d5q99"], "lattice=d5q99"),
    (["collision=mrt7"], "collision=mrt7"),
    (["flow.tau=0.5"], "flow.tau"),
    (["flow.tau=0.3"], "flow.tau"),
    (["flow.reynolds=0"], "flow.reynolds"),
    (["flow.reynolds=-10"], "flow.reynolds"),
    (["flow.u_lattice=0.5"], "flow.u_lattice"),
    (["flow.u_lattice=0"], "flow.u_lattice"),
    (["case.radius=100"], "case.radius"),
    (["case.radius=60", "grid.nx=200"], "case.center"),
    (["case.center=[3,90]"], "case.center"),
    (["case.center=[105,179]"], "case.center"),
    (["case.radius=0"], "case.radius"),
    (["precision=float16"], "precision"),
    (["precision=bf16"], "precision"),
    (["mode=turbo"], "mode"),
    (["engine=turbo"], "engine"),
    (["lattice=d3q19"], "grid.nz"),
    (["grid.nz=8"], "grid.nz"),
    (["output.every=100000"], "output.every"),
    (["no_such_key=1"], "no_such_key"),
    (["case=cavity", "grid.nx=4"], "grid.nx"),
    (["case=poiseuille", "grid.ny=3"], "grid.ny"),
    (["case.inlet=magic"], "case.inlet"),
    (["grid.nx=64,128"], "-m"),
    (["-m", "grid.nx=420,0"], "grid.nx"),
    (["--bogus"], "--bogus"),
    (["case.radus=3"], "case.radus is not a key of case cylinder"),
    (["+case.radus=3"], "case.radus is not a key of case cylinder"),
    (["+no_such_key=1"], "no_such_key is not a run config key"),
    (["grid.nx=1.5"], "grid.nx=1.5 is invalid: expected an integer"),
    (["steps=abc"], "steps=abc"),
    (["--cfg", "job", "grid.nx=abc"], "grid.nx=abc"),
    (["--cfg", "job", "case.radus=3"], "case.radus"),
    (["-m", "case=taylor_green", "grid.nx=16,1.5", "steps=5"], "grid.nx=1.5"),
]


@pytest.mark.parametrize("args,key", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_gives_one_clean_line(args, key, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["run", *args])
    out, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lbm: error: ")
    assert key in lines[0]
    assert "Traceback" not in err + out
    assert not (tmp_path / "outputs").exists(), "nothing may be written for bad input"


@pytest.mark.parametrize("args", [["run", "steps=0"], ["run", "case=nope"], ["frobnicate"]])
def test_bad_input_exit_code_in_a_real_process(args, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lbm", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_cfg_job_prints_the_composed_config_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--cfg", "job", "case=cavity", "grid.nx=40"]) == 0
    out = capsys.readouterr().out
    assert "name: cavity" in out and "nx: 40" in out and "steady_tolerance" in out
    assert not (tmp_path / "outputs").exists()


def test_a_missing_command_module_is_reported_as_a_broken_install():
    from lbm.cli import lazy_command
    from lbm.errors import LbmError

    with pytest.raises(LbmError, match="lbm.no_such_module is missing: the lbm installation is broken"):
        lazy_command("lbm.no_such_module")([])


def test_error_messages_name_value_and_range(capsys):
    main(["run", "flow.u_lattice=0.4"])
    err = capsys.readouterr().err
    assert "0.4" in err and "Mach" in err and "0.289" in err
    main(["run", "case=nope"])
    err = capsys.readouterr().err
    assert all(name in err for name in ("cavity", "cylinder", "poiseuille", "taylor_green"))


def test_mild_mach_is_a_warning_not_an_error(tmp_path, capsys):
    code = main(["run", "case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=10", "flow.u_lattice=0.1",
                 "output.plots=false", f"hydra.run.dir={tmp_path / 'r'}"])
    assert code == 0
    log = (tmp_path / "r" / "lbm.log").read_text()
    assert "Mach 0.173" in log and "WARNING" in log


CONTRACT_KEYS = {"case", "lattice", "collision", "mode", "precision", "grid", "steps", "device", "jax", "jaxlib",
                 "compile_time_s", "wall_time_s", "mlups", "mass_rel_drift", "tau", "nu", "u_lattice", "status"}


def test_cylinder_run_writes_the_contract_files(tmp_path):
    run_dir = tmp_path / "run"
    code = main(["run", "grid.nx=100", "grid.ny=45", "steps=300", f"hydra.run.dir={run_dir}"])
    assert code == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert CONTRACT_KEYS <= metrics.keys()
    assert {"cd_mean", "cl_amplitude", "strouhal"} <= metrics.keys()
    assert metrics["status"] == "completed" and metrics["steps"] == 300 and metrics["grid"] == [100, 45]
    assert metrics["tau"] == pytest.approx(3 * metrics["nu"] + 0.5)
    assert metrics["nu"] == pytest.approx(0.04 * 5 / 150)
    assert metrics["mlups"] > 0 and metrics["compile_time_s"] > 0
    with np.load(run_dir / "fields.npz") as z:
        assert z["rho"].shape == (100, 45) and z["u"].shape == (2, 100, 45)
        assert z["solid"].dtype == bool and z["solid"].sum() > 0
        assert np.isfinite(z["u"]).all()
    header, *rows = (run_dir / "forces.csv").read_text().splitlines()
    assert header == "step,fx,fy,cd,cl" and len(rows) == 300
    for png in ("velocity_magnitude", "vorticity", "forces"):
        assert (run_dir / "plots" / f"{png}.png").stat().st_size > 10_000
    assert (run_dir / ".hydra" / "config.yaml").exists() and (run_dir / "lbm.log").exists()
    log = (run_dir / "lbm.log").read_text()
    assert "tau=" in log and "Mach=" in log and "cells=" in log


def test_run_refuses_to_overwrite_results(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["run", "case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=5", "output.plots=false",
            f"hydra.run.dir={run_dir}"]
    assert main(args) == 0
    before = (run_dir / "metrics.json").read_bytes()
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (run_dir / "metrics.json").read_bytes() == before


@pytest.mark.parametrize("case,files", [
    pytest.param("cavity", ["profiles.csv", "plots/profiles.png"], marks=pytest.mark.slow),
    pytest.param("poiseuille", ["profiles.csv", "plots/profile.png"], marks=pytest.mark.slow),
    ("taylor_green", ["decay.csv", "plots/decay.png"]),
])
def test_case_outputs(case, files, tmp_path):
    run_dir = tmp_path / case
    grid = ["grid.nx=20", "grid.ny=20"] if case != "poiseuille" else []
    assert main(["run", f"case={case}", *grid, "steps=50", f"hydra.run.dir={run_dir}"]) == 0
    for name in ["metrics.json", "fields.npz", "plots/velocity_magnitude.png", "plots/vorticity.png", *files]:
        assert (run_dir / name).exists(), name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["case"] == case


@pytest.mark.slow
def test_multirun_sweep_over_grid_sizes(tmp_path):
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "lbm", "run", "-m", "case=taylor_green", "grid.nx=16,24", "grid.ny=16", "steps=10",
         "output.plots=false"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    metrics = sorted((tmp_path / "outputs" / "multirun").glob("*/*/*/metrics.json"))
    assert len(metrics) == 2
    assert sorted(json.loads(m.read_text())["grid"][0] for m in metrics) == [16, 24]


@pytest.mark.parametrize("case,expected", [
    ("poiseuille", lambda h, nu, u: math.ceil(1.5 * h**2 / nu)),
    ("cavity", lambda h, nu, u: math.ceil(100 * h / u)),
])
def test_auto_steps_follow_the_documented_rule(case, expected):
    from conftest import run_config

    from lbm.simulation import make_case

    run = run_config(f"case={case}", "grid.nx=20", "grid.ny=20", "steps=auto")
    assert run.steps is None
    made = make_case(run)
    nu = made.run.u_lattice * 18 / made.run.reynolds
    assert made.run.steps == expected(18, nu, made.run.u_lattice)


def test_steps_must_be_an_integer_or_auto(capsys):
    assert main(["run", "steps=soon"]) == 2
    assert "steps=soon" in capsys.readouterr().err
