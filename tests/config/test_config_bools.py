"""A true/false key takes true or false only: OmegaConf would read a number there (``native.pinning=3``) as true."""

import pytest

from lbm.cli import main
from lbm.config import load
from lbm.errors import LbmError

BOOL_KEYS = ["native.pinning", "output.plots", "output.vtk", "profile.enabled"]


@pytest.mark.parametrize("key", BOOL_KEYS)
@pytest.mark.parametrize("value", ["3", "0", "1.5"])
def test_a_number_for_a_true_false_key_is_refused_in_one_line(key, value):
    with pytest.raises(LbmError) as exc:
        load([f"{key}={value}"])
    assert str(exc.value) == f"{key}={value} is invalid: expected true or false" and exc.value.exit_code == 2


@pytest.mark.parametrize("value", [True, False])
def test_true_and_false_are_taken(value):
    run = load([f"native.pinning={str(value).lower()}", f"output.vtk={str(value).lower()}"])
    assert run.native.pinning is value and run.output.vtk is value


def test_a_sweep_with_a_number_is_refused_before_any_directory(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    code = main(["run", "-m", "output.vtk=true,1", "steps=10", f"hydra.sweep.dir={sweep}"])
    assert code == 2 and not sweep.exists()
    assert capsys.readouterr().err.strip().endswith("output.vtk=1 is invalid: expected true or false")
