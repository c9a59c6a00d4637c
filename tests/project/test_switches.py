"""No switch on a boundary condition's type or a case's name: lbm/diff asks the conditions and the cases (DESIGN.md,
"Ask the component, never its type"), as the engines ask the conditions (tests/project/test_layers.py)."""

import ast
import functools

from helpers.switches import (
    case_name_switches,
    case_names,
    collision_kinds,
    condition_classes,
    kind_switches,
    switches_in,
    type_switches,
)

ASKING = ("diff", "cases", "boundaries", "kernels", "engines")
"""The packages that take a case's name from nowhere: its parameters, Setup and methods say all they need."""


def test_the_readers_find_every_kind_of_switch():
    """What main's diff/ held before it asked: each form is found, and the asking forms are not."""
    classes, names = condition_classes(), case_names()
    switching = ("type(bc) is kind\nisinstance(bc, InterpolatedBounceBack)\nKEYS[case.name]\n"
                 "BUILDERS = {'cavity': f}\nif case.name == 'cylinder': pass\nif case == 'cylinder': pass\n"
                 "if case.name not in BUILDERS: pass\nif param.case.name in ('cavity', 'poiseuille'): pass\n")
    tree = ast.parse(switching)
    assert len(type_switches(tree, classes)) == 2
    assert len(case_name_switches(tree, names)) == 6
    asking = ("bcs = tuple(bc.with_velocity_scaled(r) for bc in bcs)\nkeys = case.differentiable_keys()\n"
              "raise LbmError(f'case={case.name} has none')\nname = 'cylinder'\nif shape == 'ellipse': pass\n")
    assert type_switches(ast.parse(asking), classes) == [] and case_name_switches(ast.parse(asking), names) == []


def test_diff_switches_on_no_condition_type_and_no_case_name():
    """lbm/diff asks a condition for its adjoint form and its continuous inputs, and a case for its differentiable
    keys, values, objectives and traced Setup (lbm.boundaries.base.BoundaryCondition, lbm.cases.base.Case)."""
    classes, names = condition_classes(), case_names()
    assert {"InterpolatedBounceBack", "MovingWall", "Inlet", "PulledHalfway"} <= classes
    assert {"cavity", "cylinder", "poiseuille", "taylor_green"} <= names
    assert switches_in("diff", lambda tree: type_switches(tree, classes) + case_name_switches(tree, names)) == {}


def test_no_module_of_lbm_switches_on_a_condition_class():
    """No ``isinstance``/``issubclass`` on a boundary condition class anywhere in lbm (the conditions' own package
    included: a subclass keeps every fast path, tests/boundaries)."""
    classes = condition_classes()

    def on_conditions(tree: ast.AST) -> list[str]:
        return [hit for hit in type_switches(tree, classes) if "isinstance on" in hit]

    assert switches_in(".", on_conditions) == {}


@functools.cache
def _case_name_switches() -> dict[str, list[str]]:
    names = case_names()
    return {k: v for folder in ASKING for k, v in switches_in(folder, lambda t: case_name_switches(t, names)).items()}


def test_the_layers_below_the_run_take_no_case_by_name():
    """diff, cases, boundaries, kernels and engines never compare a case's name or key a table by it."""
    assert _case_name_switches() == {}


def test_the_kind_reader_finds_what_main_switched_on():
    """What main held outside lbm/kernels/collisions before the kinds were asked (config/run.py, simulation/outputs.py,
    cases/traced.py, engines/native/codegen.py, bench/compare.py), and main's memory table keyed by (case, dims)."""
    kinds = collision_kinds()
    switching = ('if tau < 0.51 and run.collision == "bgk": pass\nif run.collision in ("trt", "mrt"): pass\n'
                 'kind = collision or ("trt" if two else "bgk")\nname = parts["collision"] or "bgk"\n')
    assert len(kind_switches(ast.parse(switching), kinds)) == 4
    asking = ('if tau < 0.51 and COLLISION_KINDS[run.collision].tau_warning: pass\nname = collision or DEFAULT_COLLISION\n'
              'COLLISIONS = {"bgk": "SRT", "trt": "TRT"}\nif run.collision != collision: pass\n')
    assert kind_switches(ast.parse(asking), kinds) == []
    assert len(case_name_switches(ast.parse('SETUP_BYTES = {("cavity", 2): 272, ("cavity", 3): 552}'), case_names())) == 1


def test_no_module_outside_the_collisions_switches_on_a_collision_kind():
    """A kind's behaviour is the kind's (lbm.kernels.collisions.operator.CollisionOperator: tau_warning, two_rates,
    traced_odd, recorded, traced_omega_minus): no module outside lbm/kernels/collisions compares a kind's name or
    chooses one in place (policy defaults are named constants: lbm.config.defaults, lbm.bench.DEFAULT_COLLISION)."""
    kinds = collision_kinds()
    assert {"bgk", "trt", "mrt", "cumulant"} <= kinds
    found = switches_in(".", lambda tree: kind_switches(tree, kinds))
    assert {path: hits for path, hits in found.items() if not path.startswith("kernels/collisions/")} == {}


def test_the_config_and_the_memory_estimate_ask_the_case():
    """A case's picks and dimensions are its parameter class's (lbm.config.cases), its set-up and output bytes its
    class's (lbm.cases): lbm.config.defaults, lbm.config.run and lbm.simulation.memory take no case by name."""
    names = case_names()
    modules = ("config/defaults.py", "config/run.py", "simulation/memory.py")
    assert {k: v for m in modules for k, v in switches_in(m, lambda tree: case_name_switches(tree, names)).items()} == {}
