"""The typed collision group: each kind's keys from its schema, a default two kinds share written once."""

from __future__ import annotations

import pytest
from helpers.runs import run_config

from lbm.config.checks import CONFIG_DIR
from lbm.config.schema import option_file
from lbm.config.sections import COLLISION_SCHEMAS as COLLISION_KINDS
from lbm.errors import LbmError
from lbm.kernels.collisions.trt import TrtRates


def test_every_collision_option_has_a_schema():
    assert {p.stem for p in (CONFIG_DIR / "collision").glob("*.yaml")} == set(COLLISION_KINDS)


@pytest.mark.parametrize("kind", ["trt", "mrt"])
def test_trt_and_mrt_share_one_default_of_magic(kind):
    assert "magic" not in option_file("collision", kind)  # written once: in the schema, not in either file
    assert run_config(f"collision={kind}").collision_params.magic == TrtRates.magic == 3 / 16
    assert run_config(f"collision={kind}", "collision.magic=0.25").collision_params.magic == 0.25


@pytest.mark.parametrize("overrides,message", [
    (["collision=trt", "collision.magic=abc"], "collision.magic=abc is invalid: expected a number"),
    (["collision=trt", "collision.magic=0"], "collision.magic=0.0 is invalid: expected a number > 0"),
    (["collision.magic=0.25"], "collision.magic is not a key of collision bgk"),
    (["collision=trt", "collision.bulk=1"], "collision.bulk is not a key of collision trt: its keys are name, magic"),
    (["collision=regularized", "collision.smagorinsky=x"], "collision.smagorinsky=x is invalid: expected a number"),
])
def test_a_collision_key_of_the_wrong_kind_or_type_is_refused_by_name(overrides, message):
    with pytest.raises(LbmError) as err:
        run_config(*overrides)
    assert str(err.value).startswith(message), str(err.value)
