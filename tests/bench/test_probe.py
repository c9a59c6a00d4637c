"""The compile probe (lbm.bench.probe): a compile that aborts the process is refused in one line naming the engine
that compiles, never an abort.

The abort is simulated: a ``sitecustomize`` module on PYTHONPATH (loaded by every Python process started with it,
the run and its probe child alike) makes building the xla engine's chunk call ``os.abort()``, as XLA's TPU compiler
does on a program it cannot lower (issue 37). LBM_COMPILE_PROBE=1 probes on this CPU as ``auto`` does on a TPU.
"""

import os
import signal
import subprocess
import sys

import pytest
from helpers.paths import REPO

from lbm.bench.probe import Probe, abort_line, run_child

ABORTING = """
import os
if os.environ.get("LBM_TEST_ABORT_XLA_CHUNK") == "1":
    import lbm.engines.xla

    def chunk_function(self, n):
        os.abort()  # what XLA's TPU compiler does on a program it cannot lower

    lbm.engines.xla.XlaEngine.chunk_function = chunk_function
"""

RUN = ["case=taylor_green", "grid.nx=16", "grid.ny=16", "steps=4", "output.every=0", "output.plots=false",
       "engine=xla"]


def _run(tmp_path, probe: str):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(ABORTING)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "LBM_TEST_ABORT_XLA_CHUNK": "1",
           "LBM_COMPILE_PROBE": probe, "LBM_PROBE_CACHE": str(tmp_path / "cache")}
    run_dir = tmp_path / f"run-{probe}"
    res = subprocess.run([sys.executable, "-m", "lbm", "run", *RUN, f"hydra.run.dir={run_dir}"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    return res, run_dir


@pytest.mark.slow  # three runs in subprocesses, two probe children: 3.5 s; the fast lane keeps the child's verdicts
@pytest.mark.native  # (test_the_child_classifies_an_abort_a_failure_and_an_answer) and the one-line refusals below
def test_a_compile_that_aborts_is_refused_in_one_line_naming_the_engine_that_compiles(tmp_path):
    res, run_dir = _run(tmp_path, "1")
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lbm: error: engine=xla cannot compile this run on cpu"), lines
    assert "the compiler aborts (SIGABRT" in lines[0] and "run it with engine=native, which compiles" in lines[0]
    assert "Traceback" not in res.stderr and not run_dir.exists()  # refused before Hydra made its directory
    # the answers are kept: a second run is refused from the cache, without a child
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    again, _ = _run(tmp_path, "1")
    assert again.returncode == 2 and again.stderr == res.stderr
    # the control: without the probe the same run dies by the signal (the simulated abort is real)
    res, _ = _run(tmp_path, "0")
    assert res.returncode == -signal.SIGABRT, res.stderr[-2000:]


def test_the_child_classifies_an_abort_a_failure_and_an_answer():
    abort = [sys.executable, "-c", "import os, sys; sys.stderr.write('F0000 x.cc:1] Check failed: a == b Loop "
             "will not make progress\\n'); sys.stderr.flush(); os.abort()"]
    got = run_child(abort, b"")
    assert got.status == "aborted" and got.message == "SIGABRT: Check failed: a == b Loop will not make progress"
    got = run_child([sys.executable, "-c", "import sys; print('{\"engine\": \"pallas\", \"error\": \"XlaRuntimeError: "
                     "RESOURCE_EXHAUSTED: vmem\"}'); sys.exit(3)"], b"")
    assert got == Probe("error", "pallas", got.seconds, "XlaRuntimeError: RESOURCE_EXHAUSTED: vmem")
    got = run_child([sys.executable, "-c", "raise SystemExit('no libtpu')"], b"")
    assert got.status == "failed" and got.message == "no libtpu"
    got = run_child([sys.executable, "-c", "print('{\"engine\": \"pallas\", \"compile_s\": 1.0}')"], b"")
    assert got == Probe("ok", "pallas", got.seconds)
    got = run_child([sys.executable, "-c", "import time; time.sleep(30)"], b"", timeout=1)
    assert got.status == "failed" and "within 1 s" in got.message


def test_abort_line_keeps_the_compilers_reason():
    err = ("E1205 coredump_hook.cc] RAW: Sending fingerprint\n"
           "F1205 22:31:31.75 fusion_emitter.cc:12078] Check failed: rank == best_window_bounds_in_chunks.size() "
           "Cannot find a valid window for %fusion.10\nE1205 more\n")
    assert abort_line(err).startswith("Check failed: rank == best_window_bounds_in_chunks.size() Cannot find")
    assert abort_line("nothing here") == ""


def test_a_bad_probe_setting_is_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "LBM_COMPILE_PROBE": "sometimes"}
    res = subprocess.run([sys.executable, "-m", "lbm", "run", *RUN, f"hydra.run.dir={tmp_path / 'r'}"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert res.returncode == 2 and res.stderr.strip() == \
        "lbm: error: LBM_COMPILE_PROBE='sometimes': choose auto, 0 or 1"
