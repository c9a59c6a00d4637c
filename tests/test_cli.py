"""The command line: bad input gives one clean line and exit code 2; runs honour the output contract."""

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import REPO

from lbm.cli import main

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
    (["grid.nw=3"], "(did you mean grid.n"),
    (["flow.reynold=3"], "(did you mean flow.reynolds?)"),
    (["nx=30"], "(did you mean grid.nx?)"),
    (["case.radus=3"], "(did you mean case.radius?)"),
    (["case=cavty"], "(did you mean cavity?)"),
    (["--multrun"], "(did you mean --multirun?)"),
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


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (its path relative to root) and the SHA-256 of its bytes."""
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


TG = ["case=taylor_green", "grid.nx=16", "grid.ny=16", "output.plots=false"]


def test_run_refuses_to_overwrite_results(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["run", *TG, "steps=5", f"hydra.run.dir={run_dir}"]
    assert main(args) == 0
    before = tree(tmp_path)
    assert main(args) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert tree(tmp_path) == before


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A finished 16x16 Taylor-Green run of 20 steps with checkpoints at 10 and 20, in its own hydra.run.dir."""
    run_dir = tmp_path_factory.mktemp("ckpt") / "X"
    assert main(["run", *TG, "steps=20", "checkpoint.every=10", f"hydra.run.dir={run_dir}"]) == 0
    return run_dir


def test_a_refused_run_leaves_every_file_byte_identical(checkpointed, capsys):
    """Another case into the same hydra.run.dir, and the Ctrl-C hint followed literally (the same overrides plus
    checkpoint.resume), are refused without rewriting .hydra/ or the log."""
    root = checkpointed.parent
    before = tree(root)
    assert main(["run", "case=cavity", "grid.nx=18", "grid.ny=18", "steps=20", f"hydra.run.dir={checkpointed}"]) == 2
    assert main(["run", *TG, "steps=40", f"hydra.run.dir={checkpointed}", f"checkpoint.resume={checkpointed}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("refusing to overwrite: choose another hydra.run.dir" in line for line in err)
    assert tree(root) == before


REFUSED_BEFORE_HYDRA = [
    (["parallel.devices=64", "grid.nx=128"], "parallel.devices=64"),
    (["precision=float64"], "precision=float32 but this run has precision=float64"),
    (["case=cavity"], "case=taylor_green but this run has case=cavity"),
    (["grid.nx=20"], "grid=16x16 but this run has grid=20x16"),
    (["steps=20"], "it is at step 20 and steps=20"),
    (["lattice=d3q19", "grid.nz=4"], "lattice=d2q9 but this run has lattice=d3q19"),
    (["collision=trt"], "collision=bgk but this run has collision=trt"),
]


@pytest.mark.parametrize("extra,message", REFUSED_BEFORE_HYDRA, ids=[" ".join(e) for e, _ in REFUSED_BEFORE_HYDRA])
def test_devices_and_resume_mismatches_are_refused_before_hydra(checkpointed, extra, message, tmp_path, capsys,
                                                               monkeypatch):
    def hydra_started(*args):
        raise AssertionError("Hydra started: the run directory would exist")

    monkeypatch.setattr("lbm.cli.run_hydra", hydra_started)
    monkeypatch.setattr(importlib.import_module("lbm.simulation.start"), "engine_for", hydra_started)
    monkeypatch.chdir(tmp_path)
    resume = [] if extra[0].startswith("parallel") else [f"checkpoint.resume={checkpointed}"]
    code = main(["run", *TG, "steps=40", *extra, *resume, f"hydra.run.dir={tmp_path / 'new'}"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_into_a_sweep_with_results_is_refused_before_hydra(tmp_path, capsys):
    """The fast lane's multirun: two jobs in hydra.sweep.dir/<job>; the same sweep again changes no file."""
    args = ["run", "-m", *TG, "grid.nx=12,16", "steps=5", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    assert main(args) == 0
    grids = [json.loads((tmp_path / "sweep" / str(job) / "metrics.json").read_text())["grid"] for job in (0, 1)]
    assert grids == [[12, 16], [16, 16]]
    before = tree(tmp_path)
    assert main(args) == 2
    assert f"run directory {tmp_path / 'sweep' / '0'} already holds results" in capsys.readouterr().err
    assert tree(tmp_path) == before


def test_default_run_directories_are_fresh_within_one_second(tmp_path, monkeypatch):
    """Hydra names a run directory by the second; two runs started in the same second get two directories."""
    import datetime

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2030, 1, 2, 3, 4, 5)

    monkeypatch.setattr(datetime, "datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    first = tmp_path / "outputs" / "2030-01-02" / "03-04-05"
    first.mkdir(parents=True)  # a run that started in this second and has not written its results yet
    assert main(["run", *TG, "steps=5"]) == 0
    assert list(first.iterdir()) == []
    assert json.loads((first.with_name("03-04-05-1") / "metrics.json").read_text())["steps"] == 5


def _write_npy_object(path: Path) -> None:
    np.save(path, np.array([{"not": "a mask"}], dtype=object), allow_pickle=True)


BAD_FILES = [
    ("case.mask", "text.png", lambda p: p.write_text("not an image")),
    ("case.mask", "truncated.png", lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)),
    ("case.mask", "text.npy", lambda p: p.write_text("not an array")),
    ("case.mask", "pickled.npy", _write_npy_object),
    ("checkpoint.resume", "garbage.npz", lambda p: p.write_text("not a checkpoint")),
    ("checkpoint.resume", "pickled.npz", lambda p: np.savez(p, f=np.zeros(3), meta=np.array([{}], dtype=object))),
]


@pytest.mark.parametrize("key,name,write", BAD_FILES, ids=[n for _, n, _ in BAD_FILES])
def test_an_unreadable_file_gives_one_line(key, name, write, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / name)
    case = ["case=obstacle", "grid.nx=64", "grid.ny=32"] if key == "case.mask" else TG
    before = tree(tmp_path)
    assert main(["run", *case, "steps=10", f"{key}={tmp_path / name}"]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"lbm: error: {key}="), err
    assert "Traceback" not in out + err and "allow_pickle" not in err
    assert tree(tmp_path) == before


def test_the_slurm_launcher_off_a_cluster_gives_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-m", "hydra/launcher=slurm", *TG, "grid.nx=16,24", "steps=5"]) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "sbatch, which is not on PATH" in err, err
    assert "Traceback" not in out + err and list(tmp_path.iterdir()) == []


HELP = [
    (["--help"], "study batching"), (["run", "--help"], "grid:"), (["bench", "--help"], "variants:"),
    (["validate", "--help"], "--case NAME"), (["analyze", "--help"], "--sql"), (["compare", "--help"], "--threshold"),
    (["inspect", "--help"], "target="), (["study", "--help"], "convergence"), (["study", "batching", "--help"], "--members"),
    (["study", "compile", "--help"], "--grids"), (["study", "export", "--help"], "--out"),
    (["study", "convergence", "--help"], "grids="),
]


@pytest.mark.parametrize("args,option", HELP, ids=[" ".join(a) for a, _ in HELP])
def test_every_command_answers_help_with_its_options_and_writes_nothing(args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    assert option in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_help_and_cfg_do_not_import_jax(tmp_path):
    """In a process where ``import jax`` fails, the help of run, bench, validate and study, and --cfg job, work."""
    commands = [["run", "--help"], ["run", "--cfg", "job", "case=cavity"], ["run", "--cfg", "job", "precision=float64"],
                ["bench", "--help"], ["validate", "--help"], ["study", "--help"], ["study", "convergence", "--help"],
                ["study", "batching", "--help"], ["study", "compile", "--help"], ["study", "export", "--help"],
                ["compare", "--help"]]
    code = ("import sys; sys.modules['jax'] = None\nfrom lbm.cli import main\n"
            f"codes = [main(a) for a in {commands!r}]\nprint('codes', codes, file=sys.stderr)\n"
            "sys.exit(max(codes))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and f"codes {[0] * len(commands)}" in proc.stderr, proc.stderr[-3000:]
    assert "name: cavity" in proc.stdout and "--quick" in proc.stdout
    assert "--members" in proc.stdout and "--grids" in proc.stdout and "--out DIR" in proc.stdout
    assert list(tmp_path.iterdir()) == []


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
def test_multirun_sweep_over_grid_sizes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # in this process (one of its own cost more CPU); the default sweep directory
    assert main(["run", "-m", "case=taylor_green", "grid.nx=16,24", "grid.ny=16", "steps=10", "output.plots=false"]) == 0
    metrics = sorted((tmp_path / "outputs" / "multirun").glob("*/*/*/metrics.json"))
    assert len(metrics) == 2
    assert sorted(json.loads(m.read_text())["grid"][0] for m in metrics) == [16, 24]


@pytest.mark.parametrize("case,expected", [
    ("poiseuille", lambda h, nu, u: math.ceil(1.5 * h**2 / nu)),
    ("cavity", lambda h, nu, u: math.ceil(100 * h / u)),
])
def test_auto_steps_follow_the_documented_rule(case, expected):
    from helpers.runs import run_config

    from lbm.simulation import make_case

    run = run_config(f"case={case}", "grid.nx=20", "grid.ny=20", "steps=auto")
    assert run.steps is None
    made = make_case(run)
    nu = made.run.flow.u_lattice * 18 / made.run.flow.reynolds
    assert made.run.steps == expected(18, nu, made.run.flow.u_lattice)


def test_steps_must_be_an_integer_or_auto(capsys):
    assert main(["run", "steps=soon"]) == 2
    assert "steps=soon" in capsys.readouterr().err


def test_a_sibling_process_writes_its_record_under_its_own_names_and_refuses_only_what_is_not_process_0s(tmp_path):
    """Process k > 0 of a multi-process run shares process 0's directory: whichever starts first, process 0 must not
    take k's record for an earlier run's (k writes .hydra.process<k> and lbm.process<k>.log), and k accepts process
    0's record but still refuses results or its own earlier record (tests/test_parallel.py starts process 1 first)."""
    from lbm.cli import own_names, own_record, sibling_process
    from lbm.config import load
    from lbm.config.command_line import check_fresh
    from lbm.errors import LbmError

    multi = ["parallel.devices=4", "parallel.num_processes=2", "parallel.coordinator=localhost:1234"]
    assert [sibling_process(load([*multi, f"parallel.process_id={k}"])) for k in (0, 1)] == [None, 1]
    assert sibling_process(load([])) is None
    assert own_names(1) == (".hydra.process1", "lbm.process1.log")
    dest = type("Dest", (), {"job_dirs": [tmp_path / "run"]})()
    assert own_record(None, dest) == []
    assert own_record(1, dest) == ["hydra.output_subdir=.hydra.process1",
                                   f"hydra.job_logging.handlers.file.filename={tmp_path / 'run' / 'lbm.process1.log'}"]
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "lbm.log").write_text("process 0\n")
    check_fresh(run, "hydra.run.dir", own_names(1))  # process 0's record: the same run
    with pytest.raises(LbmError, match="already holds a run's record"):
        check_fresh(run, "hydra.run.dir")  # process 0 would refuse it: its check is unchanged
    (run / ".hydra.process1").mkdir()
    with pytest.raises(LbmError, match=r"already holds a run's record \(.hydra.process1\)"):
        check_fresh(run, "hydra.run.dir", own_names(1))
    (run / ".hydra.process1").rmdir()
    (run / "metrics.json").write_text("{}")
    with pytest.raises(LbmError, match="already holds results"):
        check_fresh(run, "hydra.run.dir", own_names(1))
