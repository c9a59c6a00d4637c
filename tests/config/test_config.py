"""lbm.config: the schemas refuse unknown keys and wrong types, load() is the one validated path, once per job."""

import collections
import subprocess
import sys
import warnings

import pytest
from helpers.paths import REPO

import lbm.config.loader as loader
from lbm.cli import main
from lbm.config import LbmWarning, RunConfig, compose, group_options, load, validate
from lbm.config.schema import RunSchema, check_keys, option_keys
from lbm.errors import ConfigError, LbmError

REFUSED = [
    (["no_such_key=1"], "no_such_key is not a run config key"),
    (["+no_such_key=1"], "no_such_key is not a run config key"),
    (["+grid.nw=3"], "grid.nw is not a run config key"),
    (["case.radus=3"], "case.radus is not a key of case cylinder"),
    (["+case.radus=3"], "case.radus is not a key of case cylinder"),
    (["case=cavity", "case.radius=3"], "case.radius is not a key of case cavity"),
    (["case.name=cavity"], "case.name=cavity does not match case=cylinder"),
    (["collision.magic=0.2"], "collision.magic is not a key of collision bgk"),
    (["grid.nx=1.5"], "grid.nx=1.5 is invalid: expected an integer"),
    (["grid.nx=abc"], "grid.nx=abc is invalid: expected an integer"),
    (["grid.nx=null"], "grid.nx=null is invalid: expected an integer"),
    (["grid.nz=x"], "grid.nz=x is invalid: expected an integer or null"),
    (["grid=3"], "grid=3 is invalid: expected a group of keys: nx, ny, nz"),
    (["flow.reynolds=abc"], "flow.reynolds=abc is invalid: expected a number"),
    (["output.plots=maybe"], "output.plots=maybe is invalid: expected true or false"),
    (["steps=abc"], "steps=abc is invalid: expected an integer >= 1 or auto"),
    (["case=nope"], "case=nope is not known: choose one of cavity, cylinder, duct, obstacle, poiseuille, schafer_turek, "
                    "taylor_green"),
    (["lattice=d5q99"], "lattice=d5q99 is not known: choose one of d2q9, d3q19, d3q27"),
    (["hydra.nonsense=1"], "hydra.nonsense is not a Hydra setting"),
]


@pytest.mark.parametrize("overrides,message", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_load_refuses_with_one_line_naming_the_key(overrides, message):
    with pytest.raises(LbmError) as exc:
        load(overrides)
    text = str(exc.value)
    assert text.startswith(message), text
    assert "\n" not in text and exc.value.exit_code == 2


def test_unknown_case_key_lists_the_case_keys():
    with pytest.raises(LbmError, match="its keys are name, radius, center, inlet"):
        load(["case.radus=3"])


def test_a_key_of_the_chosen_option_is_accepted():
    run = load(["collision=trt", "collision.magic=0.25", "case.radius=12"])
    assert run.collision == "trt" and run.collision_params.magic == 0.25 and run.case_params["radius"] == 12


@pytest.mark.parametrize("case", group_options("case"))
def test_load_equals_validate_of_the_composed_config(case):
    given = [f"case={case}"]  # every case's defaults, the 3D ones (duct, taylor_green_3d) on their 3D lattices
    run = load(given)
    assert isinstance(run, RunConfig)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert run == validate(compose(given))
    assert run.case == case and set(run.case_params) == set(option_keys("case", case)) - {"name"}


def test_every_case_and_collision_option_composes_and_names_itself():
    for group in ("case", "collision"):
        for option in group_options(group):
            cfg = compose([f"{group}={option}"])
            assert cfg[group]["name"] == option
            assert set(cfg[group]) == set(option_keys(group, option))


@pytest.mark.slow
def test_validation_runs_once_per_job_in_a_cli_run(monkeypatch, tmp_path):
    monkeypatch.setattr(loader, "_validated", collections.OrderedDict())  # other tests may have run these configs
    calls = []
    monkeypatch.setattr(loader, "validate", lambda cfg: calls.append(cfg) or validate(cfg))
    args = ["case=taylor_green", "grid.ny=12", "steps=5", "output.plots=false"]
    assert main(["run", "grid.nx=12", *args, f"hydra.run.dir={tmp_path / 'one'}"]) == 0
    assert len(calls) == 1, "prevalidation and the Hydra task must share one validation"
    calls.clear()
    assert main(["run", "-m", "grid.nx=14,16", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}"]) == 0
    assert sorted(c["grid"]["nx"] for c in calls) == [14, 16]
    assert len(list((tmp_path / "sweep").glob("*/metrics.json"))) == 2


def test_cached_validation_replays_its_warnings():
    overrides = ["case=taylor_green", "flow.u_lattice=0.11"]
    for _ in range(2):  # the second load is a cache hit: it must warn the same
        with pytest.warns(LbmWarning, match="Mach 0.191"):
            load(overrides)


def test_cached_config_is_the_same_object_for_the_same_content():
    assert load(["case=cavity", "grid.nx=40"]) is load(["grid.nx=40", "case=cavity"])
    assert load(["case=cavity", "grid.nx=40"]) is not load(["case=cavity", "grid.nx=42"])


def test_check_keys_refuses_a_key_added_to_a_plain_dict():
    cfg = compose(["case=poiseuille"])
    cfg["flow"]["viscosity"] = 0.1
    with pytest.raises(LbmError, match="^flow.viscosity is not a run config key"):
        check_keys(cfg, "config")
    assert {f for f in RunSchema.__dataclass_fields__} == set(compose([]))


def test_config_imports_neither_cases_nor_jax_nor_hydra():
    code = ("import sys, lbm.config; bad = [m for m in sys.modules if m.startswith(('lbm.cases', 'jax', 'hydra'))];"
            "print(bad); sys.exit(bool(bad))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- bench: the same schemas, and only what will run is validated -----------------------------------

def test_bench_schema_refuses_unknown_keys_and_wrong_types():
    from lbm.bench.cli import compose_bench

    with pytest.raises(LbmError, match="^foo is not a bench config key"):
        compose_bench(["foo=1"])
    with pytest.raises(ConfigError, match="^repeats=1.5 is invalid: expected an integer"):
        compose_bench(["repeats=1.5"])


def test_bench_validates_only_the_cases_it_will_run():
    from lbm.bench.cli import compose_bench, plan

    box = ["lattice=d3q19", "grid.nx=128", "grid.ny=128", "grid.nz=128"]
    p = plan(compose_bench([*box, "cases=[periodic]"]))  # cylinder_grid.nz is null: not asked for, not checked
    assert {c.case for c, _ in p["configs"]} == {"periodic"}
    assert {c.grid for c, _ in p["configs"]} == {(128, 128, 128)}
    with pytest.raises(ConfigError, match=r"^cylinder_grid.nz=null is invalid: .* \(set the cells along z, e.g. "
                                          r"cylinder_grid.nz=32\)$"):
        plan(compose_bench(box))  # both cases (the default): the cylinder's grid must be 3D too
    p = plan(compose_bench(["cases=[cylinder]", "grid.nx=2"]))  # the box is not run: its size is not checked
    assert {c.grid for c, _ in p["configs"]} == {(420, 180)}


@pytest.mark.parametrize("collision,warned", [("bgk", True), ("trt", False), ("mrt", False), ("regularized", False)])
def test_tau_near_one_half_warns_for_bgk_only(collision, warned):
    """tau = 0.505 < TAU_WARN: the warning tells a BGK run to use trt; a trt, mrt or regularized run is that remedy."""
    from lbm.config.run import viscosity

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nu, tau, _ = viscosity(load(["flow.tau=0.505", f"collision={collision}"]), 10.0)
    assert abs(tau - 0.505) < 1e-15 and abs(nu - 0.005 / 3) < 1e-15
    messages = [str(w.message) for w in caught if issubclass(w.category, LbmWarning)]
    assert messages == (["tau=0.50500 is close to 0.5: BGK may go unstable; lower flow.reynolds, raise the resolution "
                         "or use collision=trt"] if warned else [])


def test_the_suites_memoised_composition_hands_out_copies_and_keeps_no_failure():
    """tests/conftest.py composes each list of overrides once per process (compose_once): a caller that changes its
    config does not change the next caller's, and a refused list is refused again, with its message."""
    first = compose(["case=cavity", "grid.nx=24"])
    first["grid"]["nx"] = 7
    assert compose(["case=cavity", "grid.nx=24"])["grid"]["nx"] == 24
    for _ in range(2):
        with pytest.raises(LbmError, match="grid.nx=abc is invalid"):
            compose(["grid.nx=abc"])
