"""Refusals the run path used to make after Hydra had created the run directory (the engine, the host's cores, the
trace_processor) come before it; every command's bad options are one line with the option meant."""

import importlib

import pytest

from lbm.cli import main
from lbm.engines.native import threads

TG = ["case=taylor_green", "grid.nx=16", "grid.ny=16", "output.plots=false", "steps=5"]

REFUSED = [
    (["engine=native", "collision=mrt", "collision.smagorinsky=0.1"], "the native kernel has no Smagorinsky model"),
    (["native.threads=100000"], "native.threads=100000 is invalid: expected an integer in [0, "),
    (["profile.enabled=true", "profile.trace_processor=/nonexistent/tp"],
     "profile.trace_processor=/nonexistent/tp is not an executable file"),
    (["profile.trace_processor=/nonexistent/tp"], "profile.trace_processor=/nonexistent/tp is not an executable file"),
    (["profile.enabled=true", "profile.backend=perfetto"], "no trace_processor binary"),
]


@pytest.mark.parametrize("extra,message", REFUSED, ids=[" ".join(e) for e, _ in REFUSED])
def test_refused_before_hydra_creates_the_run_directory(extra, message, tmp_path, capsys, monkeypatch):
    def hydra_started(*args, **kwargs):
        raise AssertionError("Hydra started: the run directory would exist")

    monkeypatch.setattr("lbm.cli.run_hydra", hydra_started)
    monkeypatch.setattr(importlib.import_module("lbm.simulation.start"), "engine_for", hydra_started)
    monkeypatch.setenv("PATH", str(tmp_path))  # no trace_processor on PATH
    monkeypatch.delenv("LBM_TRACE_PROCESSOR", raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["run", *TG, *extra, f"hydra.run.dir={tmp_path / 'new'}"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_thread_count_the_host_has_runs(tmp_path, monkeypatch):
    """The upper end of native.threads is accepted (the refusal is the count above it), as is 0."""
    monkeypatch.setattr(threads, "host_threads", lambda: 3)
    threads.check_threads(3)
    threads.check_threads(0)
    with pytest.raises(Exception, match=r"native.threads=4 is invalid: expected an integer in \[0, 3\]"):
        threads.check_threads(4)


def test_the_threads_used_follow_the_kernel(monkeypatch):
    """kernels.cc: one thread below SERIAL_CELLS cells; else LBM_NATIVE_THREADS, native.threads, or every core."""
    monkeypatch.setattr(threads, "host_threads", lambda: 6)
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    big = threads.SERIAL_CELLS
    assert threads.threads_used(4, big - 1) == 1
    assert threads.threads_used(0, big) == 6
    assert threads.threads_used(2, big) == 2
    monkeypatch.setenv(threads.THREADS_ENV, "5")
    assert threads.threads_used(2, big) == 5
    assert threads.threads_used(2, big - 1) == 1


BAD_OPTIONS = [
    (["validate", "--quik"], "validate: unknown option '--quik' (did you mean --quick?)"),
    (["run", "--cfg", "jobb"], "run: --cfg jobb: expected one of job, hydra, all (did you mean job?)"),
    (["bench", "--cfg", "jobb"], "bench: --cfg jobb: expected one of job, hydra, all (did you mean job?)"),
    (["run", "--cfg"], "run: --cfg needs a value: one of job, hydra, all"),
    (["run", "--info", "plugin"], "run: --info plugin: expected one of all, config"),
    (["compare", "a.json"], "compare: the following arguments are required: new"),
    (["study", "export", "--outt", "x"], "study export: unknown option '--outt' (did you mean --out?)"),
    (["study", "convergence", "--ot", "x", "grids=[8,16]"], "study convergence: unknown option '--ot' (did you mean"),
    (["inspect", "--bogus"], "inspect: unknown option '--bogus'"),
    (["study", "batching", "--membrs", "3"], "study batching: unrecognized arguments: --membrs 3 (did you mean"),
]


@pytest.mark.parametrize("args,message", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_a_bad_option_of_any_command_is_one_line(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err
    assert "usage:" not in out + err and list(tmp_path.iterdir()) == []
