"""scripts/backends_agree.py: where an accelerator's numbers part from the same process's CPU (issue 38)."""

import numpy as np
import pytest
from helpers.scripts import load_script

agree = load_script("backends_agree")


def test_relative_difference_names_the_largest_entry_and_counts_those_over_1e_5():
    ref = np.zeros((3, 4, 5))
    ref[0, 0, 0] = 2.0
    other = ref.copy()
    other[2, 1, 3] += 1e-3  # 5e-4 of the largest |value|
    other[1, 2, 2] += 1e-6  # 5e-7: under 1e-5
    rel, where = agree.relative(other, ref)
    assert rel == pytest.approx(5e-4) and where == "(2, 1, 3) (1 over 1e-5)"
    assert agree.relative(ref, ref) == (0.0, "(0, 0, 0)")


def test_without_a_configuration_it_says_how_to_give_one(capsys):
    assert agree.main(["--steps", "1"]) == 2
    assert "give the configuration after --" in capsys.readouterr().err


def test_stages_on_the_cpu_agree_with_themselves_and_a_dump_holds_the_stage_input_and_both_outputs(tmp_path, capsys):
    """Without an accelerator both sides are the CPU: every stage 0, and the dump has the three states."""
    agree.check_stages(["case=cavity", "grid.nx=16", "grid.ny=16", "output.plots=false"], [0, 2], {"collide@2"},
                       tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].split()[-1] for line in lines[:5]] == [
        "macroscopic", "equilibrium", "collide", "bounce_back", "stream"]
    assert len(lines) == 10 and all(" at " not in line for line in lines)  # every array equal: "f 0; drho 0; ..."
    saved = np.load(tmp_path / "stage-collide-2.npz")
    assert {"in_f", "cpu_f", "dev_f", "cpu_u", "dev_drho", "cpu_post", "dev_post"} <= set(saved.files)
    np.testing.assert_array_equal(saved["cpu_post"], saved["dev_post"])
    assert np.abs(saved["cpu_post"] - saved["in_f"]).max() > 1e-6  # the collision's output, not its input
