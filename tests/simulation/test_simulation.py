"""The run loop (lbm/simulation.py) for real: checkpoints and exact resume, signals, divergence, outputs."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from helpers.lattices import slow_except
from helpers.paths import REPO
from helpers.runs import run_config

from lbm.config import LbmWarning
from lbm.errors import DivergenceError, LbmError
from lbm.io import checkpoint as ckpt_io
from lbm.simulation import simulate

SMALL_CYL = ["grid.nx=80", "grid.ny=36", "output.plots=false"]


def fields(run_dir):
    with np.load(run_dir / "fields.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.slow
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


TIMING_KEYS = {"compile_time_s", "compile_times_s", "mlups", "wall_time_s", "resumed_from_step"}
"""The metrics a resumed run may report differently: its own clocks, and where it resumed."""


def test_resuming_to_twice_the_steps_gives_the_uninterrupted_metrics(tmp_path):
    """Issue 39 item 7: with the automatic output.every, run 200 steps, resume to 400, and metrics.json equals that
    of an uninterrupted 400-step run in every key but the clocks (decay_rel_error_max differed when the chunk was
    steps/10: samples every 20 steps, then 40)."""
    base = ["case=taylor_green", "grid.nx=24", "grid.ny=24", "output.plots=false"]
    simulate(run_config(*base, "steps=200", "checkpoint.every=200"), tmp_path / "a")
    resumed = simulate(run_config(*base, "steps=400", f"checkpoint.resume={tmp_path / 'a'}"), tmp_path / "b")
    full = simulate(run_config(*base, "steps=400"), tmp_path / "c")
    assert resumed["resumed_from_step"] == 200
    on_disk = [json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("b", "c")]
    for m in (resumed, full, *on_disk):
        for key in TIMING_KEYS:
            m.pop(key, None)
    assert resumed == full and on_disk[0] == on_disk[1] and full["chunk_steps"] == 100
    assert (tmp_path / "b" / "decay.csv").read_text() == (tmp_path / "c" / "decay.csv").read_text()


def test_checkpoint_keep_defaults_to_three(tmp_path):
    simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=50", "checkpoint.every=10",
                        "output.plots=false"), tmp_path / "r")
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert names == [f"checkpoint_{s:010d}.npz" for s in (30, 40, 50)]


def test_checkpoints_are_pruned_to_keep(tmp_path):
    simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=100", "output.every=10",
                        "checkpoint.every=10", "checkpoint.keep=2", "output.plots=false"), tmp_path / "r")
    names = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert names == ["checkpoint_0000000090.npz", "checkpoint_0000000100.npz"]


def test_a_checkpoint_write_killed_midway_is_never_read(tmp_path, monkeypatch):
    """The temporary file of an interrupted write matches no checkpoint glob: resume and divergence use the last good one."""
    run = run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=40", "output.every=10",
                     "checkpoint.every=20", "output.plots=false")
    real_savez = np.savez

    def killed_midway(fh, **arrays):
        if "checkpoint_0000000040" in str(getattr(fh, "name", "")):
            real_savez(fh, **arrays)
            fh.truncate(fh.tell() // 2)  # half a zip on disk, then the process "dies"
            raise KeyboardInterrupt
        real_savez(fh, **arrays)

    monkeypatch.setattr(ckpt_io.np, "savez", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        simulate(run, tmp_path / "r")
    monkeypatch.undo()
    directory = tmp_path / "r" / "checkpoints"
    leftovers = sorted(p.name for p in directory.iterdir())
    assert leftovers == [".checkpoint_0000000040.partial", "checkpoint_0000000020.npz"]
    assert sorted(directory.glob(ckpt_io.GLOB)) == [directory / "checkpoint_0000000020.npz"]
    assert ckpt_io.find_checkpoint(tmp_path / "r").name == "checkpoint_0000000020.npz"
    resumed = simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=40", "output.every=10",
                                  "checkpoint.every=20", "output.plots=false", f"checkpoint.resume={tmp_path / 'r'}"),
                       tmp_path / "c")
    assert resumed["resumed_from_step"] == 20
    straight = simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=40", "output.every=10",
                                   "output.plots=false"), tmp_path / "s")
    assert np.array_equal(fields(tmp_path / "c")["u"], fields(tmp_path / "s")["u"])
    assert straight["status"] == "completed"
    # the next successful save removes the stale partial file
    ckpt_io.save_checkpoint(directory, 60, np.zeros(3), {}, {}, keep=3)
    assert not (directory / ".checkpoint_0000000040.partial").exists()


@pytest.mark.parametrize("override,key", slow_except([
    ("grid.nx=84", "grid"), ("case=taylor_green", "case"), ("precision=float64", "precision"),
    ("flow.reynolds=100", "tau"),
], fast={("flow.reynolds=100", "tau")}))
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
    # collision=bgk (the cavity's pick at this Re is TRT): the native kernel of the periodic box, which the fast
    # lane builds anyway, not a kernel of its own for these two tests (2 CPU-s cold)
    run = run_config("case=cavity", "collision=bgk", "grid.nx=34", "grid.ny=34", "flow.reynolds=20000",
                     "flow.u_lattice=0.2", "steps=4000", "output.every=50", "output.plots=false")
    with pytest.raises(DivergenceError) as exc:
        simulate(run, tmp_path / "r")
    msg = str(exc.value)
    assert "diverged by step" in msg and "first bad cell" in msg and "tau=" in msg and "\n" not in msg
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "diverged"
    assert metrics["fields_from_step"] == metrics["diverged_at_step"] - 50
    f = fields(tmp_path / "r")
    assert np.isfinite(f["rho"]).all() and np.isfinite(f["u"]).all()


def test_divergence_falls_back_to_the_newest_checkpoint(tmp_path):
    """With checkpoints (no host copy per chunk) the fields written are those of the newest checkpoint."""
    run = run_config("case=cavity", "collision=bgk", "grid.nx=34", "grid.ny=34", "flow.reynolds=20000",
                     "flow.u_lattice=0.2", "steps=4000", "output.every=50", "checkpoint.every=50", "checkpoint.keep=2",
                     "output.plots=false")
    with pytest.raises(DivergenceError):
        simulate(run, tmp_path / "r")
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    newest = sorted((tmp_path / "r" / "checkpoints").glob(ckpt_io.GLOB))[-1]
    saved = ckpt_io.load_checkpoint(newest)
    assert metrics["status"] == "diverged" and metrics["fields_from_step"] == saved["step"]
    assert saved["step"] == metrics["diverged_at_step"] - 50  # the last chunk that ended healthy
    from lbm.kernels.macroscopic import macroscopic
    from lbm.lattice import LATTICES

    drho, _ = macroscopic(saved["f"], LATTICES["d2q9"])
    assert np.array_equal(fields(tmp_path / "r")["rho"], np.asarray(1.0 + drho))


@pytest.mark.slow
def test_divergence_exit_code_in_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lbm", "run", "case=cavity", "grid.nx=34", "grid.ny=34",
                           "flow.reynolds=20000", "flow.u_lattice=0.2", "steps=4000", "output.plots=false",
                           f"hydra.run.dir={tmp_path / 'r'}"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("lbm: error: simulation diverged")


def start_long_run(run_dir, *extra, until=None):
    """A cylinder run that no machine finishes within a test (10^7 steps); returns once it is stepping.

    ``until``: a file in the run directory whose appearance means a known step was reached (a checkpoint);
    otherwise once it logged that it is stepping (its signal handlers are in place). The caller kills the process
    on failure.
    """
    cmd = [sys.executable, "-m", "lbm", "run", *SMALL_CYL, "steps=10000000", "output.progress=log",
           f"hydra.run.dir={run_dir}", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.time() + 180
    log = run_dir / "lbm.log"
    while time.time() < deadline and proc.poll() is None:
        if until is not None and (run_dir / until).exists():
            return proc
        if until is None and log.exists() and "stepping from step" in log.read_text():
            return proc
        time.sleep(0.05)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"the run never reached {until or 'its first chunk'} (exit {proc.returncode}): {err[-2000:]}")


@pytest.fixture
def killed_at_exit():
    """Subprocesses registered here are killed if the test leaves them running (a failed assertion)."""
    procs = []
    yield procs.append
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate()


@pytest.mark.parametrize("sig,code", slow_except([(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                                                 fast={(signal.SIGTERM, 143)}))
def test_signal_writes_checkpoint_and_results_then_resume_is_exact(tmp_path, killed_at_exit, sig, code):
    # no periodic checkpoints: the only checkpoint the run can hold is the one the signal asks for (at the end of
    # the chunk it arrived in, a multiple of output.every after at least one chunk)
    proc = start_long_run(tmp_path / "r", "output.every=200")
    killed_at_exit(proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "interrupted"
    stopped = metrics["step_reached"]
    assert 200 <= stopped < 10000000 and stopped % 200 == 0
    assert (tmp_path / "r" / "fields.npz").exists()
    written = sorted((tmp_path / "r" / "checkpoints").glob(ckpt_io.GLOB))
    assert [p.name for p in written] == [f"checkpoint_{stopped:010d}.npz"]
    assert f"checkpoint.resume={written[0]}" in err
    assert "and another hydra.run.dir" in err  # the hint taken literally, with this hydra.run.dir, would be refused
    assert ckpt_io.load_checkpoint(written[0])["step"] == stopped
    if sig == signal.SIGTERM:
        return
    # continuing to a later step equals a run that was never interrupted
    target = stopped + 400
    simulate(run_config(*SMALL_CYL, f"steps={target}", "output.every=200",
                        f"checkpoint.resume={tmp_path / 'r'}"), tmp_path / "resumed")
    simulate(run_config(*SMALL_CYL, f"steps={target}", "output.every=200"), tmp_path / "straight")
    assert np.array_equal(fields(tmp_path / "resumed")["u"], fields(tmp_path / "straight")["u"])


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_second_signal_exits_at_once_without_waiting_for_the_chunk(tmp_path, killed_at_exit, sig):
    """One chunk of 10^7 steps (hours on any CPU): only a real immediate exit leaves it unfinished, with code 130."""
    proc = start_long_run(tmp_path / "r", "output.every=10000000")
    killed_at_exit(proc)
    proc.send_signal(sig)
    time.sleep(0.5)  # the first signal only asks to stop after the chunk: the process keeps running
    assert proc.poll() is None
    t0 = time.time()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    waited = time.time() - t0
    assert proc.returncode == 130, err  # 128 + SIGINT for either signal: the user asked for an immediate stop
    assert waited < 10, waited  # measured 0.4 s on a loaded 2-core laptop
    assert f"second {signal.Signals(sig).name}: stopped at once" in err and "Traceback" not in err
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["step_reached"] == 0  # the chunk never finished
    assert not (tmp_path / "r" / "fields.npz").exists()


def test_resume_from_a_missing_path_is_one_line(tmp_path):
    missing = tmp_path / "no" / "such" / "run"
    with pytest.raises(LbmError, match="expected an existing run directory or checkpoint file") as exc:
        simulate(run_config(*SMALL_CYL, "steps=20", f"checkpoint.resume={missing}"), tmp_path / "x")
    assert "\n" not in str(exc.value) and str(missing) in str(exc.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(LbmError, match="no checkpoint_"):
        simulate(run_config(*SMALL_CYL, "steps=20", f"checkpoint.resume={tmp_path / 'empty'}"), tmp_path / "y")
    assert not (tmp_path / "x" / "metrics.json").exists()


ENGINES = ["xla", pytest.param("native", marks=pytest.mark.native)]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_resume_is_bitwise_with_odd_chunk_lengths(tmp_path, engine):
    """Chunks of 7 then 11 and 13 steps (odd: the in-place AA scheme of the native engine alternates parity)."""
    base = [*SMALL_CYL, f"engine={engine}"]
    simulate(run_config(*base, "steps=100", "output.every=9"), tmp_path / "a")
    simulate(run_config(*base, "steps=63", "steps_per_dispatch=7", "checkpoint.every=21"), tmp_path / "b")
    resumed = simulate(run_config(*base, "steps=100", "output.every=11",
                                  f"checkpoint.resume={tmp_path / 'b'}"), tmp_path / "c")
    assert resumed["resumed_from_step"] == 63 and resumed["engine"] == engine
    fa, fc = fields(tmp_path / "a"), fields(tmp_path / "c")
    for key in ("rho", "u"):
        assert np.array_equal(fa[key], fc[key]), key
    assert not np.array_equal(fa["u"], fields(tmp_path / "b")["u"])


def test_tau_close_to_half_warns(tmp_path):
    from lbm.simulation import make_case

    with pytest.warns(LbmWarning, match=r"tau=0\.50370 is close to 0\.5"):
        make_case(run_config("case=poiseuille", "flow.tau=0.5037"))  # the case derives tau when it is built
    with warnings.catch_warnings():
        warnings.simplefilter("error", LbmWarning)
        make_case(run_config("case=poiseuille", "flow.tau=0.52"))  # above the 0.51 cut: no warning


@pytest.mark.slow
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


@pytest.mark.slow
def test_progress_is_quiet_log_lines_without_a_terminal(tmp_path, capfd):
    from lbm.cli import main

    # in this process (one of its own cost more CPU): its stdout and stderr are pipes, not a terminal, either way
    assert main(["run", "case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=1000", "output.every=10",
                 "output.plots=false", f"hydra.run.dir={tmp_path / 'r'}"]) == 0
    out, err = capfd.readouterr()
    lines = [ln for ln in (out + err).splitlines() if "MLUPS" in ln and "step " in ln]
    assert 5 <= len(lines) <= 12, lines  # about every 10%, not once per chunk (100 chunks)


def test_progress_bar_mode_runs(tmp_path):
    metrics = simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=50", "output.every=10",
                                  "output.progress=bar", "output.plots=false"), tmp_path / "r")
    assert metrics["status"] == "completed"


def test_existing_results_are_not_overwritten(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text("{}")
    with pytest.raises(LbmError, match="refusing to overwrite"):
        simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=5"), run_dir)
    assert (run_dir / "metrics.json").read_text() == "{}"


def test_partial_results_are_marked(tmp_path, monkeypatch):
    """A run stopped by an exception mid-way still leaves metrics.json, saying how far it got."""
    from lbm.engines.xla import XlaEngine

    real, calls = XlaEngine.advance, []

    def dies_in_the_third_chunk(self, f, n, first_step=0):
        calls.append(first_step)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, f, n, first_step=first_step)

    monkeypatch.setattr(XlaEngine, "advance", dies_in_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        simulate(run_config("case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=50", "output.every=10",
                            "engine=xla", "output.plots=false"), tmp_path / "r")
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and metrics["step_reached"] == 20 and calls == [0, 10, 20]
    assert not (tmp_path / "r" / "fields.npz").exists()


@pytest.mark.parametrize("fallback_possible, level", [(True, "WARNING"), (False, "INFO")])
def test_the_native_fallback_warning_only_where_native_was_asked_for(caplog, fallback_possible, level):
    """engine=auto on one CPU device that got xla warns what is lost; engine=xla asked for, or a mesh (native is
    single-device), just names the engine."""
    import logging
    import types

    from lbm.simulation import log_engine_choice

    engine = types.SimpleNamespace(name="xla", mode="fused", note="mesh 2x1 (x), shards 8x8")
    with caplog.at_level(logging.INFO, logger="lbm"):
        log_engine_choice(engine, fallback_possible=fallback_possible)
    (record,) = [r for r in caplog.records if r.name == "lbm"]
    assert record.levelname == level and "mesh 2x1" in record.getMessage()
    assert ("slower" in record.getMessage()) == fallback_possible


def test_the_engine_line_names_the_mode(caplog):
    """A sharded instrumented run logs 'instrumented engine: ...', not 'fused engine: ...'."""
    import logging
    import types

    from lbm.simulation import log_engine_choice

    engine = types.SimpleNamespace(name="xla", mode="instrumented", note="mesh 2x1 (x), shards 8x8")
    with caplog.at_level(logging.INFO, logger="lbm"):
        log_engine_choice(engine, fallback_possible=False)
    assert [r.getMessage() for r in caplog.records if r.name == "lbm"] == [
        "instrumented engine: xla (mesh 2x1 (x), shards 8x8)"]



@pytest.mark.parametrize("engine,said", [("native", True), ("pallas", True), ("xla", False), ("auto", False)])
def test_an_engine_named_for_an_instrumented_run_is_said_to_be_unused(caplog, engine, said):
    import logging

    from lbm.simulation import engine_for, prepare

    run = run_config("mode=instrumented", f"engine={engine}", "case=taylor_green", "grid.nx=8", "grid.ny=8")
    _, setup = prepare(run)
    with caplog.at_level(logging.INFO, logger="lbm"):
        engine_used = engine_for(run, setup)
    assert (engine_used.name, engine_used.mode, engine_used.partitioner) == ("xla", "instrumented", None)
    lines = [r.getMessage() for r in caplog.records if r.name == "lbm" and "is not used" in r.getMessage()]
    assert lines == ([f"engine={engine} is not used: it chooses how mode=fused computes a step; mode=instrumented "
                      "runs each stage of the xla engine as its own jit"] if said else [])


@pytest.mark.parametrize("mode,mesh,partitioner", [("instrumented", None, None), ("fused", (1, 1), "shard_map"),
                                                   ("instrumented", (1, 1), "shard_map"), ("fused", (1, 1), "gspmd")])
def test_metrics_name_the_engine_as_the_config_does_and_the_partitioner_apart(mode, mesh, partitioner):
    """metrics.json's ``engine`` is one of the config key's names (the xla engine runs instrumented and mesh runs
    here), its ``mode`` the config's, and how the mesh splits the steps is ``parallel.partitioner`` (None: one
    device). The mesh engines are built on a 1x1 mesh, which one device holds."""
    from lbm.engines import make_engine
    from lbm.engines.sharded import make_sharded
    from lbm.simulation import prepare
    from lbm.simulation.finish import build_metrics

    run = run_config(f"mode={mode}", "engine=xla", "case=taylor_green", "grid.nx=8", "grid.ny=8", "steps=2")
    _, setup = prepare(run)
    engine = (make_engine(setup, mode, engine="xla") if mesh is None else
              make_sharded(setup, mesh, mode, engine="xla", partitioner=partitioner))
    metrics = build_metrics(run, setup, engine, 0, 0.0, "completed")
    assert metrics["engine"] == "xla", metrics["engine"]  # not instrumented, sharded or gspmd
    assert metrics["mode"] == mode and metrics["parallel"]["partitioner"] == partitioner


def test_large_populations_are_copied_to_the_host_at_most_a_twentieth_of_the_stepping():
    """Small states are copied before every chunk; a large one once the stepping since its last copy is 20 times
    the copy's time, so a 128^3 D3Q27 run spends at most about 5% on copies while keeping a recent good state."""
    from lbm.simulation.chunks import HOST_COPY_EVERY_CHUNK_BYTES, host_copy_due

    small, large = HOST_COPY_EVERY_CHUNK_BYTES, HOST_COPY_EVERY_CHUNK_BYTES + 1
    assert host_copy_due(small, 0.0, 10.0)  # every chunk, whatever the copy costs
    assert host_copy_due(large, 0.0, 0.0)  # the first copy (none measured yet)
    assert not host_copy_due(large, 1.9, 0.1) and host_copy_due(large, 2.0, 0.1)


def test_the_automatic_chunk_is_fixed_and_a_profiled_runs_holds_its_window():
    """output.every=0: 100 steps a chunk whatever ``steps`` is (a run resumed to more steps samples where an
    uninterrupted one does); a profiled run's chunk is a tenth of the run, so that a 20-step run still has warm-up and
    steady chunks (the profiling tests and the device check run 20-100 steps)."""
    from lbm.simulation.state import AUTO_CHUNK_STEPS, chunk_size

    assert AUTO_CHUNK_STEPS == 100
    assert [chunk_size(run_config("case=taylor_green", f"steps={n}")) for n in (20, 200, 2000, 60000)] == [20, 100, 100, 100]
    profiled = [chunk_size(run_config("case=taylor_green", f"steps={n}", "profile.enabled=true")) for n in (20, 100, 60000)]
    assert profiled == [2, 10, 1000]
    assert chunk_size(run_config("case=taylor_green", "steps=2000", "output.every=40")) == 40


def test_on_an_accelerator_the_automatic_chunk_holds_about_1e8_cell_updates():
    """On a GPU or TPU the host's work between chunks leaves the device idle (~2.7 ms a chunk on the lent TPU v5e), so
    a small grid's automatic chunk is long: about 10^8 cell updates, 100 to 1000 steps, fixed by the grid alone (a
    resumed run still samples where an uninterrupted one does); a CPU keeps 100; output.every still rules."""
    from lbm.simulation.state import chunk_size

    def chunk(platform: str, *overrides: str) -> int:
        return chunk_size(run_config("case=taylor_green", *overrides), platform)

    small, mid, large = ("grid.nx=128", "grid.ny=128"), ("grid.nx=1000", "grid.ny=500"), ("grid.nx=4096", "grid.ny=4096")
    assert [chunk("tpu", *g, "steps=60000") for g in (small, mid, large)] == [1000, 200, 100]
    assert [chunk("gpu", *g, f"steps={n}") for g, n in ((small, 60000), (small, 300), (mid, 70000))] == [1000, 300, 200]
    assert [chunk("cpu", *g, "steps=60000") for g in (small, mid, large)] == [100, 100, 100]
    assert chunk("tpu", *small, "steps=60000", "output.every=40") == 40
    assert chunk("tpu", *small, "steps=60000", "checkpoint.every=500") == 500
    # even (the in-place kernels' pairs): 1e8 / 66^3 is 347.9
    assert chunk("tpu", "case=cavity", "lattice=d3q19", "grid.nx=66", "grid.ny=66", "grid.nz=66", "steps=60000") == 346
