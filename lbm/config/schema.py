"""Hydra structured-config schemas of ``configs/config.yaml`` (run) and ``configs/bench.yaml``.

The dataclasses give every key its type; registered in Hydra's ConfigStore and named first in
the YAML defaults lists, they make Hydra refuse wrong types while composing. The values and
their comments stay in the YAML files (``MISSING`` here means: set there).

Groups whose keys differ per option (``case``, ``collision``) are open mappings here; their keys
are checked against the option's own YAML file by :func:`check_keys`, which also refuses the
keys a ``+key=value`` override adds to a closed node (Hydra adds those without checking).
"""

import dataclasses
import difflib
import functools
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import MISSING

from lbm.config.checks import CONFIG_DIR, did_you_mean, group_options
from lbm.errors import LbmError

OPEN_GROUP = {"group": True}
"""Field metadata of a config group whose keys are those of the chosen option's YAML file."""


@dataclasses.dataclass
class GridSchema:
    """Cells along x, y and (3D lattices) z."""

    nx: int = MISSING
    ny: int = MISSING
    nz: int | None = None


@dataclasses.dataclass
class FlowSchema:
    """Dimensionless flow parameters (``flow.tau`` prescribes the relaxation time instead)."""

    reynolds: float = MISSING
    u_lattice: float = MISSING
    tau: float | None = None


@dataclasses.dataclass
class OutputSchema:
    """What a run writes besides metrics.json and fields.npz, and how often."""

    every: int = MISSING
    plots: bool = MISSING
    vtk: bool = MISSING
    frames: bool = MISSING
    animation: bool = MISSING
    frame_limit: float | None = None
    progress: str = MISSING


@dataclasses.dataclass
class CheckpointSchema:
    """Periodic checkpoints and the run to resume from."""

    every: int = MISSING
    keep: int = MISSING
    resume: str | None = None


@dataclasses.dataclass
class ParallelSchema:
    """Devices a run uses, how the grid is split over them, and the processes of a multi-host run."""

    devices: int = MISSING
    mesh: list[int] | None = None
    partitioner: str = MISSING
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


@dataclasses.dataclass
class ProfileSchema:
    """The jax.profiler capture and its breakdown."""

    enabled: bool = MISSING
    warmup_steps: int = MISSING
    steps: int = MISSING
    sync: bool = MISSING
    backend: str = MISSING
    trace_processor: str | None = None


@dataclasses.dataclass
class LatticeSchema:
    """The velocity set (the group ``lattice``)."""

    name: str = MISSING


@dataclasses.dataclass
class RunSchema:
    """``configs/config.yaml``: the configuration of ``python -m lbm run``."""

    case: dict[str, Any] = dataclasses.field(default_factory=dict, metadata=OPEN_GROUP)
    lattice: LatticeSchema = dataclasses.field(default_factory=LatticeSchema)
    collision: dict[str, Any] = dataclasses.field(default_factory=dict, metadata=OPEN_GROUP)
    mode: str = MISSING
    engine: str = MISSING
    precision: str = MISSING
    steps: Any = MISSING  # an integer or "auto"
    steps_per_dispatch: int = MISSING
    grid: GridSchema = dataclasses.field(default_factory=GridSchema)
    flow: FlowSchema = dataclasses.field(default_factory=FlowSchema)
    output: OutputSchema = dataclasses.field(default_factory=OutputSchema)
    checkpoint: CheckpointSchema = dataclasses.field(default_factory=CheckpointSchema)
    parallel: ParallelSchema = dataclasses.field(default_factory=ParallelSchema)
    profile: ProfileSchema = dataclasses.field(default_factory=ProfileSchema)


@dataclasses.dataclass
class BandwidthSchema:
    """The copy/triad bandwidth measurement (the roofline)."""

    enabled: bool = MISSING
    bytes: int = MISSING
    repeats: int = MISSING


@dataclasses.dataclass
class BenchSchema:
    """``configs/bench.yaml``: the configuration of ``python -m lbm bench``."""

    lattice: LatticeSchema = dataclasses.field(default_factory=LatticeSchema)
    collision: dict[str, Any] = dataclasses.field(default_factory=dict, metadata=OPEN_GROUP)
    cases: list[str] = MISSING
    variants: list[str] = MISSING
    precision: Any = MISSING  # one precision or a list of them
    grid: GridSchema = dataclasses.field(default_factory=GridSchema)
    sizes: Any = None  # null or a list of sizes: n or [nx, ny(, nz)]
    parallel: dict[str, Any] = dataclasses.field(default_factory=lambda: {"devices": None})  # scaling sweep
    cylinder_grid: GridSchema = dataclasses.field(default_factory=GridSchema)
    repeats: int = MISSING
    warmup: int = MISSING
    min_time_s: float = MISSING
    steps: Any = MISSING  # an integer or "auto"
    max_steps: int = MISSING
    steps_per_dispatch: int = MISSING
    stage_steps: int = MISSING
    kernel_profile: int = MISSING
    bandwidth: BandwidthSchema = dataclasses.field(default_factory=BandwidthSchema)
    output: str = MISSING


SCHEMAS: dict[str, type] = {"config": RunSchema, "bench": BenchSchema}
"""The schema of each primary config, registered under ``<config>_schema``."""


@functools.cache
def cells_across(n: Any, length: Any, cell: Any, extra: Any) -> int:
    """``round(length / cell * n) + extra``: a grid size derived from cells per length (the YAML resolver lbm.cells)."""
    return round(float(length) / float(cell) * int(n)) + int(extra)


def register() -> None:
    """Store the schemas in Hydra's ConfigStore (once per process), as the YAML defaults lists name them, and the
    resolver ``lbm.cells`` with which a case's YAML derives its grid from its resolution (schafer_turek)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    for config_name, schema in SCHEMAS.items():
        ConfigStore.instance().store(name=f"{config_name}_schema", node=schema)
    if not OmegaConf.has_resolver("lbm.cells"):
        OmegaConf.register_new_resolver("lbm.cells", cells_across)


@functools.cache
def option_keys(group: str, option: str) -> tuple[str, ...]:
    """The keys an option of an open group sets (its YAML file; a ``_global_`` file under ``<group>:``)."""
    from omegaconf import OmegaConf

    path = CONFIG_DIR / group / f"{option}.yaml"
    node = OmegaConf.to_container(OmegaConf.load(path))
    if "@package _global_" in path.read_text().split("\n", 1)[0]:
        node = node.get(group) or {}  # type: ignore[union-attr]
    return tuple(node)  # type: ignore[arg-type]


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
        hints = typing.get_type_hints(tp) if dataclasses.is_dataclass(tp) else {}
        if part not in hints:
            return None
        tp = hints[part]
    return tp


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
