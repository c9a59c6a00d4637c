"""lbm.run: the Python API validates like the command line and returns what the run wrote."""

import importlib
import json
import subprocess
import sys

import numpy as np
import pytest
from helpers.paths import REPO

import lbm
from lbm.cli import main
from lbm.errors import ConfigError, LbmError

SMALL = ["case=taylor_green", "grid.nx=12", "grid.ny=12", "steps=5", "output.plots=false"]


def test_run_returns_the_metrics_and_fields_it_wrote(tmp_path):
    result = lbm.run(SMALL, run_dir=tmp_path / "run")
    assert result.run_dir == tmp_path / "run"
    assert result.metrics == json.loads((result.run_dir / "metrics.json").read_text())
    assert result.metrics["status"] == "completed" and result.metrics["steps"] == 5
    with np.load(result.run_dir / "fields.npz") as z:
        for name in ("rho", "u", "solid"):
            np.testing.assert_array_equal(getattr(result, name), z[name])
    assert result.rho.shape == (12, 12) and result.u.shape == (2, 12, 12) and result.solid.dtype == bool
    assert (result.run_dir / ".hydra" / "config.yaml").exists() and (result.run_dir / "lbm.log").exists()
    assert "tau=" in (result.run_dir / "lbm.log").read_text()


def test_run_gives_the_command_lines_answer(tmp_path):
    api = lbm.run(SMALL, run_dir=tmp_path / "api")
    assert main(["run", *SMALL, f"hydra.run.dir={tmp_path / 'cli'}"]) == 0
    with np.load(tmp_path / "cli" / "fields.npz") as z:
        np.testing.assert_array_equal(api.u, z["u"])  # same config, same engine: bitwise the same
        np.testing.assert_array_equal(api.rho, z["rho"])


def test_a_run_builds_its_grid_sized_setup_once(tmp_path, monkeypatch):
    """preflight builds the case's Setup (its refusals come before the run directory) and the run takes that one:
    at 512^3 a setup takes minutes. Through lbm.run and through the command line (Hydra composes the config again)."""
    from lbm.cases.taylor_green import TaylorGreen

    start = importlib.import_module("lbm.simulation.start")  # the module (lbm.simulation.start is also a function)
    built = []
    setup = TaylorGreen.setup
    monkeypatch.setattr(TaylorGreen, "setup", lambda self: built.append(1) or setup(self))
    lbm.run(SMALL, run_dir=tmp_path / "api")
    assert len(built) == 1 and not start.PREPARED
    assert main(["run", *SMALL, f"hydra.run.dir={tmp_path / 'cli'}"]) == 0
    assert len(built) == 2 and not start.PREPARED
    # a kept setup is for its own config only: another config builds its own
    from lbm.config import load

    a, b = load(SMALL), load([SMALL[0], "grid.nx=16", "grid.ny=16", *SMALL[3:]])
    case_a, setup_a = start.prepare(a)
    start.keep_prepared(start.resolve_parallel(a), case_a, setup_a)
    case_b, _ = start.prepare(b)
    assert case_b is not case_a and case_b.run.grid == (16, 16) and not start.PREPARED and len(built) == 4


@pytest.mark.slow  # two runs; the fast lane keeps lbm.run's absolute path (below) and fresh_run_dir's fresh directory
# under outputs/, which the command line shares (tests/test_cli.py::test_default_run_directories_are_fresh_within_one_second)
def test_default_run_directories_are_fresh_absolute_and_under_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = lbm.run(SMALL).run_dir
    second = lbm.run(SMALL).run_dir
    assert first != second
    for d in (first, second):
        assert d.is_absolute() and d.parents[1] == tmp_path / "outputs" and (d / "metrics.json").exists()


def test_a_relative_run_dir_comes_back_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert lbm.run(SMALL, run_dir="here").run_dir == tmp_path / "here"


def test_run_shows_progress_on_stderr(tmp_path):
    """In a plain script or notebook (no logging configured) the run's log, progress lines among it, is shown."""
    code = f"import lbm; lbm.run({SMALL!r} + ['output.progress=log'], run_dir='r')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lbm: step 5/5" in proc.stderr and "lbm: derived: Re=" in proc.stderr, proc.stderr[-2000:]


def test_a_resume_mismatch_is_refused_before_the_run_directory_exists(tmp_path):
    lbm.run([*SMALL, "checkpoint.every=5"], run_dir=tmp_path / "a")
    with pytest.raises(LbmError, match="it has collision=bgk but this run has collision=trt"):
        lbm.run([*SMALL, "steps=10", "collision=trt", f"checkpoint.resume={tmp_path / 'a'}"], run_dir=tmp_path / "b")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("overrides,error,text", [
    (["grid.nx=1.5"], ConfigError, "grid.nx=1.5"),
    (["case.radus=3"], LbmError, "case.radus"),
    (["steps=0"], ConfigError, "steps=0"),
    (["hydra.run.dir=x"], LbmError, "run_dir="),
    ("case=cavity", LbmError, "list of overrides"),
])
def test_bad_input_raises_and_writes_nothing(overrides, error, text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=text):
        lbm.run(overrides)
    assert not (tmp_path / "outputs").exists()


def test_run_refuses_a_directory_with_results(tmp_path):
    lbm.run(SMALL, run_dir=tmp_path / "run")
    before = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    with pytest.raises(LbmError, match="refusing to overwrite: choose another run_dir$"):
        lbm.run([*SMALL, "steps=6"], run_dir=tmp_path / "run")
    assert (tmp_path / "run" / ".hydra" / "config.yaml").read_text() == before


def test_importing_lbm_stays_cheap():
    code = "import sys, lbm; heavy = [m for m in ('jax', 'hydra', 'numpy') if m in sys.modules]; print(heavy)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr
    assert callable(lbm.run) and lbm.Result.__name__ == "Result"


def test_precision_scope_puts_the_float64_switch_back_as_it_found_it():
    """lbm.environment.precision_scope: on inside for float64 (or as the block asks), as before after it."""
    from lbm.environment import float64_enabled, precision_scope, use_precision

    assert not float64_enabled()
    with precision_scope("float64"):
        assert float64_enabled()
    assert not float64_enabled()
    with precision_scope():  # the block asks (lbm.simulation.prepare does, for a float64 run)
        use_precision("float64")
        assert float64_enabled()
    assert not float64_enabled()
    with precision_scope("float32"):
        assert not float64_enabled()
    use_precision("float64")  # on before the scope: left on (the conftest puts it back after this test)
    with precision_scope("float64"):
        assert float64_enabled()
    assert float64_enabled()


def test_a_float64_run_leaves_the_float64_switch_as_it_found_it(tmp_path):
    """lbm.run (preflight, then the run) computes a float64 run in float64 and switches jax_enable_x64 back off."""
    from lbm.environment import float64_enabled

    assert not float64_enabled()
    result = lbm.run([*SMALL, "precision=float64"], run_dir=tmp_path / "f64")
    assert result.rho.dtype == np.float64 and result.metrics["precision"] == "float64"
    assert not float64_enabled()


@pytest.mark.slow  # three runs, one in a fresh process
def test_a_float32_run_after_a_float64_one_is_bitwise_as_in_a_fresh_process(tmp_path):
    """The command line's float64 run also puts the switch back, and a float32 run that follows it in the same
    process writes bitwise the fields a fresh process writes."""
    from lbm.environment import float64_enabled

    assert main(["run", *SMALL, "precision=float64", f"hydra.run.dir={tmp_path / 'f64'}"]) == 0
    assert not float64_enabled()
    cylinder = ["case=cylinder", "grid.nx=80", "grid.ny=36", "steps=20", "output.plots=false"]
    after = lbm.run(cylinder, run_dir=tmp_path / "after")
    code = f"import lbm; lbm.run({cylinder!r}, run_dir='fresh')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert after.rho.dtype == np.float32
    with np.load(tmp_path / "fresh" / "fields.npz") as fresh, np.load(after.run_dir / "fields.npz") as same:
        assert sorted(fresh.files) == sorted(same.files)
        for name in fresh.files:
            np.testing.assert_array_equal(same[name], fresh[name])
