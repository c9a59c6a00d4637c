"""Operating runs for real: checkpoints and exact resume, signals, divergence, outputs for other tools."""

import json
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import run_config

from lbm.errors import DivergenceError, LbmError
from lbm.simulation import simulate

SMALL_CYL = ["grid.nx=80", "grid.ny=36", "output.plots=false"]


def fields(run_dir):
    with np.load(run_dir / "fields.npz") as z:
        return {k: z[k] for k in z.files}


def test_resumed_run_is_bitwise_identical(tmp_path):
    full = simulate(run_config(*SMALL_CYL, "steps=400", "output.every=100", "checkpoint.every=200"), tmp_path / "a")
    first = simulate(run_config(*SMALL_CYL, "steps=200", "output.every=100", "checkpoint.every=200"), tmp_path / "b")
    assert first["status"] == "completed"
    resumed = simulate(run_config(*SMALL_CYL, "steps=400", "output.every=100",
                                  f"checkpoint.resume={tmp_path / 'b'}"), tmp_path / "c")
    assert resumed["resumed_from_step"] == 200
    fa, fc = fields(tmp_path / "a"), fields(tmp_path / "c")
    for key in ("rho", "u", "solid"):
        assert np.array_equal(fa[key], fc[key]), key
    assert (tmp_path / "a" / "forces.csv").read_text() == (tmp_path / "c" / "forces.csv").read_text()
    assert (tmp_path / "a" / "monitor.csv").read_text() == (tmp_path / "c" / "monitor.csv").read_text()
    assert full["cd_mean"] == resumed["cd_mean"] and full["mass_rel_drift"] == resumed["mass_rel_drift"]
    # and a different path really differs (the comparison can fail)
    assert not np.array_equal(fa["u"], fields(tmp_path / "b")["u"])


def test_resume_taylor_green_keeps_the_decay_history(tmp_path):
    base = ["case=taylor_green", "grid.nx=24", "grid.ny=24", "output.every=50", "output.plots=false"]
    simulate(run_config(*base, "steps=200"), tmp_path / "a")
    simulate(run_config(*base, "steps=100", "checkpoint.every=100"), tmp_path / "b")
    simulate(run_config(*base, "steps=200", f"checkpoint.resume={tmp_path / 'b' / 'checkpoints'}"), tmp_path / "c")
    assert (tmp_path / "a" / "decay.csv").read_text() == (tmp_path / "c" / "decay.csv").read_text()
    assert np.array_equal(fields(tmp_path / "a")["u"], fields(tmp_path / "c")["u"])


def test_checkpoints_are_atomic_and_pruned(tmp_path):
    simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=100", "output.every=10",
                        "checkpoint.every=10", "checkpoint.keep=2", "output.plots=false"), tmp_path / "r")
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert names == ["checkpoint_0000000090.npz", "checkpoint_0000000100.npz"]


@pytest.mark.parametrize("override,key", [
    ("grid.nx=84", "grid"), ("case=taylor_green", "case"), ("precision=float64", "precision"),
    ("flow.reynolds=100", "tau"),
])
def test_incompatible_resume_is_refused(tmp_path, override, key):
    simulate(run_config(*SMALL_CYL, "steps=20", "checkpoint.every=20"), tmp_path / "a")
    args = [*SMALL_CYL, "steps=40", f"checkpoint.resume={tmp_path / 'a'}", override]
    if override.startswith("case="):
        args = ["case=taylor_green", "grid.nx=80", "grid.ny=36", "steps=40", f"checkpoint.resume={tmp_path / 'a'}"]
    with pytest.raises(LbmError) as exc:
        simulate(run_config(*args), tmp_path / "b")
    assert f"{key}=" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "b" / "metrics.json").exists()


def test_resume_rejects_garbage_and_finished_checkpoints(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(LbmError, match="not a readable lbm checkpoint"):
        simulate(run_config(*SMALL_CYL, "steps=20", f"checkpoint.resume={bad}"), tmp_path / "x")
    simulate(run_config(*SMALL_CYL, "steps=20", "checkpoint.every=20"), tmp_path / "a")
    with pytest.raises(LbmError, match="set steps above 20"):
        simulate(run_config(*SMALL_CYL, "steps=20", f"checkpoint.resume={tmp_path / 'a'}"), tmp_path / "y")


def test_divergence_stops_cleanly_and_keeps_the_last_good_fields(tmp_path):
    run = run_config("case=cavity", "grid.nx=34", "grid.ny=34", "flow.reynolds=20000", "flow.u_lattice=0.2",
                     "steps=4000", "output.every=50", "output.plots=false")
    with pytest.raises(DivergenceError) as exc:
        simulate(run, tmp_path / "r")
    msg = str(exc.value)
    assert "diverged by step" in msg and "first bad cell" in msg and "tau=" in msg and "\n" not in msg
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "diverged"
    assert metrics["fields_from_step"] == metrics["diverged_at_step"] - 50
    f = fields(tmp_path / "r")
    assert np.isfinite(f["rho"]).all() and np.isfinite(f["u"]).all()


def test_divergence_exit_code_in_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lbm", "run", "case=cavity", "grid.nx=34", "grid.ny=34",
                           "flow.reynolds=20000", "flow.u_lattice=0.2", "steps=4000", "output.plots=false",
                           f"hydra.run.dir={tmp_path / 'r'}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("lbm: error: simulation diverged")


def start_long_run(run_dir, *extra):
    cmd = [sys.executable, "-m", "lbm", "run", *SMALL_CYL, "steps=200000", "output.every=200",
           "output.progress=log", f"hydra.run.dir={run_dir}", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    log = run_dir / "lbm.log"
    while time.time() < deadline:  # wait until it is stepping
        if log.exists() and "compiled in" in log.read_text():
            break
        time.sleep(0.2)
    time.sleep(1.0)
    return proc


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_writes_checkpoint_and_results_then_resume_is_exact(tmp_path, sig, code):
    proc = start_long_run(tmp_path / "r")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert "checkpoint.resume=" in err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "interrupted"
    stopped = metrics["step_reached"]
    assert 0 < stopped < 200000 and stopped % 200 == 0
    assert (tmp_path / "r" / "fields.npz").exists()
    assert (tmp_path / "r" / "checkpoints" / f"checkpoint_{stopped:010d}.npz").exists()
    if sig == signal.SIGTERM:
        return
    # continuing to a later step equals a run that was never interrupted
    target = stopped + 400
    simulate(run_config(*SMALL_CYL, f"steps={target}", "output.every=200",
                        f"checkpoint.resume={tmp_path / 'r'}"), tmp_path / "resumed")
    simulate(run_config(*SMALL_CYL, f"steps={target}", "output.every=200"), tmp_path / "straight")
    assert np.array_equal(fields(tmp_path / "resumed")["u"], fields(tmp_path / "straight")["u"])


def test_second_interrupt_exits_at_once(tmp_path):
    proc = start_long_run(tmp_path / "r", "output.every=100000")  # long chunks: the first signal would wait
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    t0 = time.time()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert time.time() - t0 < 20
    assert proc.returncode == 130
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["status"] == "interrupted"


def test_vtk_frames_animation_and_monitor(tmp_path):
    metrics = simulate(run_config("grid.nx=60", "grid.ny=27", "steps=60", "output.every=20", "output.vtk=true",
                                  "output.animation=true"), tmp_path / "r")
    run_dir = tmp_path / "r"
    vtis = sorted((run_dir / "vtk").glob("*.vti"))
    assert [p.name for p in vtis] == [f"fields_{s:010d}.vti" for s in (20, 40, 60)]
    head = vtis[0].read_bytes().split(b"<AppendedData")[0].decode()
    root = ET.fromstring(head + "</VTKFile>") if "</VTKFile>" not in head else ET.fromstring(head)
    image = root.find("ImageData")
    assert image.get("WholeExtent").split() == ["0", "60", "0", "27", "0", "1"]
    names = {a.get("Name") for a in root.iter("DataArray")}
    assert {"density", "velocity", "vorticity", "solid"} <= names
    from PIL import Image

    with Image.open(run_dir / "plots" / "vorticity.gif") as gif:
        assert gif.n_frames == 3
    assert len(list((run_dir / "frames").glob("vorticity_*.png"))) == 3
    rows = (run_dir / "monitor.csv").read_text().splitlines()
    assert rows[0] == "step,mass,mass_rel_drift,kinetic_energy" and len(rows) == 4
    assert (run_dir / "plots" / "monitor.png").exists()
    assert "plots/vorticity.gif" in metrics["outputs"]


def test_progress_is_quiet_log_lines_without_a_terminal(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lbm", "run", "case=taylor_green", "grid.nx=16", "grid.ny=16",
                           "steps=1000", "output.every=10", "output.plots=false", f"hydra.run.dir={tmp_path / 'r'}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "MLUPS" in ln and "step " in ln]
    assert 5 <= len(lines) <= 12, lines  # about every 10%, not once per chunk (100 chunks)


def test_progress_bar_mode_runs(tmp_path):
    metrics = simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=50", "output.every=10",
                                  "output.progress=bar", "output.plots=false"), tmp_path / "r")
    assert metrics["status"] == "completed"


def test_partial_results_are_marked(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    with pytest.raises(LbmError, match="refusing to overwrite"):
        simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=5"), run_dir)
    assert (run_dir / "metrics.json").read_text() == "{}"


def test_repo_is_not_written_by_tests():
    assert not (Path(__file__).resolve().parents[1] / "outputs" / "pytest-marker").exists()
