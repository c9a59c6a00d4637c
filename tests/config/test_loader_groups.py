"""The loader's composition from a kept composition of the group overrides (lbm.config.loader._compose_from_groups):
the same config and group choices as Hydra's whole composition, Hydra composing once per set of groups, and every
list it cannot take (a sweep, an interpolation, an error) left to Hydra's whole composition."""

from __future__ import annotations

import pytest

from lbm.config import loader

LISTS = [
    ("config", []),
    ("config", ["grid.nx=40", "grid.ny=24"]),
    ("config", ["case=cavity", "grid.nx=33", "steps=7", "output.plots=false"]),
    ("config", ["grid.nx=33", "case=cavity", "flow.reynolds=250"]),
    ("config", ["case=taylor_green_3d", "lattice=d3q27", "collision=cumulant", "grid.nx=16", "grid.ny=16",
                "grid.nz=16"]),
    ("config", ["case=cylinder", "collision=trt", "collision.magic=0.1875", "engine=xla", "precision=float64"]),
    ("config", ["case=cylinder", "collision=regularized", "collision.smagorinsky=0.1", "output.every=50"]),
    ("config", ["case=poiseuille", "lattice=d2q9", "mode=instrumented", "profile.enabled=true"]),
    ("config", ["case=duct", "lattice=d3q19", "hydra.run.dir=/tmp/somewhere", "hydra.job.chdir=false"]),
    ("config", ["case=schafer_turek", "++steps=11"]),
    ("config", ["case=obstacle", "grid.nx=80", "output.frame_limit=0.02", "checkpoint.resume=null"]),
    ("bench", []),
    ("bench", ["lattice=d3q19", "collision=kbc", "sizes=[16,[24,20,18]]", "variants=[xla,naive]", "repeats=2"]),
    ("bench", ["cases=[periodic,cavity]", "precision=[float32,float64]", "grid.nx=64", "grid.ny=48"]),
]


def _whole(overrides: list[str], config_name: str) -> tuple[dict, dict]:
    """Hydra's whole composition of the list, finished as the loader finishes it."""
    return loader._finished(loader._hydra_compose(list(overrides), config_name))


@pytest.mark.parametrize(("config_name", "overrides"), LISTS, ids=lambda v: v if isinstance(v, str) else None)
def test_a_composition_from_the_groups_equals_hydras_whole_composition(config_name: str, overrides: list[str]) -> None:
    from lbm.config.schema import register

    register()
    kept = loader._compose_from_groups(list(overrides), config_name)
    assert kept is not None, "this list is one the kept composition must take"
    assert loader._finished(kept) == _whole(overrides, config_name)


def test_hydra_composes_each_set_of_groups_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from lbm.config.schema import register

    register()
    calls: list[list[str]] = []
    compose = loader._hydra_compose

    def counted(overrides: list[str], config_name: str) -> object:
        calls.append(list(overrides))
        return compose(overrides, config_name)

    monkeypatch.setattr(loader, "_hydra_compose", counted)
    monkeypatch.setattr(loader, "_by_groups", type(loader._by_groups)())
    configs = [loader._finished(loader._compose_from_groups(["case=cavity", f"grid.nx={n}", f"steps={n}"], "config"))
               for n in (20, 21, 22)]
    assert calls == [["case=cavity"]]
    assert [c[0]["grid"]["nx"] for c in configs] == [20, 21, 22]
    assert [c[0]["steps"] for c in configs] == [20, 21, 22]
    assert {c[1]["case"] for c in configs} == {"cavity"}
    # a change to a kept composition's copy reaches no later one
    first = loader._compose_from_groups(["case=cavity"], "config")
    first.grid.nx = 999
    assert loader._finished(loader._compose_from_groups(["case=cavity"], "config"))[0]["grid"]["nx"] != 999


@pytest.mark.parametrize("overrides", [
    ["grid.nx=16,32"],                       # a sweep
    ["hydra.run.dir=out/${oc.env:HOME}"],    # an interpolation: resolved at every composition
    ["case=nope"],                           # an unknown option: Hydra's own error names it
    ["grid.nw=3"],                           # an unknown key
    ["grid.nx=abc"],                         # a value of the wrong type
])
def test_what_the_kept_composition_cannot_take_is_left_to_hydra(overrides: list[str]) -> None:
    from lbm.config.schema import register

    register()
    assert loader._compose_from_groups(list(overrides), "config") is None


def test_errors_are_hydras_own_one_line() -> None:
    with pytest.raises(loader.LbmError, match="grid.nx"):
        loader.load(["case=cavity", "grid.nx=abc"])
    with pytest.raises(loader.LbmError, match="case=cavetty is not known.*cavity"):
        loader.load(["case=cavetty"])
