"""scripts/engines_agree.py: every engine that takes a configuration, against xla; refusals said, not hidden."""

from __future__ import annotations

import pytest
from helpers.scripts import load_script

agree = load_script("engines_agree")


@pytest.mark.slow  # four engines compiled twice, the pallas kernel interpreted: about 6 s
def test_engines_agree_and_refusals_are_listed(capsys):
    # MRT with a Smagorinsky model: native refuses it (its kernel has no eddy viscosity), pallas runs it, the
    # instrumented mode agrees bitwise
    assert agree.main(["case=taylor_green", "grid.nx=8", "grid.ny=4", "collision=mrt", "collision.smagorinsky=0.1",
                       "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "native         refused: the native kernel has no Smagorinsky model (collision.smagorinsky)" in out
    assert "pallas             2" in out  # the Pallas kernel runs every collision kind
    assert "instrumented       2        0.00e+00" in out and "engines_agree: agree" in out
    # TRT: the pallas kernel runs; float32 rounding (measured 3e-8 after 2 steps) is inside the default bound and
    # over a bound of 1e-12, which then says DIFFER and exits 1
    overrides = ["case=taylor_green", "grid.nx=8", "grid.ny=4", "collision=trt", "--steps", "2"]
    assert agree.main(overrides) == 0
    assert "pallas             2" in capsys.readouterr().out
    assert agree.main(overrides + ["--bound", "1e-12"]) == 1
    assert "engines_agree: DIFFER" in capsys.readouterr().out


def test_a_bad_override_is_one_line_and_exit_2(capsys):
    assert agree.main(["case=nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "case=nope is not known" in err[0]
