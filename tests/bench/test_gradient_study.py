"""python -m lbm study gradient: its arguments, and gradient.json from a tiny run (lbm.bench.gradient_study)."""

import json

import pytest

from lbm.bench.gradient_study import parse
from lbm.cli import main
from lbm.diff.checkpointing import binomial_schedule
from lbm.errors import LbmError


@pytest.mark.parametrize("args", [["grid=8"], ["timing_grid=x"], ["timing_policy=revolve"], ["records=maybe"],
                                  ["policies=[sqrt,revolve]"], ["snapshots=0"], ["timing_grid=0"],
                                  ["memory_grid=3"], ["timing_steps=0"], ["repeats=0"]])
def test_bad_arguments_are_refused(args):
    with pytest.raises(LbmError):
        parse(args)


def test_bad_argument_is_one_line_and_writes_nothing(capsys, tmp_path):
    assert main(["study", "gradient", "timing_steps=", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbm: error:")
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_tiny_study_writes_timing_and_memory_that_checkpointing_bounds(tmp_path):
    out = tmp_path / "study"
    assert main(["study", "gradient", "records=false", "timing_grid=8", "timing_steps=10", "memory_grid=8",
                 "memory_steps=[16,256]", "policies=[none,sqrt,binomial]", "snapshots=[4]", "repeats=1", "--out",
                 str(out)]) == 0
    record = json.loads((out / "gradient.json").read_text())
    assert (out / "gradient.png").stat().st_size > 0
    t = record["timing"]
    assert t["forward_s"] > 0 and t["ratio"] == pytest.approx(t["value_and_grad_s"] / t["forward_s"])
    mem = {(r["policy"], r["steps"]): r for r in record["memory"]}
    assert set(mem) == {(p, s) for p in ("none", "sqrt", "binomial") for s in (16, 256)}
    growth = {p: mem[(p, 256)]["gradient_bytes"] / mem[(p, 16)]["gradient_bytes"] for p in ("none", "sqrt", "binomial")}
    assert growth["none"] > 8  # every step's state kept: grows with the steps (16x more steps)
    assert growth["sqrt"] < growth["none"] / 2
    # four states kept, whatever the steps: it grows by at most its schedule's table (16 bytes an action), which XLA
    # may hold in a buffer of the longer program while the shorter one's stays a constant (CI: exactly 343 x 16 bytes)
    grown = mem[("binomial", 256)]["gradient_bytes"] - mem[("binomial", 16)]["gradient_bytes"]
    assert grown <= 16 * len(binomial_schedule(256, 4))
    assert t["cpu_ratio"] == pytest.approx(t["value_and_grad_cpu_s"] / t["forward_cpu_s"])
    assert set(t["passes"]) == {"forward_pass", "recompute", "adjoint"}  # each pass of sqrt's gradient timed alone
    assert all(p["over_forward_step"] == pytest.approx(p["ms_per_step"] / t["forward_ms_per_step"])
               and p["ms_per_step"] > 0 for p in t["passes"].values())
    assert mem[("none", 256)]["forward_bytes"] == mem[("none", 16)]["forward_bytes"]  # the forward chunk does not grow
