// lbm native CPU kernels: collide-and-stream over the whole lattice (periodic on every axis), populations (Q, *grid).
//
// The lattice-specific part (velocity set, collision body, row loads and stores) comes from the generated
// header lbm_generated.h (lbm/engines/native/codegen.py); everything here is the same for every lattice.
//   push     dst[i](x + c_i) = collide(src(x))_i                          one step, two buffers
//   aa_even  A[opp(i)](x) = collide(A(x))_i                                in place (AA pattern, even step)
//   aa_odd   A[i](x + c_i) = collide({A[opp(k)](x - c_k)})_i               in place (AA pattern, odd step)
//   scatter  store values at flat slots, in place                          (boundary fix-ups after a step)
//   walls    apply wall link records in place, then gather populations    (bounce-back after a step)
// Each step kernel first gathers the populations at the given flat slots (the boundary cells' inputs, and the values
// full-way walls keep) before it overwrites them. The walls kernel applies bounce-back from link records
// (lbm.engines.native.plan.wall_records), then gathers the post-step populations at the given slots (what boundary
// conditions that only observe the step, e.g. forces, read):
//   rest  a[d] = w_k                      (k = d / plane: a solid cell's populations not reflected)
//   copy  a[d] = a[s] + add               (half-way link: the fluid neighbour's reflected population + moving-wall term)
//   keep  a[d] = old a[s]                 (full-way: the solid cell's own pre-step populations, reversed)
// Record destinations are write slots of solid cells, sources write slots of fluid cells (or pre-step values), so
// the records are independent of each other and of their order.
// An even step followed by an odd step equals two push steps; each cell reads and writes only its
// own slots, so the AA kernels are race-free in place. Rows of the outer axes are shared among XLA's intra-op
// threads with a dynamic schedule; the innermost axis is vectorised (its two edge cells wrap, scalar).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;

#include "lbm_generated.h"  // real, store, LBM_FFI_TYPE, Q, D, OUTER_OFF, INNER_OFF, OPP, SHIFT, LBM_* macros

// ---- loads and stores of the storage type ---------------------------------------------------------------------
#if defined(LBM_STORE_BF16)
static inline real LD(const uint16_t* p) { uint32_t b = (uint32_t)(*p) << 16; float v; std::memcpy(&v, &b, 4); return v; }
static inline void ST(uint16_t* p, real v) {
  uint32_t b; float fv = (float)v; std::memcpy(&b, &fv, 4);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) { *p = (uint16_t)((b >> 16) | 0x40); return; }
  b += 0x7fffu + ((b >> 16) & 1u); *p = (uint16_t)(b >> 16);
}
#elif defined(LBM_STORE_F16)
// IEEE half by integer arithmetic (round to nearest even, subnormals, inf, nan), so that GCC
// vectorises it (it does not vectorise _Float16 conversions); exact against numpy/XLA's convert.
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
}
#else
static inline real LD(const store* p) { return (real)(*p); }
static inline void ST(store* p, real v) { *p = (store)v; }
#endif

// ---- one cell -------------------------------------------------------------------------------------------------
static inline void collide(const real* __restrict f_, real* __restrict out_, real wp, real wm, const real* F) {
  (void)F; (void)wm;
  LBM_UNPACK
  LBM_COLLIDE
  LBM_PACK
}

struct Geometry {
  int64_t outer_dims[2];  // sizes of the outer axes (D-1 of them)
  int64_t n_outer, n_inner, plane;
};

static inline int64_t wrap(int64_t v, int64_t n) { return v < 0 ? v + n : (v >= n ? v - n : v); }

// Flat outer index of outer cell o moved by s * OUTER_OFF[i], periodic.
// (x[, y]) are the outer coordinates of the row; 2D rows have only x.
static inline int64_t outer_shift(const Geometry& g, int64_t x, int64_t y, int i, int s) {
  if (D == 2) return wrap(x + s * OUTER_OFF[i][0], g.n_outer);
  return wrap(x + s * OUTER_OFF[i][0], g.outer_dims[0]) * g.outer_dims[1] +
         wrap(y + s * OUTER_OFF[i][D > 2 ? 1 : 0], g.outer_dims[1]);
}

enum Kind { PUSH = 0, AA_EVEN = 1, AA_ODD = 2 };

// ---- rows o0..o1 of the outer axes ------------------------------------------------------------------------------
template <int K>
static void rows(const Geometry& g, const store* src, store* dst, int64_t o0, int64_t o1, real wp, real wm,
                 const real* F) {
  const int64_t n = g.n_inner, P = g.plane;
  const store* rp[Q];
  store* wrow[Q];
  real f[Q], out[Q];
  const int64_t ny = D == 2 ? 1 : g.outer_dims[1];
  int64_t x = D == 2 ? o0 : o0 / ny, y = D == 2 ? 0 : o0 - (o0 / ny) * ny;
  for (int64_t o = o0; o < o1; ++o) {
    for (int i = 0; i < Q; ++i) {
      if (K == PUSH) {
        rp[i] = src + i * P + o * n;
        wrow[i] = dst + i * P + outer_shift(g, x, y, i, +1) * n;
      } else if (K == AA_EVEN) {
        rp[i] = dst + i * P + o * n;
        wrow[i] = dst + OPP[i] * P + o * n;
      } else {
        rp[i] = dst + OPP[i] * P + outer_shift(g, x, y, i, -1) * n;
        wrow[i] = dst + i * P + outer_shift(g, x, y, i, +1) * n;
      }
    }
    if (D == 2) { ++x; } else if (++y == ny) { y = 0; ++x; }
    // edges of the inner axis (periodic wrap), scalar
    int64_t edge[2] = {0, n - 1};
    for (int e = 0; e < (n > 1 ? 2 : 1); ++e) {
      int64_t k = edge[e];
      for (int i = 0; i < Q; ++i) {
        int64_t kr = (K == AA_ODD) ? wrap(k - INNER_OFF[i], n) : k;
        f[i] = LD(rp[i] + kr) + SHIFT[i];
      }
      collide(f, out, wp, wm, F);
      for (int i = 0; i < Q; ++i) {
        int64_t kw = (K == AA_EVEN) ? k : wrap(k + INNER_OFF[i], n);
        ST(wrow[i] + kw, out[i] - SHIFT[i]);
      }
    }
    // interior of the inner axis: no wrap, vectorised; one named scalar per direction (LBM_ROW_POINTERS)
    LBM_ROW_POINTERS
    if (K == PUSH) {
#pragma omp simd
      for (int64_t k = 1; k < n - 1; ++k) { LBM_LOAD_PUSH LBM_COLLIDE LBM_STORE_PUSH }
    }
    if (K == AA_EVEN) {
#pragma omp simd
      for (int64_t k = 1; k < n - 1; ++k) { LBM_LOAD_AA_EVEN LBM_COLLIDE LBM_STORE_AA_EVEN }
    }
    if (K == AA_ODD) {
#pragma omp simd
      for (int64_t k = 1; k < n - 1; ++k) { LBM_LOAD_AA_ODD LBM_COLLIDE LBM_STORE_AA_ODD }
    }
  }
}

// ---- work shared among XLA's intra-op threads ------------------------------------------------------------------
// The calling thread is one of the pool's: pool.num_threads() workers in all (one more oversubscribes
// the cores: measured 5-10% slower on 2 cores). LBM_NATIVE_THREADS overrides the count.
static int64_t worker_count(ffi::ThreadPool& pool) {
  int64_t workers = std::max<int64_t>(1, pool.num_threads());
  if (const char* env = std::getenv("LBM_NATIVE_THREADS")) { int64_t t = std::atoll(env); if (t >= 1) workers = t; }
  return workers;
}

// fn(i0, i1) over [0, n) in blocks of `block` items. Dynamic schedule: workers (the caller included) claim blocks
// until none is left, so a worker slowed by other load does less. The state lives on the heap: a pool task that
// starts after the caller has returned finds no items left and touches nothing else.
static void parallel_for(ffi::ThreadPool& pool, int64_t workers, int64_t n, int64_t block,
                         std::function<void(int64_t, int64_t)> fn) {
  if (workers <= 1 || n <= block) { if (n > 0) fn(0, n); return; }
  struct Shared { std::atomic<int64_t> next{0}, done{0}; int64_t n, block; std::function<void(int64_t, int64_t)> fn; };
  auto sh = std::make_shared<Shared>();
  sh->n = n; sh->block = block; sh->fn = std::move(fn);
  auto work = [](Shared& st) {
    for (;;) {
      int64_t i0 = st.next.fetch_add(st.block, std::memory_order_relaxed);
      if (i0 >= st.n) return;
      int64_t i1 = std::min(i0 + st.block, st.n);
      st.fn(i0, i1);
      st.done.fetch_add(i1 - i0, std::memory_order_release);
    }
  };
  for (int64_t p = 1; p < workers; ++p) pool.Schedule([sh, work]() { work(*sh); });
  work(*sh);
  while (sh->done.load(std::memory_order_acquire) < n) std::this_thread::yield();
}

// ---- the whole lattice --------------------------------------------------------------------------------------------
template <int K>
static ffi::Error run(ffi::ThreadPool& pool, const store* src, store* dst, ffi::Span<const int64_t> dims,
                      double omega_plus, double omega_minus, ffi::Span<const double> force) {
  if ((int64_t)dims.size() != D + 1 || dims[0] != Q)
    return ffi::Error::InvalidArgument("lbm kernel: populations must have shape (Q, *grid) for this lattice");
  Geometry g;
  g.n_outer = 1;
  for (int a = 0; a < D - 1; ++a) { g.outer_dims[a] = dims[1 + a]; g.n_outer *= dims[1 + a]; }
  g.n_inner = dims[D];
  g.plane = g.n_outer * g.n_inner;
  real F[D > 0 ? D : 1];
  for (int a = 0; a < D; ++a) F[a] = (a < (int)force.size()) ? (real)force[a] : (real)0;
  const real wp = (real)omega_plus, wm = (real)omega_minus;
  const int64_t workers = g.plane < 16384 ? 1 : worker_count(pool);
  parallel_for(pool, workers, g.n_outer, std::max<int64_t>(1, g.n_outer / (8 * workers)),
               [&](int64_t o0, int64_t o1) { rows<K>(g, src, dst, o0, o1, wp, wm, F); });
  return ffi::Error::Success();
}

// ---- walls: link records applied after the bulk pass ----------------------------------------------------------------
struct Walls {
  const int32_t *rest, *copy_dst, *copy_src, *keep_dst;
  const real* copy_add;  // null: no moving-wall term
  const store* keep;     // the full-way records' pre-step values (gathered by the step's kernel)
  int64_t n_rest, n_copy, n_keep;
};

static void apply_walls(ffi::ThreadPool& pool, store* a, const Walls& w, int64_t plane) {
  const int64_t n = w.n_rest + w.n_copy + w.n_keep;
  const int64_t workers = n < 16384 ? 1 : worker_count(pool);
  static const real WEIGHT_[Q] = LBM_WEIGHTS;
  parallel_for(pool, workers, n, std::max<int64_t>(4096, n / (8 * workers)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < std::min(j1, w.n_rest); ++j) {
      const int32_t d = w.rest[j];
      const int k = (int)(d / plane);
      ST(a + d, WEIGHT_[k] - SHIFT[k]);
    }
    for (int64_t j = std::max(j0, w.n_rest); j < std::min(j1, w.n_rest + w.n_copy); ++j) {
      const int64_t r = j - w.n_rest;
      ST(a + w.copy_dst[r], LD(a + w.copy_src[r]) + (w.copy_add ? w.copy_add[r] : (real)0));
    }
    for (int64_t j = std::max(j0, w.n_rest + w.n_copy); j < j1; ++j) {
      const int64_t r = j - w.n_rest - w.n_copy;
      a[w.keep_dst[r]] = w.keep[r];
    }
  });
}

// ---- FFI handlers ---------------------------------------------------------------------------------------------
// Gather the populations at flat slots idx[0..m) into pre (before the step overwrites them).
static void gather(const store* a, ffi::Buffer<ffi::S32>& idx, ffi::ResultBuffer<LBM_FFI_TYPE>& pre) {
  const int32_t* ix = idx.typed_data();
  store* out = reinterpret_cast<store*>(pre->typed_data());
  const int64_t m = (int64_t)idx.element_count();
  for (int64_t j = 0; j < m; ++j) out[j] = a[ix[j]];
}


static ffi::Error Push(ffi::ThreadPool pool, ffi::Buffer<LBM_FFI_TYPE> src, ffi::Buffer<LBM_FFI_TYPE> dst_in,
                       ffi::Buffer<ffi::S32> idx, ffi::ResultBuffer<LBM_FFI_TYPE> dst, ffi::ResultBuffer<LBM_FFI_TYPE> pre,
                       double omega_plus, double omega_minus, ffi::Span<const double> force) {
  (void)dst_in;
  const store* s = reinterpret_cast<const store*>(src.typed_data());
  gather(s, idx, pre);
  return run<PUSH>(pool, s, reinterpret_cast<store*>(dst->typed_data()), src.dimensions(), omega_plus, omega_minus,
                   force);
}

template <int K>
static ffi::Error InPlace(ffi::ThreadPool pool, ffi::Buffer<LBM_FFI_TYPE> a_in, ffi::Buffer<ffi::S32> idx,
                          ffi::ResultBuffer<LBM_FFI_TYPE> a, ffi::ResultBuffer<LBM_FFI_TYPE> pre, double omega_plus,
                          double omega_minus, ffi::Span<const double> force) {
  (void)a_in;
  store* p = reinterpret_cast<store*>(a->typed_data());
  gather(p, idx, pre);
  return run<K>(pool, nullptr, p, a->dimensions(), omega_plus, omega_minus, force);
}

// Apply the wall records to a step's result in place, then gather the populations at the observe slots.
static ffi::Error Walls_(ffi::ThreadPool pool, ffi::Buffer<LBM_FFI_TYPE> a_in, ffi::Buffer<LBM_FFI_TYPE> keep,
                         ffi::Buffer<ffi::S32> observe, ffi::Buffer<ffi::S32> rest, ffi::Buffer<ffi::S32> copy_dst,
                         ffi::Buffer<ffi::S32> copy_src, ffi::Buffer<LBM_REAL_FFI_TYPE> copy_add,
                         ffi::Buffer<ffi::S32> keep_dst, ffi::ResultBuffer<LBM_FFI_TYPE> a,
                         ffi::ResultBuffer<LBM_FFI_TYPE> post) {
  (void)a_in;
  Walls w;
  w.rest = rest.typed_data(); w.n_rest = (int64_t)rest.element_count();
  w.copy_dst = copy_dst.typed_data(); w.copy_src = copy_src.typed_data(); w.n_copy = (int64_t)copy_dst.element_count();
  w.copy_add = copy_add.element_count() ? reinterpret_cast<const real*>(copy_add.typed_data()) : nullptr;
  w.keep_dst = keep_dst.typed_data(); w.n_keep = (int64_t)keep_dst.element_count();
  w.keep = reinterpret_cast<const store*>(keep.typed_data());
  if ((int64_t)copy_src.element_count() != w.n_copy || (w.copy_add && (int64_t)copy_add.element_count() != w.n_copy) ||
      (int64_t)keep.element_count() != w.n_keep)
    return ffi::Error::InvalidArgument("lbm walls: records differ in length");
  store* p = reinterpret_cast<store*>(a->typed_data());
  apply_walls(pool, p, w, (int64_t)a->element_count() / Q);
  gather(p, observe, post);
  return ffi::Error::Success();
}

// Store vals[0..m) at the flat slots idx[0..m) of a, in place (boundary fix-ups after a step).
static ffi::Error Scatter(ffi::Buffer<LBM_FFI_TYPE> a_in, ffi::Buffer<ffi::S32> idx, ffi::Buffer<LBM_FFI_TYPE> vals,
                          ffi::ResultBuffer<LBM_FFI_TYPE> a) {
  (void)a_in;
  if (idx.element_count() != vals.element_count())
    return ffi::Error::InvalidArgument("lbm scatter: slots and values differ in size");
  store* p = reinterpret_cast<store*>(a->typed_data());
  const store* v = reinterpret_cast<const store*>(vals.typed_data());
  const int32_t* ix = idx.typed_data();
  const int64_t m = (int64_t)idx.element_count();
  for (int64_t j = 0; j < m; ++j) p[ix[j]] = v[j];
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_scatter, Scatter,
    ffi::Ffi::Bind().Arg<ffi::Buffer<LBM_FFI_TYPE>>().Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::Buffer<LBM_FFI_TYPE>>()
        .Ret<ffi::Buffer<LBM_FFI_TYPE>>());

#define LBM_ATTRS .Attr<double>("omega_plus").Attr<double>("omega_minus").Attr<ffi::Span<const double>>("force")
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_push, Push,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>().Arg<ffi::Buffer<LBM_FFI_TYPE>>()
        .Arg<ffi::Buffer<ffi::S32>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>() LBM_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_aa_even, InPlace<AA_EVEN>,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>().Arg<ffi::Buffer<ffi::S32>>()
        .Ret<ffi::Buffer<LBM_FFI_TYPE>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>() LBM_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_aa_odd, InPlace<AA_ODD>,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>().Arg<ffi::Buffer<ffi::S32>>()
        .Ret<ffi::Buffer<LBM_FFI_TYPE>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>() LBM_ATTRS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_walls, Walls_,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>().Arg<ffi::Buffer<LBM_FFI_TYPE>>()
        .Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::Buffer<ffi::S32>>()
        .Arg<ffi::Buffer<ffi::S32>>().Arg<ffi::Buffer<LBM_REAL_FFI_TYPE>>().Arg<ffi::Buffer<ffi::S32>>()
        .Ret<ffi::Buffer<LBM_FFI_TYPE>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>());
