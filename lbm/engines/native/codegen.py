"""The generated part of the native kernels: lattice constants and the collision body, as a C++ header.

kernels.cc (shipped beside this module) is the same for every lattice; it includes
``lbm_generated.h``, which this module writes for one :class:`KernelSpec`: the compute and
storage types, the velocity set (offsets, opposites), the collision of one cell
unrolled over directions as the macro ``LBM_COLLIDE`` (emitted once,
used by the scalar edge cells and by the vectorised row loops), and the per-direction row
loads and stores of each streaming scheme. Every storage type holds the deviations f_i - w_i from the rest
state and the collision computes on them (δρ = Σ f̃_i, ρ = 1 + δρ, f_eq - w from
lbm.kernels.equilibrium's formula). The formulas are those of lbm.kernels, the reference physics
(the xla engine runs it), generated from the lattice rather than written by hand; tests/engines/native/test_engines_native.py
(``test_native_kernels_equal_collide_then_stream``) and tests/engines/test_engines.py
(``test_native_engine_equals_the_reference``) pin the native engine to the xla engine. Where a velocity
inlet runs in the kernel (``KernelSpec.inlet``), ``LBM_COLLIDE_INLET`` is the same collision of an
inlet cell, with the rule of lbm.boundaries.inlet applied first. Guo's forcing term uses per-direction
constants (``LBM_FORCE_CONSTANTS``, from a table the kernel fills once per call: ``LBM_FORCE_TABLE``)
instead of dividing by c_s^2 in every cell. The collision is BGK or TRT (rates omega+, omega-) or one of
lbm.engines.native.collisions.KINDS (the kinds with a native body of their own, lbm.kernels.collisions: the
cumulant's recorded from its own cell function, lbm.kernels.collisions.recorder), whose rates the kernel takes
per call as an array (``LBM_RATES`` of them) and turns into constants in the same table: a rate change
rebuilds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lbm.engines.base import EngineUnavailable
from lbm.engines.native.collisions import KINDS, collision_lines, native_body, pairwise_sum, rate_constants, rate_table
from lbm.kernels.collisions.operator import NativeBody
from lbm.kernels.collisions.trt import pair_kind
from lbm.lattice import CS2, Lattice

STORAGE = {"float32": ("float", "float"), "float64": ("double", "double"), "float16": ("float", "float16")}
"""storage name -> (C compute type, C storage type)."""
SCHEMES = {"PUSH": "push", "AA_EVEN": "aa_even", "AA_ODD": "aa_odd"}
"""C names of the streaming schemes (lbm.engines.plan.SCHEMES)."""


class NoNativeCollision(EngineUnavailable, ValueError):
    """A collision kind without a native body (its NativeBody is None): the native engine is unavailable, and
    ``auto`` falls back; a ValueError too, for a caller that asks for the kernel itself."""


@dataclass(frozen=True)
class KernelSpec:
    """What one generated library computes: lattice, storage type, collision kind, body force present, inlet kind."""

    lattice: Lattice
    storage: str  # float32 | float64 | float16 (float32 compute); all hold f - w
    trt: bool
    forced: bool
    inlet: str = ""  # the kind (lbm.boundaries.inlet.INLET_KINDS) of a velocity inlet the kernel applies; "" none
    collision: str = ""  # a kind of lbm.engines.native.collisions.KINDS (its rates given per call); "" bgk or trt

    def __post_init__(self) -> None:
        if self.collision and self.collision not in KINDS:
            raise NoNativeCollision(f"no native collision {self.collision!r}: bgk, trt or one of {', '.join(KINDS)}")

    @property
    def body(self) -> NativeBody | None:
        """The cell body of the kind beyond bgk and trt (None: bgk or trt)."""
        return native_body(self)

    @property
    def fused(self) -> bool:
        """Whether the cell body is a long one (NativeBody.fused): fused multiply-adds, the paired equilibrium."""
        return self.body is not None and self.body.fused

    @property
    def kind(self) -> str:
        """The collision kind: bgk, trt or one of lbm.engines.native.collisions.KINDS."""
        return self.collision or pair_kind(self.trt)

    @property
    def tag(self) -> str:
        """Stable short name for file and FFI target names."""
        inlet = f"_inlet_{self.inlet}" if self.inlet else ""
        return f"{self.lattice.name}_{self.storage}_{self.kind}{'_force' if self.forced else ''}{inlet}"


def _fmt(v: float) -> str:
    return repr(float(v))



def _signed(coefficients: list[tuple[int, str]]) -> str:
    """``+ a - b ...`` for unit coefficients, without a leading plus."""
    return " ".join(("+" if k > 0 else "-") + f" {name}" for k, name in coefficients if k != 0).lstrip("+ ")


def inlet_lines(spec: KernelSpec) -> list[str]:
    """C statements of an inlet cell before its equilibrium: drho, rho from the known populations, u = U0[k]..
    (the inflow).

    lbm.boundaries.inlet.inlet_density; the unknown populations follow the equilibrium (:func:`inlet_unknowns`).
    """
    lat = spec.lattice
    c = lat.c
    tangential = [f"f{i}" for i in np.flatnonzero(c[:, 0] == 0)]
    leaving = [f"f{i}" for i in np.flatnonzero(c[:, 0] < 0)]
    lines = [f"real u{a} = U{a}[k];" for a in range(lat.d)]
    known = f"{' + '.join(tangential)} + (real)2.0 * ({' + '.join(leaving)})"
    lines.append(f"real drho = (({known}) + u0) / ((real)1.0 - u0);")
    lines.append("real rho = (real)1 + drho;")
    return lines


def inlet_unknowns(spec: KernelSpec) -> list[str]:
    """C statements rebuilding an inlet cell's unknown populations (c_x > 0) from feq (lbm.boundaries.inlet.face_unknowns)."""
    lat = spec.lattice
    c, q = lat.c, lat.q
    if spec.inlet == "equilibrium":
        return [f"f{i} = feq{i};" for i in range(q)]
    unknown = [int(i) for i in np.flatnonzero(c[:, 0] > 0)]
    lines = [f"f{i} = feq{i} + f{int(lat.opposite[i])} - feq{int(lat.opposite[i])};" for i in unknown]
    if spec.inlet == "zou_he":
        for t in range(1, lat.d):
            moving = [i for i in unknown if c[i, t] != 0]
            carriers = [int(j) for j in np.flatnonzero(c[:, t] != 0)]
            mom = " + ".join(f"(real){_fmt(c[j, t])} * f{j}" for j in carriers)
            lines.append(f"{{ real excess = ({mom}) - rho * u{t};")
            lines += [f"  f{i} = f{i} + (-excess) * (real){_fmt(c[i, t] / len(moving))};" for i in moving]
            lines.append("}")
    return lines


def force_table(spec: KernelSpec) -> list[str]:
    """C statements filling the per-call table G from the force F, the rates wp, wm and the kind's rates R.

    G[0..D) = F; G[D] = (1 - wp/2) / cs^2 (times w_i u.F: the symmetric part's uniform term); G[D+1+i] =
    (1 - wm/2) w_i c_i.F / cs^2 (the antisymmetric part); G[D+1+Q+i] = (1 - wp/2) w_i c_i.F / cs^4 (times c_i.u),
    G[D+1+2Q+i] the same without w_i (the BGK form, :func:`collide_body`). lbm.kernels.collisions.guo_source.
    A body with NativeBody.bare_force (mrt) applies the prefactors itself (its table holds 1 for them).
    From G[D+1+3Q] on: the constants the kind
    derives from its rates R (lbm.engines.native.collisions.rate_table).
    """
    lat = spec.lattice
    q, d = lat.q, lat.d
    lines = [f"G[{a}] = F[{a}];" for a in range(d)]
    if spec.body is not None and spec.body.bare_force:
        lines.append("{ const real kp = (real)1, km = (real)1;")
    else:
        lines.append("{ const real kp = (real)1 - (real)0.5 * wp, km = (real)1 - (real)0.5 * wm;")
    lines.append(f"  G[{d}] = kp / (real){_fmt(CS2)};")
    for i in range(q):
        cf = _signed([(int(lat.c[i, a]), f"F[{a}]") for a in range(d)]) or "(real)0"
        w = _fmt(lat.w[i])
        lines.append(f"  {{ real cf = {cf}; G[{d + 1 + i}] = km * ((real){w} * cf / (real){_fmt(CS2)});"
                     f" G[{d + 1 + q + i}] = kp * ((real){w} * cf / (real){_fmt(CS2**2)});"
                     f" G[{d + 1 + 2 * q + i}] = kp * (cf / (real){_fmt(CS2**2)}); }}")
    lines.append("}")
    return lines + rate_table(spec, d + 1 + 3 * q)


def force_constants(spec: KernelSpec) -> list[str]:
    """C declarations of the force F0_.. and of gs_ from the table F (:func:`force_table`); the body reads the rest in place."""
    d, q = spec.lattice.d, spec.lattice.q
    rates = rate_constants(spec, d + 1 + 3 * q)
    if not spec.forced:
        return ["(void)F;", *rates]
    return [f"const real F{a}_ = F[{a}];" for a in range(d)] + [f"const real gs_ = F[{d}];", "(void)gs_;", *rates]


def collide_body(spec: KernelSpec, inlet: bool = False) -> list[str]:
    """C statements computing o0..o{Q-1} from f0..f{Q-1} in type ``real`` (same formulas as lbm.kernels).

    ``inlet``: the collision of an inlet cell (rho and u from :func:`inlet_lines`, then the unknowns rebuilt).
    Forced: needs the declarations of :func:`force_constants` in scope.
    """
    lat = spec.lattice
    q, d = lat.q, lat.d
    c = lat.c
    if inlet:
        lines = inlet_lines(spec)
    else:
        lines = [f"real drho = {pairwise_sum([f'f{i}' for i in range(q)])};", "real rho = (real)1 + drho;"]
        for a in range(d):
            expr = _signed([(int(c[i, a]), f"f{i}") for i in range(q)])
            if spec.forced:
                expr = f"({expr}) + (real)0.5 * F{a}_"
            lines.append(f"real m{a} = {expr};")
        if spec.fused:  # one division
            lines.append("real irho = (real)1 / rho;")
            lines += [f"real u{a} = m{a} * irho;" for a in range(d)]
        else:
            lines += [f"real u{a} = m{a} / rho;" for a in range(d)]
    lines.append("real usq = " + " + ".join(f"u{a} * u{a}" for a in range(d)) + ";")
    lines.append("real base = (real)-1.5 * usq;")
    for i in range(q):
        cu = _signed([(int(c[i, a]), f"u{a}") for a in range(d)]) or "0"
        lines.append(f"real cu{i} = {cu};")
        if not spec.fused:
            w = _fmt(lat.w[i])
            poly = f"(base + cu{i} * ((real)3 + (real)4.5 * cu{i}))" if c[i].any() else "base"
            lines.append(f"real feq{i} = (real){w} * (drho + rho * {poly});")
    if spec.fused:
        lines += paired_equilibrium(lat)
    if inlet:
        lines += inlet_unknowns(spec)
    if spec.collision:
        return lines + collision_lines(spec)
    if not spec.trt and not inlet:
        return lines + bgk_folded(spec)
    if spec.trt:
        lines += [f"real neq{i} = f{i} - feq{i};" for i in range(q)]
        for i in range(q):
            o = int(lat.opposite[i])
            lines.append(
                f"real o{i} = f{i} - wp * ((real)0.5 * (neq{i} + neq{o})) - wm * ((real)0.5 * (neq{i} - neq{o}));")
    else:  # BGK on an inlet cell
        lines += [f"real o{i} = f{i} - wp * (f{i} - feq{i});" for i in range(q)]
    if spec.forced:  # Guo: o_i += (1 - wp/2) w_i (-u.F / cs^2 + c_i.u c_i.F / cs^4) + (1 - wm/2) w_i c_i.F / cs^2
        lines.append("real sf = (" + " + ".join(f"F{a}_ * u{a}" for a in range(d)) + ") * gs_;")
        for i in range(q):
            w = _fmt(lat.w[i])
            lines.append(f"o{i} += (F[{d + 1 + i}] - (real){w} * sf) + F[{d + 1 + q + i}] * cu{i};")
    return lines


def paired_equilibrium(lat: Lattice) -> list[str]:
    """C statements of feq0.. as ``feq_i = w_i e_i``, ``e_i = (drho + rho base + 4.5 rho cu_i^2) + 3 rho cu_i``: the
    two directions of a pair share the first part (the same polynomial as :func:`collide_body`'s, fewer operations,
    fused multiply-adds: the kinds whose NativeBody is fused)."""
    c, w, opp = lat.c, lat.w, lat.opposite
    lines = ["real e0_ = LBM_FMA(rho, base, drho), r3_ = (real)3 * rho, r45_ = (real)4.5 * rho;"]
    for i in range(lat.q):
        if not c[i].any():
            lines.append(f"real e{i} = e0_;")
        elif i < int(opp[i]):
            o = int(opp[i])
            lines.append(f"real x{i} = r3_ * cu{i}, s{i} = LBM_FMA(r45_ * cu{i}, cu{i}, e0_);")
            lines.append(f"real e{i} = s{i} + x{i}, e{o} = s{i} - x{i};")
    return lines + [f"real feq{i} = (real){_fmt(w[i])} * e{i};" for i in range(lat.q)]


def bgk_folded(spec: KernelSpec) -> list[str]:
    """C statements of BGK (with Guo's term where forced) folded into the equilibrium's polynomial: the same sum as
    f_i - wp (f_i - feq_i) (+ Guo), fewer operations per direction (the feq_i above it are then left unused).

    o_i = (1 - wp) f_i + w_i (A + c_i.u (B + C c_i.u + D_i)) + ga_i with A = wp (drho + rho base) [- (1 - wp/2) u.F /
    cs^2], B = 3 wp rho, C = 4.5 wp rho, and where forced D_i = (1 - wp/2) c_i.F / cs^4, ga_i = (1 - wm/2) w_i c_i.F /
    cs^2 (table F).
    """
    lat = spec.lattice
    q, d, c = lat.q, lat.d, lat.c
    lines = []
    if spec.forced:
        lines.append("real sf = (" + " + ".join(f"F{a}_ * u{a}" for a in range(d)) + ") * gs_;")
    lines.append("real wr = wp * rho, keep = (real)1 - wp;")
    lines.append(f"real pa = wp * (drho + rho * base){' - sf' if spec.forced else ''}, pb = (real)3 * wr,"
                 " pc = (real)4.5 * wr;")
    for i in range(q):
        w = _fmt(lat.w[i])
        if not c[i].any():
            lines.append(f"real o{i} = keep * f{i} + (real){w} * pa;")
        elif spec.forced:
            gd, ga = f"F[{d + 1 + 2 * q + i}]", f"F[{d + 1 + i}]"
            lines.append(f"real o{i} = keep * f{i} + ((real){w} * (pa + cu{i} * ((pb + pc * cu{i}) + {gd})) + {ga});")
        else:
            lines.append(f"real o{i} = keep * f{i} + (real){w} * (pa + cu{i} * (pb + pc * cu{i}));")
    return lines


def _macro(name: str, lines: list[str]) -> str:
    return f"#define {name} \\\n  " + " \\\n  ".join(lines)


def row_macros(spec: KernelSpec) -> list[str]:
    """Row pointers, and per scheme the loads of f0.. and the stores of o0.. at inner index k (offsets unrolled)."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    out = [_macro("LBM_ROW_POINTERS", [f"const store* r{i} = rp[{i}]; store* w{i} = wrow[{i}];" for i in range(q)])]
    for kind in SCHEMES:
        loads, stores = [], []
        for i in range(q):
            off = -int(lat.c[i, d - 1]) if kind == "AA_ODD" else 0
            loads.append(f"real f{i} = LD(r{i} + k + ({off}));")
            off = 0 if kind == "AA_EVEN" else int(lat.c[i, d - 1])
            stores.append(f"ST(w{i} + k + ({off}), o{i});")
        out += [_macro(f"LBM_LOAD_{kind}", loads), _macro(f"LBM_STORE_{kind}", stores)]
    return out


def arithmetic_macros(real: str) -> list[str]:
    """LBM_FMA(a, b, c): a * b + c rounded once where the target has a fused multiply-add (the same bits at every
    optimisation level and vector width), else a product and a sum; LBM_ABS(x): |x|. For the compute type ``real``."""
    suffix = "f" if real == "float" else ""
    return [f"#if defined(__FP_FAST_FMA{suffix.upper()})",
            f"#define LBM_FMA(a, b, c) __builtin_fma{suffix}((a), (b), (c))",
            "#else",
            "#define LBM_FMA(a, b, c) ((a) * (b) + (c))",
            "#endif",
            f"#define LBM_ABS(x) __builtin_fabs{suffix}(x)"]


def header(spec: KernelSpec) -> str:
    """The text of ``lbm_generated.h`` for ``spec``."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    real, store = STORAGE[spec.storage]
    c = lat.c
    outer_off = ", ".join("{" + ", ".join(str(int(c[i, a])) for a in range(d - 1)) + "}" for i in range(q))
    inner_off = ", ".join(str(int(c[i, d - 1])) for i in range(q))
    opp = ", ".join(str(int(o)) for o in lat.opposite)
    if store == "float16":
        store_t, ffi_type = "uint16_t", "ffi::F16"
    else:
        store_t, ffi_type = store, {"float": "ffi::F32", "double": "ffi::F64"}[store]
    parts = [
        f"// Generated by lbm.engines.native.codegen for {spec.tag}; do not edit.",
        "#pragma once",
        f"#define LBM_STORAGE_{spec.storage.upper()} 1",
        f"#define LBM_FFI_TYPE {ffi_type}",
        f"#define LBM_REAL_FFI_TYPE {'ffi::F32' if real == 'float' else 'ffi::F64'}",
        f"typedef {real} real;",
        f"typedef {store_t} store;",
        *arithmetic_macros(real),
        f"static const int Q = {q};",
        f"static const int D = {d};",
        f"static const int OUTER_OFF[Q][D > 1 ? D - 1 : 1] = {{{outer_off}}};",
        f"static const int INNER_OFF[Q] = {{{inner_off}}};",
        f"static const int OPP[Q] = {{{opp}}};",
        _macro("LBM_UNPACK", [" ".join(f"real f{i} = f_[{i}];" for i in range(q))]),
        _macro("LBM_PACK", [" ".join(f"out_[{i}] = o{i};" for i in range(q))]),
        f"#define LBM_FORCE_SIZE {d + 1 + 3 * q + len(rate_table(spec, 0))}",
        f"#define LBM_RATES {len(spec.body.rates) if spec.body is not None else 1}",
        _macro("LBM_FORCE_TABLE", force_table(spec)),
        _macro("LBM_FORCE_CONSTANTS", force_constants(spec)),
        _macro("LBM_COLLIDE", collide_body(spec)),
        f"#define LBM_INLET {1 if spec.inlet else 0}",
        "#ifndef LBM_GATHERED_EDGES",  # -DLBM_GATHERED_EDGES=0 in LBM_NATIVE_EXTRA_FLAGS: scripts/native_body_ab.py
        f"#define LBM_GATHERED_EDGES {1 if spec.fused else 0}",
        "#endif",
        _macro("LBM_INLET_POINTERS", [" ".join(f"const real* U{a} = U[{a}];" for a in range(d))]),
        _macro("LBM_COLLIDE_INLET", collide_body(spec, inlet=True) if spec.inlet else ["LBM_COLLIDE"]),
        *row_macros(spec),
    ]
    return "\n".join(parts) + "\n"
