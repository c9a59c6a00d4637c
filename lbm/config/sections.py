"""The sections of the run configuration: frozen dataclasses that are Hydra's schema and the validated values.

Registered in Hydra's ConfigStore (:mod:`lbm.config.schema`), they give every key its type while
Hydra composes; :func:`lbm.config.validate` builds the same classes from the composed config with
every value checked. The values and their comments stay in the YAML files (``MISSING`` here means:
set there), so every default is written once. Each section also reads as a read-only mapping of
its keys (``dict(run.checkpoint)`` is what metrics.json and a checkpoint's header record).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import MISSING

from lbm.kernels.collisions import COLLISION_KINDS, CollisionOperator
from lbm.kernels.collisions.operator import parameters


class Section(Mapping[str, Any]):
    """A frozen dataclass that also reads as a mapping of its fields (``section["every"]``, ``dict(section)``)."""

    def __getitem__(self, key: str) -> Any:
        """The value of the field ``key`` (KeyError where the section has none)."""
        if key not in {f.name for f in dataclasses.fields(self)}:  # type: ignore[arg-type]
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        """The field names."""
        return (f.name for f in dataclasses.fields(self))  # type: ignore[arg-type]

    def __len__(self) -> int:
        """The number of fields."""
        return len(dataclasses.fields(self))  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Grid(Section):
    """Cells along x, y and (3D lattices) z."""

    nx: int | None = MISSING
    ny: int | None = MISSING
    nz: int | None = MISSING
    """null where the case picks it (lbm.config.defaults: the cavity), or nz for 2D lattices."""


@dataclasses.dataclass(frozen=True)
class Flow(Section):
    """Dimensionless flow parameters (``flow.tau`` prescribes the relaxation time instead).

    ``u_lattice`` may be null only with ``flow.tau`` set, for a case that derives it from tau (schafer_turek).
    """

    reynolds: float = MISSING
    u_lattice: float | None = MISSING
    tau: float | None = MISSING


@dataclasses.dataclass(frozen=True)
class Output(Section):
    """What a run writes besides metrics.json and fields.npz, and how often."""

    every: int = MISSING
    plots: bool = MISSING
    vtk: bool = MISSING
    frames: bool = MISSING
    animation: bool = MISSING
    frame_limit: float | None = MISSING
    progress: str = MISSING


@dataclasses.dataclass(frozen=True)
class Checkpoint(Section):
    """Periodic checkpoints and the run to resume from."""

    every: int = MISSING
    keep: int = MISSING
    resume: str | None = MISSING


@dataclasses.dataclass(frozen=True)
class Gradient(Section):
    """The checkpointing policy of a differentiable run (``lbm.value_and_grad``; lbm.diff.checkpointing)."""

    checkpoint: str = MISSING
    every: int | None = MISSING
    snapshots: int = MISSING


@dataclasses.dataclass(frozen=True)
class Parallel(Section):
    """Devices a run uses, how the grid is split over them, and the processes of a multi-host run."""

    devices: int = MISSING
    mesh: list[int] | None = MISSING
    partitioner: str = MISSING
    coordinator: str | None = MISSING
    num_processes: int | None = MISSING
    process_id: int | None = MISSING


@dataclasses.dataclass(frozen=True)
class Native(Section):
    """How the native engine's kernel shares a step among CPU threads (docs/performance.md, "Threads and pinning")."""

    threads: int = MISSING
    pinning: bool = MISSING


@dataclasses.dataclass(frozen=True)
class Profile(Section):
    """The jax.profiler capture and its breakdown."""

    enabled: bool = MISSING
    warmup_steps: int = MISSING
    steps: int = MISSING
    sync: bool = MISSING
    backend: str = MISSING
    trace_processor: str | None = MISSING


@dataclasses.dataclass(frozen=True)
class LatticeGroup(Section):
    """The velocity set chosen (the group ``lattice``; the velocity set itself is lbm.lattice.Lattice)."""

    name: str = MISSING


@dataclasses.dataclass(frozen=True)
class CollisionKind(Section):
    """A collision of the group ``collision``: its kind; each kind's options are a subclass (its Hydra schema)."""

    name: str = MISSING


def _collision_params() -> type:
    """The validated collision (:data:`CollisionParams`): its kind and every key of every kind, a number or None
    (None: the kind has none), one field per key of lbm.kernels.collisions.operator.parameters."""
    fields = [(key, float | None, dataclasses.field(default=None)) for key in parameters()]
    cls = dataclasses.make_dataclass("CollisionParams", fields, bases=(CollisionKind,), frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = "The validated collision: its kind and the rates of that kind (None: the kind has none)."
    return cls


CollisionParams = _collision_params()


def _schema(op: CollisionOperator) -> type:
    """The Hydra schema of a kind's option (``<kind>_schema``): its name and the fields of its parameter dataclass."""
    hints = typing.get_type_hints(op.Rates)
    fields = [(f.name, hints[f.name], dataclasses.field(default=f.default)) for f in dataclasses.fields(op.Rates)]
    cls = dataclasses.make_dataclass(op.Rates.__name__, fields, bases=(CollisionKind,), frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = op.Rates.__doc__
    return cls


COLLISION_SCHEMAS: dict[str, type[CollisionKind]] = {
    "auto": CollisionKind, **{name: _schema(op) for name, op in sorted(COLLISION_KINDS.items())}}
"""Each collision kind's keys, stored in Hydra's ``collision`` group as ``<kind>_schema`` (``auto``: the case
picks the kind, lbm.config.defaults), from the kinds' own parameter dataclasses (lbm.kernels.collisions)."""


@dataclasses.dataclass(frozen=True)
class Bandwidth(Section):
    """The copy/triad bandwidth measurement of ``bench`` (the roofline)."""

    enabled: bool = MISSING
    bytes: int = MISSING
    repeats: int = MISSING


@dataclasses.dataclass(frozen=True)
class Scaling(Section):
    """``bench``'s scaling sweep: the device counts (None: measure the variants instead)."""

    devices: list[int] | None = MISSING


def thawed(schema: Any) -> Any:
    """The OmegaConf node of a frozen dataclass, writable (Hydra merges the YAML and the overrides into it)."""
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.structured(schema)

    def thaw(n: Any) -> None:
        n._set_flag("readonly", None)
        if isinstance(n, DictConfig) and not n._is_missing() and not n._is_none():
            for key in n.keys():
                thaw(n._get_node(key))

    thaw(node)
    return node


def mapping_of(value: Any) -> Any:
    """A section (its mapping view, nested sections too) as plain dicts and lists, for JSON and YAML."""
    if isinstance(value, Mapping):
        return {k: mapping_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mapping_of(v) for v in value]
    return value
