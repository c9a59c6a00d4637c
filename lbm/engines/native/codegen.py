"""The generated part of the native kernels: lattice constants and the collision body, as a C++ header.

kernels.cc (shipped beside this module) is the same for every lattice; it includes
``lbm_generated.h``, which this module writes for one :class:`KernelSpec`: the compute and
storage types, the velocity set (offsets, opposites, rest-weight shifts of 16-bit storage),
the lattice weights (``LBM_WEIGHTS``, the rest state that walls restore), the collision of one cell
unrolled over directions as the macro ``LBM_COLLIDE`` (emitted once,
used by the scalar edge cells and by the vectorised row loops), and the per-direction row
loads and stores of each streaming scheme. The formulas are those of lbm.kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbm.lattice import CS2, Lattice

STORAGE = {"float32": ("float", "float"), "float64": ("double", "double"), "bfloat16": ("float", "bfloat16"),
           "float16": ("float", "float16")}
"""storage name -> (C compute type, C storage type)."""
SHIFTED = ("bfloat16", "float16")
"""16-bit storages keep f_i - w_i (deviations from the rest state) to spend their few mantissa bits on the signal."""
SCHEMES = {"PUSH": "push", "AA_EVEN": "aa_even", "AA_ODD": "aa_odd"}
"""C names of the streaming schemes (lbm.engines.native.plan.SCHEMES)."""


@dataclass(frozen=True)
class KernelSpec:
    """What one generated library computes: lattice, storage type, collision kind, body force present."""

    lattice: Lattice
    storage: str  # float32 | float64 | bfloat16 | float16 (16-bit: f - w stored, float32 compute)
    trt: bool
    forced: bool

    @property
    def tag(self) -> str:
        """Stable short name for file and FFI target names."""
        return f"{self.lattice.name}_{self.storage}_{'trt' if self.trt else 'bgk'}{'_force' if self.forced else ''}"


def _fmt(v: float) -> str:
    return repr(float(v))


def _pairwise_sum(terms: list[str]) -> str:
    """C expression summing ``terms`` as a balanced tree (log-depth rounding, independent adds)."""
    if len(terms) == 1:
        return terms[0]
    h = len(terms) // 2
    return f"({_pairwise_sum(terms[:h])} + {_pairwise_sum(terms[h:])})"


def _signed(coefficients: list[tuple[int, str]]) -> str:
    """``+ a - b ...`` for unit coefficients, without a leading plus."""
    return " ".join(("+" if k > 0 else "-") + f" {name}" for k, name in coefficients if k != 0).lstrip("+ ")


def collide_body(spec: KernelSpec) -> list[str]:
    """C statements computing o0..o{Q-1} from f0..f{Q-1} in type ``real`` (same formulas as lbm.kernels)."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    c = lat.c
    lines = [f"real rho = {_pairwise_sum([f'f{i}' for i in range(q)])};"]
    for a in range(d):
        expr = _signed([(int(c[i, a]), f"f{i}") for i in range(q)])
        if spec.forced:
            expr = f"({expr}) + (real)0.5 * F[{a}]"
        lines.append(f"real m{a} = {expr};")
    lines += [f"real u{a} = m{a} / rho;" for a in range(d)]
    lines.append("real usq = " + " + ".join(f"u{a} * u{a}" for a in range(d)) + ";")
    lines.append("real base = (real)1 - (real)1.5 * usq;")
    for i in range(q):
        w = _fmt(lat.w[i])
        if c[i].any():
            lines.append(f"real cu{i} = {_signed([(int(c[i, a]), f'u{a}') for a in range(d)])};")
            lines.append(f"real feq{i} = (real){w} * rho * (base + cu{i} * ((real)3 + (real)4.5 * cu{i}));")
        else:
            lines.append(f"real cu{i} = 0;")
            lines.append(f"real feq{i} = (real){w} * rho * base;")
    if spec.trt:
        lines += [f"real neq{i} = f{i} - feq{i};" for i in range(q)]
        for i in range(q):
            o = int(lat.opposite[i])
            lines.append(
                f"real o{i} = f{i} - wp * ((real)0.5 * (neq{i} + neq{o})) - wm * ((real)0.5 * (neq{i} - neq{o}));")
    else:
        lines += [f"real o{i} = f{i} - wp * (f{i} - feq{i});" for i in range(q)]
    if spec.forced:
        lines.append("real uf = " + " + ".join(f"F[{a}] * u{a}" for a in range(d)) + ";")
        lines.append("real kp = (real)1 - (real)0.5 * wp, km = (real)1 - (real)0.5 * wm;")
        for i in range(q):
            cf = _signed([(int(c[i, a]), f"F[{a}]") for a in range(d)]) or "(real)0"
            w = _fmt(lat.w[i])
            lines.append(
                f"{{ real cf = {cf}; real sym = (real){w} * (-uf / (real){_fmt(CS2)} + cu{i} * cf / (real){_fmt(CS2**2)});"
                f" real anti = (real){w} * cf / (real){_fmt(CS2)}; o{i} += kp * sym + km * anti; }}")
    return lines


def _shift(spec: KernelSpec, i: int, sign: str) -> str:
    """16-bit storage holds f_i - w_i (deviations from rest): the term adding (+) or removing (-) w_i."""
    return f" {sign} (real){_fmt(spec.lattice.w[i])}" if spec.storage in SHIFTED else ""


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
            loads.append(f"real f{i} = LD(r{i} + k + ({off})){_shift(spec, i, '+')};")
            off = 0 if kind == "AA_EVEN" else int(lat.c[i, d - 1])
            stores.append(f"ST(w{i} + k + ({off}), o{i}{_shift(spec, i, '-')});")
        out += [_macro(f"LBM_LOAD_{kind}", loads), _macro(f"LBM_STORE_{kind}", stores)]
    return out


def header(spec: KernelSpec) -> str:
    """The text of ``lbm_generated.h`` for ``spec``."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    real, store = STORAGE[spec.storage]
    c = lat.c
    outer_off = ", ".join("{" + ", ".join(str(int(c[i, a])) for a in range(d - 1)) + "}" for i in range(q))
    inner_off = ", ".join(str(int(c[i, d - 1])) for i in range(q))
    opp = ", ".join(str(int(o)) for o in lat.opposite)
    weights = ", ".join(f"(real){_fmt(w)}" for w in lat.w)
    shift = ", ".join(f"(real){_fmt(lat.w[i]) if spec.storage in SHIFTED else '0'}" for i in range(q))
    if store in SHIFTED:
        store_t, ffi_type = "uint16_t", {"bfloat16": "ffi::BF16", "float16": "ffi::F16"}[store]
    else:
        store_t, ffi_type = store, {"float": "ffi::F32", "double": "ffi::F64"}[store]
    parts = [
        f"// Generated by lbm.engines.native.codegen for {spec.tag}; do not edit.",
        "#pragma once",
        f"#define LBM_STORAGE_{spec.storage.upper()} 1",
        f"#define LBM_FFI_TYPE {ffi_type}",
        f"#define LBM_REAL_FFI_TYPE {'ffi::F32' if real == 'float' else 'ffi::F64'}",
        f"#define LBM_WEIGHTS {{{weights}}}",
        f"typedef {real} real;",
        f"typedef {store_t} store;",
        f"static const int Q = {q};",
        f"static const int D = {d};",
        f"static const int OUTER_OFF[Q][D > 1 ? D - 1 : 1] = {{{outer_off}}};",
        f"static const int INNER_OFF[Q] = {{{inner_off}}};",
        f"static const int OPP[Q] = {{{opp}}};",
        f"static const real SHIFT[Q] = {{{shift}}};",
        _macro("LBM_UNPACK", [" ".join(f"real f{i} = f_[{i}];" for i in range(q))]),
        _macro("LBM_PACK", [" ".join(f"out_[{i}] = o{i};" for i in range(q))]),
        _macro("LBM_COLLIDE", collide_body(spec)),
        *row_macros(spec),
    ]
    return "\n".join(parts) + "\n"
