"""The sections of the run configuration: frozen dataclasses that are Hydra's schema and the validated values.

Registered in Hydra's ConfigStore (:mod:`lbm.config.schema`), they give every key its type while
Hydra composes; :func:`lbm.config.validate` builds the same classes from the composed config with
every value checked. The values and their comments stay in the YAML files (``MISSING`` here means:
set there), so every default is written once. Each section also reads as a read-only mapping of
its keys (``dict(run.checkpoint)`` is what metrics.json and a checkpoint's header record).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import MISSING


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
class Lattice(Section):
    """The velocity set (the group ``lattice``)."""

    name: str = MISSING


@dataclasses.dataclass(frozen=True)
class CollisionKind(Section):
    """A collision of the group ``collision``: its kind; each kind's options are a subclass (its Hydra schema)."""

    name: str = MISSING


@dataclasses.dataclass(frozen=True)
class Collision(CollisionKind):
    """The validated collision: its kind and the rates of that kind (None: the kind has none).

    magic: trt and mrt (Lambda); bulk: mrt and the regularized kinds; ghost, odd: mrt;
    smagorinsky: mrt and the regularized kinds.
    """

    magic: float | None = None
    bulk: float | None = None
    ghost: float | None = None
    odd: float | None = None
    smagorinsky: float | None = None


@dataclasses.dataclass(frozen=True)
class TrtRates(CollisionKind):
    """``collision=trt``: omega- from the magic parameter Lambda = (1/omega+ - 1/2)(1/omega- - 1/2)."""

    magic: float = 0.1875
    """Lambda: 3/16 puts half-way bounce-back walls exactly half-way (the default of trt and mrt, written once)."""


@dataclasses.dataclass(frozen=True)
class RegularizedRates(CollisionKind):
    """``collision=regularized`` and ``recursive_regularized``: the bulk rate and the Smagorinsky constant."""

    bulk: float | None = MISSING
    smagorinsky: float = MISSING


@dataclasses.dataclass(frozen=True)
class MrtRates(TrtRates):
    """``collision=mrt``: the rates of the moment classes (null: from 1/tau, or from ``magic`` for ``odd``)."""

    bulk: float | None = MISSING
    ghost: float | None = MISSING
    odd: float | None = MISSING
    smagorinsky: float = MISSING


COLLISION_KINDS: dict[str, type[CollisionKind]] = {
    "auto": CollisionKind, "bgk": CollisionKind, "cumulant": CollisionKind, "kbc": CollisionKind, "mrt": MrtRates,
    "recursive_regularized": RegularizedRates, "regularized": RegularizedRates, "trt": TrtRates,
}
"""Each collision kind's keys, stored in Hydra's ``collision`` group as ``<kind>_schema`` (``auto``: the case
picks the kind, lbm.config.defaults)."""
COLLISION_LATTICES: dict[str, tuple[str, ...]] = {"cumulant": ("d2q9", "d3q27")}
"""The lattices a collision kind runs on, where not every one: the cumulant needs every velocity of {-1, 0, 1}^d."""


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
