"""``analyze`` on a real Hydra multirun (lbm.profiling.sweep): one row per job, read from the jobs' own files."""

import csv
import json
import os
import subprocess
import sys

import pytest
from helpers.paths import REPO


@pytest.mark.slow
def test_analyze_a_real_profiled_multirun(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "lbm", "run", "-m", "case=taylor_green", "grid.nx=16,24", "grid.ny=16",
                          "steps=40", "profile.enabled=true", "profile.warmup_steps=2", "profile.steps=5",
                          "output.plots=false", "output.progress=none", f"hydra.sweep.dir={sweep}"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = subprocess.run([sys.executable, "-m", "lbm", "analyze", str(sweep)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = list(csv.DictReader((sweep / "sweep.csv").open()))
    assert [r["job"] for r in rows] == ["0", "1"]
    for job, row in zip(("0", "1"), rows, strict=True):
        metrics = json.loads((sweep / job / "metrics.json").read_text())
        assert row["grid"] == "x".join(map(str, metrics["grid"]))
        assert float(row["cells"]) == metrics["cells"]
        # the unprofiled throughput: metrics.json's, which leaves the profiled steps out
        assert metrics["profiled_steps"]["steps"] == int(row["profiled_steps"]) > 0
        assert abs(float(row["mlups"]) - metrics["mlups"]) < 1e-9 * metrics["mlups"] + 1e-12
        shares = [float(v) for k, v in row.items() if k.startswith("share_") and k not in ("share_clock", "share_of")
                  and v]
        assert abs(sum(shares) - 1.0) < 1e-9  # shares of one statistic over the stage rows add up to 1
        assert (row["share_clock"], row["share_of"]) == ("device", "mean_ms")
        # the step row and the stages' sum on that clock, with the gap as unattributed (metrics.json's own numbers)
        stage_means = [s["mean_ms"] for s in metrics["profile"]["stages"].values()]
        step = metrics["profile"]["timestep_mean_ms"]["device"]
        assert float(row["stages_sum_mean_ms"]) == pytest.approx(sum(stage_means), rel=1e-12)
        assert float(row["unattributed_mean_ms"]) == pytest.approx(step - sum(stage_means), rel=1e-9, abs=1e-15)
        assert float(row["step_device_mean_ms"]) == pytest.approx(step, rel=1e-12)
    assert (sweep / "sweep.png").stat().st_size > 0
    assert "2 jobs" in out.stdout
