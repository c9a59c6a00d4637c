"""Hand-fused CPU step (macroscopic, equilibrium, collide and stream in one pass) through ``jax.ffi``.

XLA:CPU materialises every value with more than one consumer (the shifted populations,
the velocity), so a pure-JAX step makes ~10 passes over memory (docs/performance.md).
This module generates C++ for one lattice, collision and storage type (the lattice
constants unrolled, like lbmpy), compiles it once with the system C++ compiler against
the XLA FFI headers that ship with jaxlib, caches the shared library on disk and
registers it as an XLA custom call. It is an optimisation only: the pure-JAX stages
stay the reference, and :func:`available` is False (the caller falls back) when no
compiler is found.

Three kernels per library, all periodic on every axis, populations ``(Q, *grid)``:

``push``     ``dst[i](x + c_i) = collide(src(x))_i``: one step, two buffers;
``aa_even``  ``A[opp(i)](x) = collide(A(x))_i``: in place, local (AA pattern, even step);
``aa_odd``   ``A[i](x + c_i) = collide({A[opp(k)](x - c_k)})_i``: in place (AA pattern, odd step).

An even step followed by an odd step equals two push steps and leaves the state in the
standard layout; each cell reads and writes only its own slots, so both AA kernels are
race-free in place and the population array is never duplicated.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lbm.lattice import CS2, Lattice

KERNELS = ("push", "aa_even", "aa_odd", "scatter")
STORAGE = {"float32": ("float", "float"), "float64": ("double", "double"), "bf16": ("float", "bf16"),
           "f16": ("float", "f16")}
"""storage name -> (C compute type, C storage type)."""
SHIFTED = ("bf16", "f16")
"""16-bit storages keep f_i - w_i (deviations from the rest state) to spend their few mantissa bits on the signal."""

_lock = threading.Lock()
_registered: dict[str, str] = {}
_failure: dict[str, str] = {}


@dataclass(frozen=True)
class KernelSpec:
    """What one generated library computes: lattice, storage type, collision kind, body force present."""

    lattice: Lattice
    storage: str  # float32 | float64 | bf16 | f16 (16-bit: f - w stored, float32 compute)
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


def _collide_body(spec: KernelSpec) -> str:
    """C statements computing out[0..Q) from f[0..Q) in compute type ``real`` (same formulas as lbm.kernels)."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    c = lat.c
    lines = []
    lines.append(f"real rho = {_pairwise_sum([f'f{i}' for i in range(q)])};")
    for a in range(d):
        terms = [("+" if c[i, a] > 0 else "-") + f" f{i}" for i in range(q) if c[i, a] != 0]
        expr = " ".join(terms).lstrip("+ ")
        if spec.forced:
            expr = f"({expr}) + (real)0.5 * F[{a}]"
        lines.append(f"real m{a} = {expr};")
    for a in range(d):
        lines.append(f"real u{a} = m{a} / rho;")
    lines.append("real usq = " + " + ".join(f"u{a} * u{a}" for a in range(d)) + ";")
    lines.append("real base = (real)1 - (real)1.5 * usq;")
    for i in range(q):
        w = _fmt(lat.w[i])
        if c[i].any():
            cu = " ".join(("+" if c[i, a] > 0 else "-") + f" u{a}" for a in range(d) if c[i, a] != 0).lstrip("+ ")
            lines.append(f"real cu{i} = {cu};")
            lines.append(f"real feq{i} = (real){w} * rho * (base + cu{i} * ((real)3 + (real)4.5 * cu{i}));")
        else:
            lines.append(f"real cu{i} = 0;")
            lines.append(f"real feq{i} = (real){w} * rho * base;")
    if spec.trt:
        for i in range(q):
            lines.append(f"real neq{i} = f{i} - feq{i};")
        for i in range(q):
            o = int(lat.opposite[i])
            lines.append(
                f"real o{i} = f{i} - wp * ((real)0.5 * (neq{i} + neq{o})) - wm * ((real)0.5 * (neq{i} - neq{o}));")
    else:
        for i in range(q):
            lines.append(f"real o{i} = f{i} - wp * (f{i} - feq{i});")
    if spec.forced:
        lines.append("real uf = " + " + ".join(f"F[{a}] * u{a}" for a in range(d)) + ";")
        lines.append("real kp = (real)1 - (real)0.5 * wp, km = (real)1 - (real)0.5 * wm;")
        for i in range(q):
            cf = " ".join(("+" if c[i, a] > 0 else "-") + f" F[{a}]" for a in range(d) if c[i, a] != 0).lstrip("+ ")
            cf = cf or "(real)0"
            w = _fmt(lat.w[i])
            lines.append(
                f"{{ real cf = {cf}; real sym = (real){w} * (-uf / (real){_fmt(CS2)} + cu{i} * cf / (real){_fmt(CS2**2)});"
                f" real anti = (real){w} * cf / (real){_fmt(CS2)}; o{i} += kp * sym + km * anti; }}")
    return "\n        ".join(lines)


def _shift(spec: KernelSpec, i: int, sign: str) -> str:
    """bfloat16 storage holds f_i - w_i (deviations from rest): the term adding (+) or removing (-) w_i."""
    return f" {sign} (real){_fmt(spec.lattice.w[i])}" if spec.storage in SHIFTED else ""


def _interior(spec: KernelSpec) -> str:
    """The vectorisable inner loop over the last axis, unrolled over directions, for each kernel kind."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    parts = []
    for kind in ("PUSH", "AA_EVEN", "AA_ODD"):
        lines = [f"    if (K == {kind}) {{"]
        for i in range(q):
            lines.append(f"      const store* r{i} = rp[{i}]; store* w{i} = wrow[{i}];")
        lines.append("#pragma omp simd")
        lines.append("      for (int64_t k = 1; k < n - 1; ++k) {")
        for i in range(q):
            off = -int(lat.c[i, d - 1]) if kind == "AA_ODD" else 0
            lines.append(f"        real f{i} = LD(r{i} + k + ({off})){_shift(spec, i, '+')};")
        lines.append("        " + _collide_body(spec))
        for i in range(q):
            off = 0 if kind == "AA_EVEN" else int(lat.c[i, d - 1])
            lines.append(f"        ST(w{i} + k + ({off}), o{i}{_shift(spec, i, '-')});")
        lines.append("      }")
        lines.append("    }")
        parts.append("\n".join(lines))
    return "\n".join(parts)


def source(spec: KernelSpec) -> str:
    """The C++ source of the three kernels for ``spec``."""
    lat = spec.lattice
    q, d = lat.q, lat.d
    real, store = STORAGE[spec.storage]
    c = lat.c
    opp = lat.opposite
    # Outer dims: all but the last grid axis (flattened); inner: last axis (contiguous).
    outer_off = ", ".join("{" + ", ".join(str(int(c[i, a])) for a in range(d - 1)) + "}" for i in range(q))
    inner_off = ", ".join(str(int(c[i, d - 1])) for i in range(q))
    opp_list = ", ".join(str(int(o)) for o in opp)
    shift_list = ", ".join(f"(real){_fmt(lat.w[i]) if spec.storage in SHIFTED else '0'}" for i in range(q))
    if store == "bf16":
        store_t = "uint16_t"
        conv = """
static inline real LD(const uint16_t* p) { uint32_t b = (uint32_t)(*p) << 16; float v; std::memcpy(&v, &b, 4); return v; }
static inline void ST(uint16_t* p, real v) {
  uint32_t b; float fv = (float)v; std::memcpy(&b, &fv, 4);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) { *p = (uint16_t)((b >> 16) | 0x40); return; }
  b += 0x7fffu + ((b >> 16) & 1u); *p = (uint16_t)(b >> 16);
}"""
        ffi_type = "ffi::BF16"
    elif store == "f16":
        # IEEE half by integer arithmetic (round to nearest even, subnormals, inf, nan), so that GCC
        # vectorises it (it does not vectorise _Float16 conversions); exact against numpy/XLA's convert.
        store_t = "uint16_t"
        conv = """
static inline uint32_t U_(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float F_(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline real LD(const uint16_t* p) {
  const uint32_t h = *p, shifted_exp = 0x7c00u << 13;
  uint32_t o = (h & 0x7fffu) << 13;
  const uint32_t e = o & shifted_exp;
  o += (127u - 15u) << 23;
  const uint32_t o_inf = o + ((128u - 16u) << 23);
  const uint32_t o_den = U_(F_(o + (1u << 23)) - F_(113u << 23));
  o = e == shifted_exp ? o_inf : (e == 0 ? o_den : o);
  return F_(o | ((h & 0x8000u) << 16));
}
static inline void ST(uint16_t* p, real v) {
  const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t f = U_((float)v);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  const uint32_t o_inf = f > (255u << 23) ? 0x7e00u : 0x7c00u;
  const uint32_t o_den = U_(F_(f) + F_(magic)) - magic;
  const uint32_t o_norm = (f + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((f >> 13) & 1u)) >> 13;
  const uint32_t o = f >= ((127u + 16u) << 23) ? o_inf : (f < (113u << 23) ? o_den : o_norm);
  *p = (uint16_t)(o | (sign >> 16));
}"""
        ffi_type = "ffi::F16"
    else:
        store_t = store
        conv = f"""
static inline real LD(const {store}* p) {{ return (real)(*p); }}
static inline void ST({store}* p, real v) {{ *p = ({store})v; }}"""
        ffi_type = {"float": "ffi::F32", "double": "ffi::F64"}[store]
    body = _collide_body(spec)
    interior = _interior(spec)
    unpack = " ".join(f"real f{i} = f_[{i}];" for i in range(q))
    pack = " ".join(f"out_[{i}] = o{i};" for i in range(q))
    return f"""// Generated by lbm.kernels.native for {spec.tag}; do not edit.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;
typedef {real} real;
typedef {store_t} store;
{conv}
static const int Q = {q};
static const int D = {d};
static const int OUTER_OFF[Q][D > 1 ? D - 1 : 1] = {{{outer_off}}};
static const int INNER_OFF[Q] = {{{inner_off}}};
static const int OPP[Q] = {{{opp_list}}};
static const real SHIFT[Q] = {{{shift_list}}};

static inline void collide(const real* __restrict f_, real* __restrict out_, real wp, real wm, const real* F) {{
        (void)F; (void)wm;
        {unpack}
        {body}
        {pack}
}}

struct Geometry {{
  int64_t outer_dims[2];  // sizes of the outer axes (D-1 of them)
  int64_t n_outer, n_inner, plane;
}};

static inline int64_t wrap(int64_t v, int64_t n) {{ return v < 0 ? v + n : (v >= n ? v - n : v); }}

// Flat outer index of outer cell o moved by s * OUTER_OFF[i], periodic.
// (x[, y]) are the outer coordinates of the row; 2D rows have only x.
static inline int64_t outer_shift(const Geometry& g, int64_t x, int64_t y, int i, int s) {{
  if (D == 2) return wrap(x + s * OUTER_OFF[i][0], g.n_outer);
  return wrap(x + s * OUTER_OFF[i][0], g.outer_dims[0]) * g.outer_dims[1] +
         wrap(y + s * OUTER_OFF[i][D > 2 ? 1 : 0], g.outer_dims[1]);
}}

enum Kind {{ PUSH = 0, AA_EVEN = 1, AA_ODD = 2 }};

template <int K>
static void rows(const Geometry& g, const store* src, store* dst, int64_t o0, int64_t o1, real wp, real wm,
                 const real* F) {{
  const int64_t n = g.n_inner, P = g.plane;
  const store* rp[Q];
  store* wrow[Q];
  real f[Q], out[Q];
  const int64_t ny = D == 2 ? 1 : g.outer_dims[1];
  int64_t x = D == 2 ? o0 : o0 / ny, y = D == 2 ? 0 : o0 - (o0 / ny) * ny;
  for (int64_t o = o0; o < o1; ++o) {{
    for (int i = 0; i < Q; ++i) {{
      if (K == PUSH) {{
        rp[i] = src + i * P + o * n;
        wrow[i] = dst + i * P + outer_shift(g, x, y, i, +1) * n;
      }} else if (K == AA_EVEN) {{
        rp[i] = dst + i * P + o * n;
        wrow[i] = dst + OPP[i] * P + o * n;
      }} else {{
        rp[i] = dst + OPP[i] * P + outer_shift(g, x, y, i, -1) * n;
        wrow[i] = dst + i * P + outer_shift(g, x, y, i, +1) * n;
      }}
    }}
    if (D == 2) {{ ++x; }} else if (++y == ny) {{ y = 0; ++x; }}
    // edges of the inner axis (periodic wrap), scalar
    int64_t edge[2] = {{0, n - 1}};
    for (int e = 0; e < (n > 1 ? 2 : 1); ++e) {{
      int64_t k = edge[e];
      for (int i = 0; i < Q; ++i) {{
        int64_t kr = (K == AA_ODD) ? wrap(k - INNER_OFF[i], n) : k;
        f[i] = LD(rp[i] + kr) + SHIFT[i];
      }}
      collide(f, out, wp, wm, F);
      for (int i = 0; i < Q; ++i) {{
        int64_t kw = (K == AA_EVEN) ? k : wrap(k + INNER_OFF[i], n);
        ST(wrow[i] + kw, out[i] - SHIFT[i]);
      }}
    }}
    // interior of the inner axis: no wrap, vectorised
{interior}
  }}
}}

template <int K>
static ffi::Error run(ffi::ThreadPool pool, const store* src, store* dst, ffi::Span<const int64_t> dims,
                      double omega_plus, double omega_minus, ffi::Span<const double> force) {{
  if ((int64_t)dims.size() != D + 1 || dims[0] != Q)
    return ffi::Error::InvalidArgument("lbm kernel: populations must have shape (Q, *grid) for this lattice");
  Geometry g;
  g.n_outer = 1;
  for (int a = 0; a < D - 1; ++a) {{ g.outer_dims[a] = dims[1 + a]; g.n_outer *= dims[1 + a]; }}
  g.n_inner = dims[D];
  g.plane = g.n_outer * g.n_inner;
  real F[D > 0 ? D : 1];
  for (int a = 0; a < D; ++a) F[a] = (a < (int)force.size()) ? (real)force[a] : (real)0;
  real wp = (real)omega_plus, wm = (real)omega_minus;
  // The calling thread is one of the pool's: pool.num_threads() workers in all (one more oversubscribes
  // the cores: measured 5-10% slower on 2 cores). LBM_NATIVE_THREADS overrides the count.
  int64_t workers = std::max<int64_t>(1, pool.num_threads());
  if (const char* env = std::getenv("LBM_NATIVE_THREADS")) {{ int64_t t = std::atoll(env); if (t >= 1) workers = t; }}
  if (g.plane < 16384) workers = 1;
  if (workers == 1) {{
    rows<K>(g, src, dst, 0, g.n_outer, wp, wm, F);
    return ffi::Error::Success();
  }}
  // Dynamic schedule: workers (the caller included) claim blocks of rows until none is left, so a
  // worker slowed by other load does less. The state lives on the heap: a pool task that starts after
  // the caller has returned finds no rows left and touches nothing else.
  struct Shared {{
    std::atomic<int64_t> next{{0}}, done{{0}};
    Geometry g; const store* src; store* dst; real wp, wm, F[D > 0 ? D : 1]; int64_t block;
  }};
  auto sh = std::make_shared<Shared>();
  sh->g = g; sh->src = src; sh->dst = dst; sh->wp = wp; sh->wm = wm;
  for (int a = 0; a < D; ++a) sh->F[a] = F[a];
  sh->block = std::max<int64_t>(1, g.n_outer / (8 * workers));
  auto work = [](Shared& s) {{
    for (;;) {{
      int64_t o0 = s.next.fetch_add(s.block, std::memory_order_relaxed);
      if (o0 >= s.g.n_outer) return;
      int64_t o1 = std::min(o0 + s.block, s.g.n_outer);
      rows<K>(s.g, s.src, s.dst, o0, o1, s.wp, s.wm, s.F);
      s.done.fetch_add(o1 - o0, std::memory_order_release);
    }}
  }};
  for (int64_t p = 1; p < workers; ++p) pool.Schedule([sh, work]() {{ work(*sh); }});
  work(*sh);
  while (sh->done.load(std::memory_order_acquire) < g.n_outer) std::this_thread::yield();
  return ffi::Error::Success();
}}

// Gather the populations at flat slots idx[0..m) into pre (before the step overwrites them).
static void gather(const store* a, ffi::Buffer<ffi::S32>& idx, ffi::ResultBuffer<{ffi_type}>& pre) {{
  const int32_t* ix = idx.typed_data();
  store* out = reinterpret_cast<store*>(pre->typed_data());
  const int64_t m = (int64_t)idx.element_count();
  for (int64_t j = 0; j < m; ++j) out[j] = a[ix[j]];
}}

static ffi::Error Push(ffi::ThreadPool pool, ffi::Buffer<{ffi_type}> src, ffi::Buffer<{ffi_type}> dst_in,
                       ffi::Buffer<ffi::S32> idx, ffi::ResultBuffer<{ffi_type}> dst, ffi::ResultBuffer<{ffi_type}> pre,
                       double omega_plus, double omega_minus, ffi::Span<const double> force) {{
  (void)dst_in;
  const store* s = reinterpret_cast<const store*>(src.typed_data());
  gather(s, idx, pre);
  return run<PUSH>(pool, s, reinterpret_cast<store*>(dst->typed_data()), src.dimensions(), omega_plus, omega_minus,
                   force);
}}

template <int K>
static ffi::Error InPlace(ffi::ThreadPool pool, ffi::Buffer<{ffi_type}> a_in, ffi::Buffer<ffi::S32> idx,
                          ffi::ResultBuffer<{ffi_type}> a, ffi::ResultBuffer<{ffi_type}> pre, double omega_plus,
                          double omega_minus, ffi::Span<const double> force) {{
  (void)a_in;
  store* p = reinterpret_cast<store*>(a->typed_data());
  gather(p, idx, pre);
  return run<K>(pool, nullptr, p, a->dimensions(), omega_plus, omega_minus, force);
}}

// Store vals[0..m) at the flat slots idx[0..m) of a, in place (boundary fix-ups after a step).
static ffi::Error Scatter(ffi::Buffer<{ffi_type}> a_in, ffi::Buffer<ffi::S32> idx, ffi::Buffer<{ffi_type}> vals,
                          ffi::ResultBuffer<{ffi_type}> a) {{
  (void)a_in;
  if (idx.element_count() != vals.element_count())
    return ffi::Error::InvalidArgument("lbm scatter: slots and values differ in size");
  store* p = reinterpret_cast<store*>(a->typed_data());
  const store* v = reinterpret_cast<const store*>(vals.typed_data());
  const int32_t* ix = idx.typed_data();
  const int64_t m = (int64_t)idx.element_count();
  for (int64_t j = 0; j < m; ++j) p[ix[j]] = v[j];
  return ffi::Error::Success();
}}
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_scatter, Scatter,
    ffi::Ffi::Bind().Arg<ffi::Buffer<{ffi_type}>>().Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::Buffer<{ffi_type}>>()
        .Ret<ffi::Buffer<{ffi_type}>>());

#define LBM_ATTRS .Attr<double>("omega_plus").Attr<double>("omega_minus").Attr<ffi::Span<const double>>("force")
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_push, Push,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<{ffi_type}>>().Arg<ffi::Buffer<{ffi_type}>>()
        .Arg<ffi::Buffer<ffi::S32>>().Ret<ffi::Buffer<{ffi_type}>>().Ret<ffi::Buffer<{ffi_type}>>() LBM_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_aa_even, InPlace<AA_EVEN>,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<{ffi_type}>>().Arg<ffi::Buffer<ffi::S32>>()
        .Ret<ffi::Buffer<{ffi_type}>>().Ret<ffi::Buffer<{ffi_type}>>() LBM_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_aa_odd, InPlace<AA_ODD>,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<{ffi_type}>>().Arg<ffi::Buffer<ffi::S32>>()
        .Ret<ffi::Buffer<{ffi_type}>>().Ret<ffi::Buffer<{ffi_type}>>() LBM_ATTRS);
"""


def compiler() -> str | None:
    """The C++ compiler used to build kernels ($CXX, else c++/g++/clang++ on PATH), or None."""
    for cand in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


def cache_dir() -> Path:
    """Where built kernel libraries are kept ($LBM_KERNEL_CACHE, else the user cache directory)."""
    env = os.environ.get("LBM_KERNEL_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lbm" / "kernels"


CXXFLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp-simd", "-std=c++17", "-shared", "-fPIC",
            "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off")
"""-ffp-contract=off: no fused multiply-adds, so results do not depend on the vector width chosen;
-fno-trapping-math lets the vectoriser evaluate both sides of the 16-bit conversions' selects."""


def cxxflags() -> list[str]:
    """Compiler flags: CXXFLAGS plus $LBM_NATIVE_EXTRA_FLAGS (space separated; for experiments)."""
    return [*CXXFLAGS, *os.environ.get("LBM_NATIVE_EXTRA_FLAGS", "").split()]


def _cpu_id() -> str:
    """CPU model and feature flags: -march=native builds are only reused on the same kind of CPU."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "|".join(ln for ln in lines if ln.startswith(("model name", "flags")))[:4096]
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def build(spec: KernelSpec) -> Path:
    """Compile the library for ``spec`` into the cache (once; keyed by source, flags and jaxlib); return its path."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX or install g++)")
    src = source(spec)
    flags = cxxflags()
    key = hashlib.sha256("\n".join([src, " ".join(flags), cxx, jax.__version__, sys.platform, _cpu_id()]).encode()
                         ).hexdigest()[:16]
    out = cache_dir() / f"lbm_{spec.tag}_{key}.so"
    if out.exists():
        return out
    cmd = [cxx, *flags, f"-I{jax.ffi.include_dir()}", "kernel.cc", "-o", "kernel.so"]
    for attempt in range(2):  # the cache directory may be removed under us by a cleaner: retry once
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
                (Path(tmp) / "kernel.cc").write_text(src)
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
                if proc.returncode != 0:
                    raise RuntimeError(f"kernel build failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
                os.replace(Path(tmp) / "kernel.so", out)  # atomic: concurrent builders agree on the result
            return out
        except FileNotFoundError:
            if attempt:
                raise
    return out


def register(spec: KernelSpec) -> str:
    """Build (if needed), load and register the kernels of ``spec``; returns the FFI target prefix."""
    with _lock:
        if spec.tag in _registered:
            return _registered[spec.tag]
        if spec.tag in _failure:
            raise RuntimeError(_failure[spec.tag])
        try:
            path = build(spec)
            lib = ctypes.cdll.LoadLibrary(str(path))
            prefix = f"lbm_{spec.tag}_{path.stem.rsplit('_', 1)[-1]}"
            for k in KERNELS:
                jax.ffi.register_ffi_target(f"{prefix}_{k}", jax.ffi.pycapsule(getattr(lib, f"lbm_{k}")), platform="cpu")
        except Exception as exc:  # remember: do not retry a broken build on every call
            _failure[spec.tag] = str(exc)
            raise
        _registered[spec.tag] = prefix
        return prefix


def available(spec: KernelSpec | None = None) -> bool:
    """Whether the native kernels can be used here (CPU backend, a compiler, and ``spec`` builds if given)."""
    if jax.default_backend() != "cpu" or compiler() is None:
        return False
    if spec is None:
        return True
    try:
        register(spec)
    except Exception:
        return False
    return True


def _attrs(omega_plus: float, omega_minus: float, force: np.ndarray | None, d: int) -> dict[str, Any]:
    f = np.zeros(d) if force is None else np.asarray(force, np.float64)
    return {"omega_plus": np.float64(omega_plus), "omega_minus": np.float64(omega_minus), "force": f.astype(np.float64)}


def _no_slots() -> np.ndarray:
    return np.zeros(0, np.int32)


def push(spec: KernelSpec, src: jnp.ndarray, dst: jnp.ndarray, omega_plus: float, omega_minus: float,
         force: np.ndarray | None = None, slots: jnp.ndarray | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """One collide-and-stream step from ``src`` into ``dst``'s buffer (``dst`` is overwritten).

    Returns the new populations and ``src`` at the flat ``slots`` (int32, any shape), read first.
    """
    prefix = register(spec)
    slots = _no_slots() if slots is None else slots
    out = (jax.ShapeDtypeStruct(src.shape, src.dtype), jax.ShapeDtypeStruct(slots.shape, src.dtype))
    call = jax.ffi.ffi_call(f"{prefix}_push", out, input_output_aliases={1: 0})
    return call(src, dst, slots, **_attrs(omega_plus, omega_minus, force, spec.lattice.d))


def aa_step(spec: KernelSpec, a: jnp.ndarray, parity: int, omega_plus: float, omega_minus: float,
            force: np.ndarray | None = None, slots: jnp.ndarray | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """One in-place AA-pattern step: parity 0 (even, local) or 1 (odd, neighbours).

    Returns the new populations and the old ones at the flat ``slots`` (int32, any shape), read first.
    """
    prefix = register(spec)
    name = f"{prefix}_{'aa_even' if parity == 0 else 'aa_odd'}"
    slots = _no_slots() if slots is None else slots
    out = (jax.ShapeDtypeStruct(a.shape, a.dtype), jax.ShapeDtypeStruct(slots.shape, a.dtype))
    call = jax.ffi.ffi_call(name, out, input_output_aliases={0: 0})
    return call(a, slots, **_attrs(omega_plus, omega_minus, force, spec.lattice.d))


def scatter(spec: KernelSpec, a: jnp.ndarray, slots: jnp.ndarray, values: jnp.ndarray) -> jnp.ndarray:
    """``a`` with ``values`` stored at the flat ``slots`` (int32, same shape as values), in place."""
    prefix = register(spec)
    call = jax.ffi.ffi_call(f"{prefix}_scatter", jax.ShapeDtypeStruct(a.shape, a.dtype), input_output_aliases={0: 0})
    return call(a, slots, values.astype(a.dtype))
