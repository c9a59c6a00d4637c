"""scripts/taylor_green_reynolds.py: the Reynolds number of a Taylor-Green vortex recovered from its final field."""

import json

import pytest
from helpers.scripts import load_script


@pytest.mark.slow
def test_reynolds_recovered_from_the_final_velocity(tmp_path):
    script = load_script("taylor_green_reynolds")
    assert script.main(["--true", "30", "--guess", "12", "--grid", "8", "--steps", "40", "--iterations", "10",
                        "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "reynolds_recovery.json").read_text())
    assert record["recovered_reynolds"] == pytest.approx(30.0, rel=1e-6)
    assert record["iterations"] <= 10
    first = record["history"][0]
    assert first["gradient_reverse"] == pytest.approx(first["gradient_forward"], rel=1e-8)  # reverse = forward mode
    assert (tmp_path / "reynolds_recovery.png").stat().st_size > 0
