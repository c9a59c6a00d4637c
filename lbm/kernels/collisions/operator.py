"""What a collision kind is: a :class:`CollisionOperator` (its parameters, the lattices it runs on, its jnp rule, its
native body or None), the registry :data:`COLLISION_KINDS` every layer reads, and the :class:`Collision` spec.

A kind is one module of this package that defines a subclass and registers an instance (:func:`register`); the
package imports every module, so the registry is complete once ``lbm.kernels.collisions`` is imported. The config
reads a kind's parameter dataclass (its keys, defaults and ranges: lbm.config.sections, lbm.config.run), the
cases its :meth:`CollisionOperator.relaxation`, the xla and pallas engines its :meth:`CollisionOperator.apply`, the
native engine its :class:`NativeBody` (None: the native kernel lacks the kind, EngineUnavailable).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from lbm.kernels.collisions.native import Cell
from lbm.kernels.directions import Pops
from lbm.lattice import Lattice

if TYPE_CHECKING:
    import jax.numpy as jnp


def rate(default: float | None, low: float = 0.0, high: float = math.inf, low_open: bool = True,
         optional: bool | None = None) -> Any:
    """A field of a kind's parameter dataclass: a config key (``collision.<name>``), its default (written once, here)
    and its range, which lbm.config checks; ``optional`` (by default: where the default is None): None is a value
    too, the rate then follows omega."""
    optional = default is None if optional is None else optional
    return field(default=default, metadata={"low": low, "high": high, "low_open": low_open, "optional": optional})


@dataclass(frozen=True)
class NoRates:
    """The parameters of a kind that has none beyond its kind (its rate is 1/tau)."""


@dataclass(frozen=True)
class NativeBody:
    """A kind's cell body in the generated C (lbm.engines.native.codegen); the names it reads are listed in
    lbm.kernels.collisions.native."""

    rates: tuple[str, ...]
    """The run-time rates the kernel takes, in order (R[0], R[1], ...): names of :meth:`Collision.rates` or omega."""
    lines: Callable[[Cell], list[str]]
    """C statements computing o0.. of one cell."""
    constants: Callable[[Cell], list[tuple[str, str]]]
    """(name, C expression of the rates R[..]) of each per-call constant the cell reads."""
    fused: bool = False
    """A long cell body: fused multiply-adds, the paired equilibrium, one division for u, a row's wrapping edge cells
    as lanes of one vector (lbm.engines.native.codegen); it agrees with the xla engine to rounding, not bitwise."""
    scheduled: bool = False
    """Built with GCC's instruction scheduler (lbm.engines.native.build)."""
    bare_force: bool = False
    """The force table holds Guo's populations without the (1 - omega/2) prefactors: the body applies them."""


class CollisionOperator(abc.ABC):
    """One collision kind: its name, config parameters, lattices, jnp rule and native body (subclass per kind)."""

    name: ClassVar[str]
    Rates: ClassVar[type] = NoRates
    """Its parameters: a frozen dataclass whose fields (:func:`rate`) are the keys of its config option."""
    lattices: ClassVar[tuple[str, ...] | None] = None
    """The lattices it runs on (None: every one)."""
    lattice_reason: ClassVar[str] = ""
    """Why it needs those lattices (the config's error line)."""
    instead: ClassVar[str] = "bgk"
    """The kind to suggest on the lattices it does not run on."""
    smagorinsky: ClassVar[bool] = False
    """Whether it takes the Smagorinsky model (Collision.smagorinsky > 0)."""
    native: ClassVar[NativeBody | None] = None
    """Its body in the native kernel; None where the kernel lacks it or (bgk, trt) computes it from the rate pair."""
    tau_warning: ClassVar[bool] = False
    """Whether a tau below lbm.config's TAU_WARN puts it near its stability limit (the run warns: bgk; the others
    are the remedy the warning names)."""
    two_rates: ClassVar[bool] = False
    """Whether the engines' rate-pair path (no spec, :meth:`relaxation`) runs it with two rates (trt), not one."""
    traced_odd: ClassVar[bool] = False
    """Whether its spec's omega_minus (the odd moments' rate) follows the traced rates of a differentiable run (mrt)."""

    def recorded(self, params: Any) -> Any:
        """Its parameter a checkpoint records beside the kind (``trt_magic``), so that a resume with another is
        refused (None: none)."""
        return None

    def traced_omega_minus(self, omega_plus: Any, tau: Any, params: Any) -> Any:
        """omega- of a differentiable run from the traced omega+ and tau (lbm.cases.traced: traceable, and the
        expressions it has always used, so that runs stay bitwise the same)."""
        return omega_plus

    def relaxation(self, omega: float, params: Any) -> tuple[float, Collision | None]:
        """The rate omega- and the spec of a run with shear rate ``omega`` and the config's ``params`` (None:
        BGK or TRT from the rate pair omega, omega-)."""
        return omega, Collision(self.name, omega, **_les(self, params))

    @abc.abstractmethod
    def apply(self, spec: Collision, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
              force: np.ndarray | None) -> Pops:
        """Post-collision populations (in the form of ``f``), with Guo's forcing term when ``force`` is given."""


def _les(op: CollisionOperator, params: Any) -> dict[str, float]:
    """The Smagorinsky keyword of a spec from the config's params (none where the kind or the config has none)."""
    value = getattr(params, "smagorinsky", None)
    return {"smagorinsky": value} if op.smagorinsky and value is not None else {}


COLLISION_KINDS: dict[str, CollisionOperator] = {}
"""Every collision kind, by name (filled as the package imports the kinds' modules)."""


def register(op: CollisionOperator) -> CollisionOperator:
    """Add a kind to :data:`COLLISION_KINDS` (each kind's module calls it once)."""
    if op.name in COLLISION_KINDS:
        raise AssertionError(f"collision kind {op.name} registered twice")
    COLLISION_KINDS[op.name] = op
    return op


def collision_operator(name: str) -> CollisionOperator:
    """The kind called ``name`` (ValueError naming the kinds if none is)."""
    try:
        return COLLISION_KINDS[name]
    except KeyError:
        raise ValueError(f"collision kind must be one of {', '.join(sorted(COLLISION_KINDS))}, not {name!r}") from None


def parameters() -> Mapping[str, Any]:
    """Every kind's parameter fields by key (a key two kinds share has one meaning and one range: the first kind's)."""
    out: dict[str, Any] = {}
    for op in COLLISION_KINDS.values():
        for f in fields(op.Rates):
            out.setdefault(f.name, f)
    return out


@dataclass(frozen=True)
class Collision:
    """A collision operator and its relaxation rates (static, hashable: closed over by jit).

    kind         a name of :data:`COLLISION_KINDS`
    omega        shear rate 1/tau (sets the viscosity nu = cs2 (1/omega - 1/2))
    omega_minus  trt: the antisymmetric rate; mrt: the rate of the odd ghost moments (energy flux q, ...);
                 None = omega
    bulk         mrt: rate of the trace of the second moment (bulk viscosity); None = omega
    ghost        mrt: rate of the even ghost moments (degree >= 4, e.g. eps); None = omega
    smagorinsky  Smagorinsky constant C_s (0 = off): omega is lowered per cell from the local
                 non-equilibrium stress (the kinds whose operator takes it: CollisionOperator.smagorinsky)
    """

    kind: str = "bgk"
    omega: float = 1.0
    omega_minus: float | None = None
    bulk: float | None = None
    ghost: float | None = None
    smagorinsky: float = 0.0

    def __post_init__(self) -> None:
        op = collision_operator(self.kind)
        for name in ("omega", "omega_minus", "bulk", "ghost"):
            rate = getattr(self, name)
            if rate is not None and not 0.0 < rate < 2.0:
                raise ValueError(f"collision rate {name}={rate!r} must lie in (0, 2)")
        if not self.smagorinsky >= 0.0:
            raise ValueError(f"smagorinsky constant must be >= 0, not {self.smagorinsky!r}")
        if self.smagorinsky and not op.smagorinsky:
            takes = ", ".join(sorted(k for k, o in COLLISION_KINDS.items() if o.smagorinsky))
            raise ValueError(f"the Smagorinsky model applies to {takes}, not {self.kind}")

    @property
    def operator(self) -> CollisionOperator:
        """The kind's operator (its rule, its native body)."""
        return COLLISION_KINDS[self.kind]

    @classmethod
    def bgk_trt(cls, omega_plus: float, omega_minus: float) -> Collision:
        """The spec :func:`lbm.kernels.collisions.collide` computes: BGK when the two rates are equal, else TRT."""
        if omega_plus == omega_minus:
            return cls("bgk", omega_plus)
        return cls("trt", omega_plus, omega_minus)

    def rates(self) -> dict[str, float]:
        """Relaxation rate of each moment class (conserved moments: 0, their change is the force's moment)."""
        shear = self.omega
        return {
            "density": 0.0, "momentum": 0.0, "bulk": shear if self.bulk is None else self.bulk, "shear": shear,
            "odd": shear if self.omega_minus is None else self.omega_minus,
            "even": shear if self.ghost is None else self.ghost,
        }

    def __call__(
        self, f: Pops, feq: Pops, u: jnp.ndarray | Sequence[jnp.ndarray], lattice: Lattice,
        force: np.ndarray | None = None,
    ) -> Pops:
        """Post-collision populations (in the form of ``f``), with Guo's forcing term when ``force`` is given."""
        return self.operator.apply(self, f, feq, u, lattice, force)
