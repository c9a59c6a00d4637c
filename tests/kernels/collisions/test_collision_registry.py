"""The collision kinds as components: one registry that config, cases and engines read; an engine that lacks a kind,
or a boundary condition's form, says so with EngineUnavailable and ``auto`` falls back."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from helpers.runs import run_config, setup_for

from lbm.boundaries.base import BoundaryCondition, FormUnavailable, pytree_dataclass
from lbm.config.checks import CONFIG_DIR
from lbm.config.sections import COLLISION_SCHEMAS
from lbm.engines import EngineUnavailable, make_engine
from lbm.engines.native.codegen import KernelSpec
from lbm.engines.native.collisions import KINDS
from lbm.kernels.collisions import COLLISION_KINDS, Collision, CollisionOperator, trt_omega_minus
from lbm.lattice import D2Q9

CAVITY = ["case=cavity", "grid.nx=12", "steps=4"]


class _NoNative(CollisionOperator):
    """A kind with a jnp rule and no native body (BGK's rule under another name)."""

    name = "test_no_native"

    def apply(self, spec: Any, f: Any, feq: Any, u: Any, lattice: Any, force: Any) -> Any:
        return f - spec.omega * (f - feq)


def test_every_kind_has_a_config_option_and_a_schema_from_its_own_rates():
    options = {p.stem for p in (CONFIG_DIR / "collision").glob("*.yaml")} - {"auto"}
    assert options == set(COLLISION_KINDS)
    for name, op in COLLISION_KINDS.items():
        keys = {f.name for f in dataclasses.fields(COLLISION_SCHEMAS[name])} - {"name"}
        assert keys == {f.name for f in dataclasses.fields(op.Rates)}, name


@pytest.mark.parametrize("kind", sorted(COLLISION_KINDS))
def test_a_case_asks_the_kind_for_its_rates(kind):
    """Case.relaxation is the kind's: bgk and trt give no spec (the rate pair), every other kind its own spec."""
    lattice = [] if COLLISION_KINDS[kind].lattices is None else ["lattice=d2q9"]
    run = run_config(*CAVITY, f"collision={kind}", *lattice)
    from lbm.simulation import make_case

    rel = make_case(run).relaxation(10.0)
    omega_minus, spec = COLLISION_KINDS[kind].relaxation(rel["omega_plus"], run.collision_params)
    assert (rel["omega_minus"], rel["collision"]) == (omega_minus, spec)
    assert (spec is None) == (kind in ("bgk", "trt"))
    if spec is not None:
        assert spec.kind == kind and spec.omega == rel["omega_plus"]
    expected_minus = {"trt": trt_omega_minus(rel["omega_plus"], 3 / 16), "mrt": 1.0}  # mrt: its odd rate's default
    assert omega_minus == pytest.approx(expected_minus.get(kind, rel["omega_plus"]), rel=1e-15)


def test_the_native_kinds_are_those_with_a_native_body():
    assert set(KINDS) == {n for n, op in COLLISION_KINDS.items() if op.native is not None}
    assert {"bgk", "trt"}.isdisjoint(KINDS)


def test_a_kind_without_a_native_body_is_unavailable_there_and_auto_falls_back(monkeypatch):
    monkeypatch.setitem(COLLISION_KINDS, _NoNative.name, _NoNative())
    with pytest.raises(EngineUnavailable, match="no native collision 'test_no_native'"):
        KernelSpec(D2Q9, "float32", False, False, "", _NoNative.name)
    setup = dataclasses.replace(setup_for(CAVITY, "float32"), collision=Collision(_NoNative.name, 1.2))
    with pytest.raises(EngineUnavailable):
        make_engine(setup, engine="native", platform="cpu")
    engine = make_engine(setup, engine="auto", platform="cpu")
    assert engine.name == "xla" and "test_no_native" in engine.note
    f, _ = engine.advance(setup.initial_populations(), 2)
    assert np.isfinite(np.asarray(f)).all()


def test_a_condition_without_a_block_form_makes_auto_fall_back(monkeypatch):
    """A condition that lacks on_block (and no rule of the bulk kernels): FormUnavailable, so native is unavailable
    and auto runs xla."""
    setup = setup_for(CAVITY, "float32")
    first = setup.boundaries[0]
    bare = pytree_dataclass(type("Bare" + type(first).__name__, (type(first),),
                                 {"on_block": BoundaryCondition.on_block, "bulk_rule": BoundaryCondition.bulk_rule,
                                  "__module__": __name__}))
    boundaries = (bare(**{f.name: getattr(first, f.name) for f in dataclasses.fields(first)}), *setup.boundaries[1:])
    setup = dataclasses.replace(setup, boundaries=boundaries)
    with pytest.raises(FormUnavailable):
        boundaries[0].on_block(None)
    with pytest.raises(EngineUnavailable, match="no block form"):
        make_engine(setup, engine="native", platform="cpu")
    engine = make_engine(setup, engine="auto", platform="cpu")
    assert engine.name == "xla" and "no block form" in engine.note
