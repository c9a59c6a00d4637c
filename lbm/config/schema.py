"""Hydra structured-config schemas of ``configs/config.yaml`` (run) and ``configs/bench.yaml``.

The sections (:mod:`lbm.config.sections`), each case's parameters (:mod:`lbm.config.cases`) and
each collision kind's rates (:data:`lbm.config.sections.COLLISION_SCHEMAS`) give every key its type;
registered in Hydra's ConfigStore and named first in the YAML defaults lists, they make Hydra refuse
wrong types while composing. The values and their comments stay in the YAML files (``MISSING`` here
means: set there); a default several options share is written once, in their schema (``magic``).

The keys of the groups ``case`` and ``collision`` are checked against the chosen option's schema and
YAML file by :func:`check_keys`, which also refuses the keys a ``+key=value`` override adds to a
closed node (Hydra adds those without checking). A collision validates to the one section
:class:`lbm.config.sections.Collision` (every kind's rates, None where the kind has none).
"""

import dataclasses
import difflib
import functools
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import MISSING

from lbm.config.cases import CASE_PARAMS, CaseParams
from lbm.config.checks import CONFIG_DIR, did_you_mean, group_options
from lbm.config.sections import (
    COLLISION_SCHEMAS,
    Bandwidth,
    Checkpoint,
    CollisionKind,
    Flow,
    Gradient,
    Grid,
    LatticeGroup,
    Native,
    Output,
    Parallel,
    Profile,
    Scaling,
    thawed,
)
from lbm.errors import LbmError

OPEN_GROUP = {"group": True}
"""Field metadata of a config group whose keys are checked against the chosen option's YAML file."""


@dataclasses.dataclass(frozen=True)
class RunSchema:
    """``configs/config.yaml``: the configuration of ``python -m lbm run``."""

    case: CaseParams = dataclasses.field(default=MISSING, metadata=OPEN_GROUP)  # typed by the case's own schema
    lattice: LatticeGroup = dataclasses.field(default_factory=LatticeGroup)
    collision: CollisionKind = dataclasses.field(default=MISSING, metadata=OPEN_GROUP)  # typed by the kind's schema
    mode: str = MISSING
    engine: str = MISSING
    precision: str = MISSING
    steps: Any = MISSING  # an integer or "auto"
    steps_per_dispatch: int = MISSING
    grid: Grid = dataclasses.field(default_factory=Grid)
    flow: Flow = dataclasses.field(default_factory=Flow)
    output: Output = dataclasses.field(default_factory=Output)
    checkpoint: Checkpoint = dataclasses.field(default_factory=Checkpoint)
    gradient: Gradient = dataclasses.field(default_factory=Gradient)
    parallel: Parallel = dataclasses.field(default_factory=Parallel)
    native: Native = dataclasses.field(default_factory=Native)
    profile: Profile = dataclasses.field(default_factory=Profile)


@dataclasses.dataclass(frozen=True)
class BenchSchema:
    """``configs/bench.yaml``: the configuration of ``python -m lbm bench`` (its grids and lattice are run's)."""

    lattice: LatticeGroup = dataclasses.field(default_factory=LatticeGroup)
    collision: CollisionKind = dataclasses.field(default=MISSING, metadata=OPEN_GROUP)  # typed by the kind's schema
    collisions: Any = MISSING  # null or a list of collision names, each with its group's defaults
    cases: list[str] = MISSING
    variants: list[str] = MISSING
    precision: Any = MISSING  # one precision or a list of them
    grid: Grid = dataclasses.field(default_factory=Grid)
    sizes: Any = MISSING  # null or a list of sizes: n or [nx, ny(, nz)]
    parallel: Scaling = dataclasses.field(default_factory=Scaling)
    cylinder_grid: Grid = dataclasses.field(default_factory=Grid)
    repeats: int = MISSING
    warmup: int = MISSING
    min_time_s: float = MISSING
    steps: Any = MISSING  # an integer or "auto"
    max_steps: int = MISSING
    steps_per_dispatch: int = MISSING
    stage_steps: int = MISSING
    kernel_profile: int = MISSING
    bandwidth: Bandwidth = dataclasses.field(default_factory=Bandwidth)
    output: str = MISSING


SCHEMAS: dict[str, type] = {"config": RunSchema, "bench": BenchSchema}
"""The schema of each primary config, registered under ``<config>_schema``."""


@functools.cache
def cells_across(n: Any, length: Any, cell: Any, extra: Any) -> int:
    """``round(length / cell * n) + extra``: a grid size derived from cells per length (the YAML resolver lbm.cells)."""
    return round(float(length) / float(cell) * int(n)) + int(extra)


def if_null(given: Any, value: Any) -> Any:
    """``value`` where ``given`` is null, else null (the YAML resolver lbm.if_null): a default that yields to the key
    that over-determines it (schafer_turek: flow.u_lattice, unless flow.tau sets U_mean)."""
    return value if given is None else None


@functools.cache
def register() -> None:
    """Store the schemas in Hydra's ConfigStore (once per process), as the YAML defaults lists name them (each case's
    parameters in the group ``case`` as ``<case>_schema``), and the resolver ``lbm.cells`` with which a case's YAML
    derives its grid from its resolution and ``lbm.if_null`` (schafer_turek)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    store = ConfigStore.instance()
    for config_name, schema in SCHEMAS.items():
        store.store(name=f"{config_name}_schema", node=thawed(schema))
    for case, params in CASE_PARAMS.items():
        store.store(group="case", name=f"{case}_schema", node=thawed(params))
    for kind, rates in COLLISION_SCHEMAS.items():
        store.store(group="collision", name=f"{kind}_schema", node=thawed(rates))
    if not OmegaConf.has_resolver("lbm.cells"):
        OmegaConf.register_new_resolver("lbm.cells", cells_across)
    if not OmegaConf.has_resolver("lbm.if_null"):
        OmegaConf.register_new_resolver("lbm.if_null", if_null)


GROUP_SCHEMAS: dict[Any, dict[str, Any]] = {CaseParams: CASE_PARAMS, CollisionKind: COLLISION_SCHEMAS}
"""The base schema of each typed config group -> its options' schemas (their keys and types)."""


@functools.cache
def option_keys(group: str, option: str) -> tuple[str, ...]:
    """The keys an option of an open group has: its schema's and its YAML file's (a ``_global_`` file: under
    ``<group>:``)."""
    path = CONFIG_DIR / group / f"{option}.yaml"
    node = option_file(group, option)
    if "@package _global_" in path.read_text().split("\n", 1)[0]:
        node = node.get(group) or {}
    schemas = {"case": CASE_PARAMS, "collision": COLLISION_SCHEMAS}.get(group, {})
    typed = [f.name for f in dataclasses.fields(schemas[option])] if option in schemas else []
    return tuple(dict.fromkeys(k for k in [*node, *typed] if k != "defaults"))


@functools.cache
def option_file(group: str, option: str) -> dict[str, Any]:
    """What the YAML file of a group's option sets, unresolved (a ``_global_`` file: the whole config it sets)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml"))  # type: ignore[return-value]


def describe(tp: Any) -> str:
    """What a value of the schema type ``tp`` must be, in words."""
    args = typing.get_args(tp)
    optional = type(None) in args and typing.get_origin(tp) is not list
    base = next((a for a in args if a is not type(None)), tp) if optional else tp
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if dataclasses.is_dataclass(base):
        text = "a group of keys: " + ", ".join(f.name for f in dataclasses.fields(base))
    else:
        text = words.get(base, "a list" if typing.get_origin(base) is list else "a value")
    return text + (" or null" if optional else "")


def field_type(schema: type, dotted: str) -> Any:
    """The declared type of the key ``dotted`` in ``schema`` (None where it has none)."""
    tp: Any = schema
    for part in dotted.split("."):
        options = list(GROUP_SCHEMAS.get(tp, {tp: tp}).values())  # a key of a group: the option that has it
        hints = next((h for h in map(_hints, options) if part in h), {})
        if part not in hints:
            return None
        tp = hints[part]
    return tp


def _hints(tp: Any) -> dict[str, Any]:
    return typing.get_type_hints(tp) if dataclasses.is_dataclass(tp) else {}


def dotted_keys(schema: type, prefix: str = "") -> list[str]:
    """Every key of ``schema``, dotted (``grid.nx``), groups and sections included."""
    keys = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        keys.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            keys += dotted_keys(hints[f.name], prefix + f.name + ".")
    return keys


def close_key(dotted: str, schema: type) -> str:
    """`` (did you mean K?)`` for the key of ``schema`` closest to a misspelt ``dotted`` key, else ''."""
    known = dotted_keys(schema)
    if mean := did_you_mean(dotted, known):
        return mean
    by_name = {k.rsplit(".", 1)[-1]: k for k in reversed(known)}  # nx -> grid.nx (the first section that has it)
    close = difflib.get_close_matches(dotted.rsplit(".", 1)[-1], list(by_name), n=1, cutoff=0.75)
    return f" (did you mean {by_name[close[0]]}?)" if close else ""


def check_keys(cfg: Mapping[str, Any], config_name: str, choices: Mapping[str, str] | None = None,
               command: str = "run") -> None:
    """Refuse keys the schema (or, for ``case``/``collision``, the chosen option's YAML) does not have."""
    schema = SCHEMAS[config_name]
    hint = f"python -m lbm {command} --cfg job lists them"

    def walk(node: Mapping[str, Any], tp: type, prefix: str) -> None:
        fields = {f.name: f for f in dataclasses.fields(tp)}
        hints = typing.get_type_hints(tp)
        for key, value in node.items():
            dotted = prefix + key
            if key not in fields:
                raise LbmError(f"{dotted} is not a {command} config key{close_key(dotted, schema)} ({hint})")
            if fields[key].metadata.get("group"):
                check_option(key, value, (choices or {}).get(key))
            elif dataclasses.is_dataclass(hints[key]) and isinstance(value, Mapping):
                walk(value, hints[key], dotted + ".")

    def check_option(group: str, node: Any, choice: str | None) -> None:
        name = node.get("name") if isinstance(node, Mapping) else None
        if choice is not None and name != choice:
            raise LbmError(f"{group}.name={name} does not match {group}={choice}: choose the {group} with {group}=NAME")
        if name not in group_options(group):
            return  # the value check names the valid options
        known = option_keys(group, name)
        for key in node:
            if key not in known:
                mean = did_you_mean(key, known).replace("mean ", f"mean {group}.")
                raise LbmError(f"{group}.{key} is not a key of {group} {name}{mean}: its keys are {', '.join(known)}")

    walk(cfg, schema, "")
