"""flow.tau and flow.u_lattice: a case that derives the velocity from tau (schafer_turek) refuses a u_lattice that
disagrees with it, one that needs the velocity refuses none; the documented ways of setting either keep working."""

from __future__ import annotations

import pytest
from helpers.runs import run_config

from lbm.cli import main
from lbm.errors import LbmError
from lbm.lattice import CS2
from lbm.simulation import make_case

ST = ["case=schafer_turek", "case.cells_per_diameter=10"]


@pytest.mark.parametrize("extra", [[], ["case.variant=3D-1Z", "lattice=d3q19", "grid.nz=4"]], ids=["2D-1", "3D-1Z"])
def test_an_explicit_u_lattice_beside_the_default_tau_is_refused_naming_both_and_the_fix(extra):
    with pytest.raises(LbmError) as err:
        make_case(run_config(*ST, *extra, "flow.u_lattice=0.03"))
    message = str(err.value)
    assert message.startswith("flow.u_lattice=0.03 and flow.tau=0.53 over-determine the flow")
    assert "flow.tau=null" in message and "\n" not in message


def test_a_u_lattice_that_tau_gives_anyway_is_accepted():
    u = 20 * CS2 * 0.03 / 10  # what tau 0.53 gives at Re 20 and N = 10
    assert make_case(run_config(*ST, f"flow.u_lattice={u!r}")).run.flow.u_lattice == pytest.approx(u, rel=1e-12)


def test_the_command_line_refuses_it_in_one_line_with_exit_2_before_the_run_directory_exists(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["run", *ST, "flow.u_lattice=0.03", f"hydra.run.dir={run_dir}"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "flow.u_lattice=0.03 and flow.tau=0.53" in err and "flow.tau=null" in err and "Traceback" not in err
    assert not run_dir.exists()


def test_the_documented_settings_of_the_velocity_keep_working():
    derived = make_case(run_config(*ST)).run  # the default: tau 0.53, U_mean = Re c_s^2 (tau - 1/2) / N
    assert derived.flow.tau == 0.53 and derived.flow.u_lattice == pytest.approx(20 * CS2 * 0.03 / 10, rel=1e-12)
    given = make_case(run_config(*ST, "flow.tau=null", "flow.u_lattice=0.0125")).run  # docs/dfg.md
    assert given.flow.tau is None and given.flow.u_lattice == 0.0125
    assert make_case(run_config(*ST, "flow.tau=null")).run.flow.u_lattice == 0.05  # the YAML's U_mean without tau
    assert make_case(run_config(*ST, "flow.tau=0.6")).run.flow.u_lattice == pytest.approx(20 * CS2 * 0.1 / 10, rel=1e-12)
    again = make_case(run_config(*ST, "steps=auto")).run  # resolving steps=auto re-derives the same run
    assert again.flow.u_lattice == derived.flow.u_lattice and again.grid == derived.grid


@pytest.mark.parametrize("overrides", [
    ["case=cylinder", "flow.tau=0.6", "flow.u_lattice=null"],  # the cylinder derives Re from tau and u_lattice
    ["case=cylinder", "flow.u_lattice=null"],
    [*ST, "flow.tau=null", "flow.u_lattice=null"],
])
def test_a_missing_velocity_is_refused_where_nothing_derives_it(overrides):
    with pytest.raises(LbmError, match=r"^flow\.u_lattice=null is invalid: expected a number"):
        make_case(run_config(*overrides))
