"""The defaults a case picks for the lattice and Reynolds number asked for (lbm.config.defaults), only where the user
left a key open, and the one-line refusals of a lattice of the wrong dimension."""

import pytest
from helpers.runs import run_config

from lbm.config.defaults import cavity_collision, cavity_lid
from lbm.config.run import validate_collision
from lbm.errors import ConfigError


def picked(run):
    return {p.key: p.value for p in run.picked}


def test_the_cube_at_re_1000_gets_the_validated_set_up():
    """Issue 39 item 8: the defaults a user types for the cube pick docs/validation_3d.md's 64^3 set-up."""
    run = run_config("case=cavity", "lattice=d3q19", "flow.reynolds=1000")
    assert run.grid == (66, 66, 66)
    assert run.collision == "trt" and run.collision_params.magic == pytest.approx(3 / 16)
    assert run.flow.u_lattice == 0.1  # tau 0.5192, not BGK's 0.5096 at the lid speed 0.05
    assert picked(run) == {"grid.nx": 66, "grid.ny": 66, "grid.nz": 66, "flow.u_lattice": 0.1, "collision": "trt"}


def test_the_2d_cavity_keeps_its_defaults_and_re_1000_raises_the_lid_speed():
    run = run_config("case=cavity")
    assert (run.grid, run.collision, run.flow.u_lattice) == ((130, 130), "bgk", 0.05)
    run = run_config("case=cavity", "flow.reynolds=1000")  # 0.05 gives tau 0.5192: validate's Re 1000 set-up
    assert (run.grid, run.collision, run.flow.u_lattice) == ((130, 130), "bgk", 0.1)


def test_keys_the_user_sets_are_never_changed():
    run = run_config("case=cavity", "lattice=d3q19", "flow.reynolds=1000", "collision=bgk", "flow.u_lattice=0.05",
                     "grid.nx=34")
    assert (run.collision, run.flow.u_lattice, run.grid) == ("bgk", 0.05, (34, 34, 34))
    assert picked(run) == {"grid.ny": 34, "grid.nz": 34}  # the cube follows grid.nx
    run = run_config("case=cavity", "grid.nx=66", "grid.ny=34", "flow.u_lattice=0.1", "collision=trt")
    assert (run.grid, run.collision, run.flow.u_lattice, run.picked) == ((66, 34), "trt", 0.1, ())


def test_cavity_rules():
    assert cavity_lid(128, 100.0, None)[0] == 0.05
    assert cavity_lid(64, 1000.0, None)[0] == 0.1
    assert cavity_lid(64, 1000.0, 0.52)[0] == 0.05  # flow.tau sets the viscosity
    assert cavity_collision(3, 64, 100.0, None, 0.05)[0] == "trt"
    assert cavity_collision(2, 128, 100.0, None, 0.05)[0] == "bgk"
    assert cavity_collision(2, 128, 10000.0, None, 0.1)[0] == "trt"  # tau 0.5038 < 0.51


@pytest.mark.parametrize(("lattice", "kind"), [("d3q19", "kbc"), ("d3q27", "cumulant")])
def test_taylor_green_3d_collision_follows_the_lattice(lattice, kind):
    """Issue 39 item 9: the cumulant needs d3q27; on d3q19 the case picks KBC (validate's TGV_32)."""
    run = run_config("case=taylor_green_3d", f"lattice={lattice}")
    assert run.collision == kind and picked(run) == {"collision": kind}
    assert run_config("case=taylor_green_3d", f"lattice={lattice}", "collision=bgk").collision == "bgk"


def test_a_2d_lattice_for_a_3d_case_names_the_lattice_and_a_fix_that_works():
    with pytest.raises(ConfigError) as err:
        run_config("case=taylor_green_3d", "lattice=d2q9")
    message = str(err.value)
    assert message.startswith("lattice=d2q9 is invalid") and "grid.nz" not in message
    assert "use lattice=d3q19" in message
    run_config("case=taylor_green_3d", "lattice=d3q19")  # the suggestion runs


def test_explicit_cumulant_on_d3q19_is_still_refused_and_auto_needs_a_rule():
    with pytest.raises(ConfigError, match="lattice=d3q19 is invalid"):
        run_config("case=taylor_green_3d", "lattice=d3q19", "collision=cumulant")
    with pytest.raises(ConfigError, match="collision=auto is invalid.*case cylinder"):
        run_config("collision=auto")


def test_auto_is_a_run_s_choice_only():
    """bench and the other users of the collision group get a kind, never auto."""
    with pytest.raises(ConfigError, match="collision=auto is invalid: expected one of bgk"):
        validate_collision({"name": "auto"})
    assert validate_collision({"name": "auto"}, auto=True).name == "auto"


def test_the_run_log_names_the_picked_keys(tmp_path):
    """The picks are logged where the run logs its parameters (lbm.log), also when preflight built the case."""
    import lbm

    res = lbm.run(["case=cavity", "grid.nx=18", "steps=20", "output.plots=false"], run_dir=tmp_path / "run")
    line = next(ln for ln in (res.run_dir / "lbm.log").read_text().splitlines() if "picked the keys left open" in ln)
    assert "cavity picked the keys left open: " in line and "flow.u_lattice=" in line and "grid.ny=18" in line
    assert "grid.nx=" not in line  # set by the user
