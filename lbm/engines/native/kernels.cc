// lbm native CPU kernels: collide-and-stream over the whole lattice (periodic on every axis), populations (Q, *grid).
//
// The lattice-specific part (velocity set, collision body, row loads and stores) comes from the generated
// header lbm_generated.h (lbm/engines/native/codegen.py); everything here is the same for every lattice.
//   push     dst[i](x + c_i) = collide(src(x))_i                          one step, two buffers
//   aa_even  A[opp(i)](x) = collide(A(x))_i                                in place (AA pattern, even step)
//   aa_odd   A[i](x + c_i) = collide({A[opp(k)](x - c_k)})_i               in place (AA pattern, odd step)
//   scatter  store values at flat slots, in place                          (boundary fix-ups after a step)
// Each step kernel first gathers the populations at the given flat slots (the boundary cells' inputs) before it
// overwrites them, applies a velocity inlet and a zero-gradient outflow on their faces (whole rows: RowFaces below)
// and the walls (bounce-back) row by row from link records (RowWalls below), and finally
// gathers the new populations at a second list of slots (what conditions that only observe the step, e.g. forces, read).
// An even step followed by an odd step equals two push steps; each cell reads and writes only its
// own slots, so the AA kernels are race-free in place. Rows of the outer axes are shared among XLA's intra-op
// threads with a dynamic schedule; the innermost axis is vectorised (its two edge cells wrap, scalar).
// Every storage type holds the deviations f_i - w_i from the rest state (lbm.kernels.equilibrium): a solid cell at
// rest holds zeros, and the generated collision computes on the deviations.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;

#include "lbm_generated.h"  // real, store, LBM_FFI_TYPE, Q, D, OUTER_OFF, INNER_OFF, OPP, LBM_* macros

// ---- loads and stores of the storage type ---------------------------------------------------------------------
#if defined(LBM_STORAGE_FLOAT16)
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
// F: the force table (LBM_FORCE_TABLE: the force, then Guo's per-direction constants); unused when unforced.
static inline void collide(const real* __restrict f_, real* __restrict out_, real wp, real wm, const real* __restrict F) {
  (void)wm;
  LBM_FORCE_CONSTANTS
  LBM_UNPACK
  LBM_COLLIDE
  LBM_PACK
}

// An inlet cell at inner index k: the inflow U[a][k], the inlet rule (kind fixed by the generated header), then collide.
static inline void collide_inlet(const real* __restrict f_, real* __restrict out_, real wp, real wm, const real* F,
                                 const real* const* U, int64_t k) {
  (void)wm; (void)U; (void)k;
  LBM_FORCE_CONSTANTS
  LBM_INLET_POINTERS
  LBM_UNPACK
  LBM_COLLIDE_INLET
  LBM_PACK
}

struct Geometry {
  int64_t outer_dims[2];  // sizes of the outer axes (D-1 of them)
  int64_t n_outer, n_inner, plane;
  int64_t prefetch;  // software prefetch distance in values (PREFETCH_BYTES), 0: none
};

// Values of one cache line; how far ahead of the cells being updated the row loops prefetch their lines
// (LBM_NATIVE_PREFETCH_BYTES overrides, 0 turns it off). Every row streams Q separate lines per cache line of cells,
// more than the hardware prefetchers follow: measured 1.3x (D2Q9 4096^2) and 1.6x (D3Q19 256^3) over none,
// 2 KB ahead the best of 0.5-4 KB (docs/performance.md, "Software prefetch").
static const int64_t LINE = 64 / sizeof(store);
static const int64_t PREFETCH_BYTES = 2048;

static inline int64_t wrap(int64_t v, int64_t n) { return v < 0 ? v + n : (v >= n ? v - n : v); }

// Flat outer index of outer cell o moved by s * OUTER_OFF[i], periodic.
// (x[, y]) are the outer coordinates of the row; 2D rows have only x.
static inline int64_t outer_shift(const Geometry& g, int64_t x, int64_t y, int i, int s) {
  if (D == 2) return wrap(x + s * OUTER_OFF[i][0], g.n_outer);
  return wrap(x + s * OUTER_OFF[i][0], g.outer_dims[0]) * g.outer_dims[1] +
         wrap(y + s * OUTER_OFF[i][D > 2 ? 1 : 0], g.outer_dims[1]);
}

enum Kind { PUSH = 0, AA_EVEN = 1, AA_ODD = 2 };

// ---- walls, row by row ------------------------------------------------------------------------------------------
// Link records of the walls (lbm.engines.native.plan.wall_records), grouped by outer row (offsets *_off[o]..[o+1]):
//   skip  [k0, k1) runs of solid cells of the row: the bulk pass neither reads nor writes them
//   rest  a[d] = 0                        a solid cell's populations that no link reflects: the rest state (its own row)
//   copy  a[d] = a[s] + add               a half-way link: s is the write slot of the opposite population of the
//                                         row's fluid cell across the link (just written), d the solid cell's slot;
//                                         add is the moving-wall term
//   keep  a[d] = src[s]                   full-way, push only: the solid cell's pre-step population, reversed
//                                         (in place, a skipped full-way cell already holds it: AA slots coincide)
// Every record writes a slot of a skipped solid cell and reads a slot its own row's fluid cell wrote (or the
// source buffer), so rows stay independent: the threads need no further synchronisation.
struct RowWalls {
  const int32_t *skip_off, *skip, *rest_off, *rest, *copy_off, *copy_dst, *copy_src, *keep_off, *keep_src, *keep_dst;
  const real* copy_add;  // null: no moving-wall term
};

// ---- faces in the kernel ------------------------------------------------------------------------------------------
// A velocity inlet on the face x = 0 and a zero-gradient outflow on x = nx - 1 are whole rows (the inner axis is not x).
//   inlet    rows [0, face_rows): the cells collide by LBM_COLLIDE_INLET with the inflow U (shape (D, face_rows, n))
//   outflow  rows [n_outer - face_rows, n_outer): the populations with c_x < 0 are read from `upstream`, the read rows of
//            the column x = nx - 2 copied before the step (in place, the step overwrites them), one row of n values per
//            unknown direction and face row, so the row loads (offsets and wrap included) apply to them unchanged.
struct RowFaces {
  int64_t face_rows;     // rows per x (1 in 2D, ny in 3D)
  const real* U;         // inflow (D, face_rows * n), or null: no inlet in the kernel
  const store* upstream; // (n_unknown, face_rows, n), or null: no outflow in the kernel
  int n_unknown;
  int unknown[Q];        // directions with c_x < 0
};

// ---- rows o0..o1 of the outer axes ------------------------------------------------------------------------------
// One cell at inner index k whose row pointers are rp/wrow, scalar, with periodic wrap of the inner axis.
// B = 1: an inlet cell (inflow U).
template <int K, int B>
static inline void cell(const store* const* rp, store* const* wrow, int64_t k, int64_t n, real wp, real wm,
                        const real* F, const real* const* U) {
  real f[Q], out[Q];
  for (int i = 0; i < Q; ++i) {
    int64_t kr = (K == AA_ODD) ? wrap(k - INNER_OFF[i], n) : k;
    f[i] = LD(rp[i] + kr);
  }
  if constexpr (B == 1) collide_inlet(f, out, wp, wm, F, U, k); else collide(f, out, wp, wm, F);
  for (int i = 0; i < Q; ++i) {
    int64_t kw = (K == AA_EVEN) ? k : wrap(k + INNER_OFF[i], n);
    ST(wrow[i] + kw, out[i]);
  }
}

// Cells k0..k1 of a row, none at its ends (no wrap): vectorised, one named scalar per direction (LBM_ROW_POINTERS).
// One loop per scheme; COLLIDE is the collision of a bulk cell or of an inlet cell.
// The row is swept one cache line of cells at a time; each line's cells first prefetch (for writing; push steps also
// for reading) the lines their rows will need pf values further on.
#define LBM_SCHEME_LOOP(KIND, COLLIDE)                                                                              \
  if (K == KIND) {                                                                                                  \
    for (int64_t c0 = k0; c0 < k1; c0 += LINE) {                                                                    \
      const int64_t c1 = std::min(c0 + LINE, k1);                                                                   \
      if (pf) {                                                                                                     \
        for (int i = 0; i < Q; ++i) __builtin_prefetch(wrow[i] + c0 + pf, 1);                                       \
        if (K == PUSH) for (int i = 0; i < Q; ++i) __builtin_prefetch(rp[i] + c0 + pf, 0);                          \
      }                                                                                                             \
      _Pragma("omp simd") for (int64_t k = c0; k < c1; ++k) { LBM_LOAD_##KIND COLLIDE LBM_STORE_##KIND }           \
    }                                                                                                               \
  }
template <int K, int B>
static inline __attribute__((always_inline)) void lines(const store* const* rp, store* const* wrow, int64_t k0,
                                                        int64_t k1, real wp, real wm, const real* F,
                                                        const real* const* U, int64_t pf) {
  (void)wm; (void)U;
  LBM_FORCE_CONSTANTS
  LBM_ROW_POINTERS
  if constexpr (B == 0) {
    LBM_SCHEME_LOOP(PUSH, LBM_COLLIDE) LBM_SCHEME_LOOP(AA_EVEN, LBM_COLLIDE) LBM_SCHEME_LOOP(AA_ODD, LBM_COLLIDE)
  } else {
    LBM_INLET_POINTERS
    LBM_SCHEME_LOOP(PUSH, LBM_COLLIDE_INLET) LBM_SCHEME_LOOP(AA_EVEN, LBM_COLLIDE_INLET)
    LBM_SCHEME_LOOP(AA_ODD, LBM_COLLIDE_INLET)
  }
}

// Cells k0..k1 of a row as lines(); where the last m < LINE cells have a whole line of cells before them in the row,
// they are the last lanes of one vector over the LINE cells ending at k1, computed into a buffer (the other lanes
// recompute cells already done from their new values, and are dropped) and copied into the row: one vector pass
// instead of a narrower one and scalar cells. Every cell reads only its own slots, so the lanes kept are exact.
template <int K, int B>
static inline void segment(const store* const* rp, store* const* wrow, int64_t k0, int64_t k1, real wp, real wm,
                           const real* F, const real* const* U, int64_t pf) {
  const int64_t m = (k1 - k0) % LINE, start = k1 - LINE;
  if (m == 0 || start < (K == AA_EVEN ? 0 : 1)) { lines<K, B>(rp, wrow, k0, k1, wp, wm, F, U, pf); return; }
  lines<K, B>(rp, wrow, k0, k1 - m, wp, wm, F, U, pf);
  alignas(64) store out[Q][LINE];
  store* lane[Q];
  for (int i = 0; i < Q; ++i) lane[i] = out[i] - start - (K == AA_EVEN ? 0 : INNER_OFF[i]);  // out[i][k - start]
  lines<K, B>(rp, lane, start, k1, wp, wm, F, U, 0);
  for (int i = 0; i < Q; ++i)
    std::memcpy(wrow[i] + (k1 - m) + (K == AA_EVEN ? 0 : INNER_OFF[i]), out[i] + (LINE - m), sizeof(store) * m);
}

// The two wrapping edge cells of a row as two lanes of one vector: their populations gathered as cell() reads them
// (the other lanes hold the rest state), collided by lines() on the copy, stored as cell() writes them.
template <int K>
static inline void edge_lanes(const store* const* rp, store* const* wrow, int64_t n, real wp, real wm, const real* F) {
  alignas(64) store in[Q][LINE] = {}, out[Q][LINE];
  const store* ip[Q];
  store* op[Q];
  const int64_t ks[2] = {0, n - 1};
  for (int i = 0; i < Q; ++i) {
    for (int j = 0; j < 2; ++j) in[i][j] = rp[i][K == AA_ODD ? wrap(ks[j] - INNER_OFF[i], n) : ks[j]];
    ip[i] = in[i];
    op[i] = out[i];
  }
  lines<AA_EVEN, 0>(ip, op, 0, LINE, wp, wm, F, nullptr, 0);
  for (int i = 0; i < Q; ++i)
    for (int j = 0; j < 2; ++j) wrow[i][wrap(ks[j] + INNER_OFF[i], n)] = out[i][j];
}

// With LBM_GATHERED_EDGES, a row of n = a multiple of LINE cells without solid cells (odd AA and push steps): its first
// LINE - 1 cells and its last cell (the two wrapping edge cells and the partial vector of cells after the first one)
// as the LINE lanes of one vector, copied in and out by whole runs of cells (the LINE - 2 cells between the edge cells
// by one copy per direction); the cells between them are whole vectors. One vector pass instead of two (edge_lanes,
// then the partial vector of segment). -DLBM_HEAD_LANES=0 turns it off (scripts/native_body_ab.py).
#ifndef LBM_HEAD_LANES
#define LBM_HEAD_LANES 1
#endif
template <int K>
static inline void head_lanes(const store* const* rp, store* const* wrow, int64_t n, real wp, real wm, const real* F) {
  constexpr int64_t H = LINE - 1;  // lanes 0..H-1: cells 0..H-1; lane H: cell n - 1
  alignas(64) store in[Q][LINE], out[Q][LINE];
  const store* ip[Q];
  store* op[Q];
  for (int i = 0; i < Q; ++i) {
    const int r = K == AA_ODD ? INNER_OFF[i] : 0;  // cell k reads slot k - r
    if (r == 1) {
      in[i][0] = rp[i][n - 1];
      std::memcpy(in[i] + 1, rp[i], sizeof(store) * (H - 1));
    } else {
      std::memcpy(in[i], rp[i] + (r == -1 ? 1 : 0), sizeof(store) * H);
    }
    in[i][H] = rp[i][wrap(n - 1 - r, n)];
    ip[i] = in[i];
    op[i] = out[i];
  }
  lines<AA_EVEN, 0>(ip, op, 0, LINE, wp, wm, F, nullptr, 0);
  for (int i = 0; i < Q; ++i) {
    const int s = INNER_OFF[i];  // cell k writes slot k + s
    if (s == -1) {
      wrow[i][n - 1] = out[i][0];
      std::memcpy(wrow[i], out[i] + 1, sizeof(store) * (H - 1));
    } else {
      std::memcpy(wrow[i] + s, out[i], sizeof(store) * H);
    }
    wrow[i][wrap(n - 1 + s, n)] = out[i][H];
  }
}

// The cells of one row: the edge cells (wrapping) scalar, the rest vectorised, runs of solid cells skipped (walls).
// The even AA step reads and writes each cell's own slots (no wrap): the whole row is vectorised. With
// LBM_GATHERED_EDGES (the long cell bodies, where one scalar cell costs about as much as a vector of cells), the two
// edge cells of a row without solid cells are two lanes of one vector: with the row's first cells (head_lanes) where
// n is a multiple of LINE, else alone (edge_lanes).
template <int K, int B>
static inline void row_cells(const store* const* rp, store* const* wrow, int64_t n, real wp, real wm, const real* F,
                             const real* const* U, const int32_t* sk, int64_t ns, int64_t pf) {
  const int64_t lo = K == AA_EVEN ? 0 : 1, hi = K == AA_EVEN ? n : n - 1;
  bool edges_done = false;
  if constexpr (LBM_GATHERED_EDGES && K != AA_EVEN && B == 0) {
    if (LBM_HEAD_LANES && ns == 0 && n % LINE == 0) {
      head_lanes<K>(rp, wrow, n, wp, wm, F);
      lines<K, B>(rp, wrow, LINE - 1, n - 1, wp, wm, F, U, pf);
      return;
    }
    if (ns == 0 && n > 2) {
      edge_lanes<K>(rp, wrow, n, wp, wm, F);
      edges_done = true;
    }
  }
  if (K != AA_EVEN && !edges_done) {
    if (!(ns && sk[0] == 0)) cell<K, B>(rp, wrow, 0, n, wp, wm, F, U);
    if (n > 1 && !(ns && sk[2 * ns - 1] == n)) cell<K, B>(rp, wrow, n - 1, n, wp, wm, F, U);
  }
  int64_t cur = lo;
  for (int64_t r = 0; r < ns; ++r) {
    const int64_t a = sk[2 * r], b = sk[2 * r + 1];
    if (a > cur) segment<K, B>(rp, wrow, cur, std::min(a, hi), wp, wm, F, U, pf);
    cur = std::max(cur, b);
  }
  if (cur < hi) segment<K, B>(rp, wrow, cur, hi, wp, wm, F, U, pf);
}

// Outer coordinates (x[, y]) of outer row o.
static inline void outer_xy(const Geometry& g, int64_t o, int64_t& x, int64_t& y) {
  const int64_t ny = D == 2 ? 1 : g.outer_dims[1];
  x = D == 2 ? o : o / ny;
  y = D == 2 ? 0 : o - x * ny;
}

// The row a cell of outer row (x, y) reads population i from, at inner offset 0 (AA odd: shifted by -c_i on the
// outer axes; its loads then shift by -c_i along the row).
template <int K>
static inline const store* read_row(const Geometry& g, const store* src, const store* dst, int i, int64_t o,
                                    int64_t x, int64_t y) {
  if (K == PUSH) return src + i * g.plane + o * g.n_inner;
  if (K == AA_EVEN) return dst + i * g.plane + o * g.n_inner;
  return dst + OPP[i] * g.plane + outer_shift(g, x, y, i, -1) * g.n_inner;
}

template <int K>
static void rows(const Geometry& g, const store* src, store* dst, int64_t o0, int64_t o1, real wp, real wm,
                 const real* F, const RowWalls* W, const RowFaces* S) {
  const int64_t n = g.n_inner;
  const store* rp[Q];
  store* wrow[Q];
  const real* U[D];
  const int64_t out0 = (S && S->upstream) ? g.n_outer - S->face_rows : g.n_outer;
  const int64_t in1 = (S && S->U) ? S->face_rows : 0;
  int64_t x, y;
  outer_xy(g, o0, x, y);
  const int64_t ny = D == 2 ? 1 : g.outer_dims[1];
  for (int64_t o = o0; o < o1; ++o) {
    for (int i = 0; i < Q; ++i) {
      rp[i] = read_row<K>(g, src, dst, i, o, x, y);
      if (K == PUSH) wrow[i] = dst + i * g.plane + outer_shift(g, x, y, i, +1) * n;
      else if (K == AA_EVEN) wrow[i] = dst + OPP[i] * g.plane + o * n;
      else wrow[i] = dst + i * g.plane + outer_shift(g, x, y, i, +1) * n;
    }
    if (D == 2) { ++x; } else if (++y == ny) { y = 0; ++x; }
    if (o >= out0)  // outflow: the unknown populations from the upstream copy
      for (int j = 0; j < S->n_unknown; ++j) rp[S->unknown[j]] = S->upstream + (j * S->face_rows + (o - out0)) * n;
    const int32_t* sk = W ? W->skip + 2 * (int64_t)W->skip_off[o] : nullptr;
    const int64_t ns = W ? W->skip_off[o + 1] - W->skip_off[o] : 0;
    if constexpr (LBM_INLET) {
      if (o < in1) {
        for (int a = 0; a < D; ++a) U[a] = S->U + (a * S->face_rows + o) * n;
        row_cells<K, 1>(rp, wrow, n, wp, wm, F, U, sk, ns, g.prefetch);
      } else {
        row_cells<K, 0>(rp, wrow, n, wp, wm, F, U, sk, ns, g.prefetch);
      }
    } else {
      row_cells<K, 0>(rp, wrow, n, wp, wm, F, U, sk, ns, g.prefetch);
    }
    if (!W) continue;
    for (int64_t r = W->rest_off[o]; r < W->rest_off[o + 1]; ++r) ST(dst + W->rest[r], (real)0);
    for (int64_t r = W->copy_off[o]; r < W->copy_off[o + 1]; ++r)
      ST(dst + W->copy_dst[r], LD(dst + W->copy_src[r]) + (W->copy_add ? W->copy_add[r] : (real)0));
    if (K == PUSH)
      for (int64_t r = W->keep_off[o]; r < W->keep_off[o + 1]; ++r) dst[W->keep_dst[r]] = src[W->keep_src[r]];
  }
}

// ---- work shared among XLA's intra-op threads ------------------------------------------------------------------
// `threads` workers (the config's native.threads), or with 0 pool.num_threads(): the calling thread is one of the
// pool's (one more oversubscribes the cores: measured 5-10% slower on 2 cores). LBM_NATIVE_THREADS overrides both.
static int64_t worker_count(ffi::ThreadPool& pool, int64_t threads) {
  int64_t workers = threads >= 1 ? threads : std::max<int64_t>(1, pool.num_threads());
  if (const char* env = std::getenv("LBM_NATIVE_THREADS")) { int64_t t = std::atoll(env); if (t >= 1) workers = t; }
  return workers;
}

// While it lives, binds the calling thread to the p-th CPU (p >= 0) (modulo their count) the process could run on when this
// was first used; then restores the thread's former CPU set. Nothing on systems without pthread affinity.
struct Pin {
#ifdef __linux__
  cpu_set_t old;
  bool active = false;
  explicit Pin(int64_t p) {
    static const std::vector<int> cpus = [] {
      std::vector<int> v;
      cpu_set_t set;
      if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c) if (CPU_ISSET(c, &set)) v.push_back(c);
      return v;
    }();
    if (p < 0 || cpus.empty() || pthread_getaffinity_np(pthread_self(), sizeof old, &old) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[(size_t)p % cpus.size()], &one);
    active = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  ~Pin() { if (active) pthread_setaffinity_np(pthread_self(), sizeof old, &old); }
#else
  explicit Pin(int64_t) {}
#endif
};

// fn(i0, i1) over [0, n). Dynamic schedule (pin false): workers (the caller included) claim blocks of `block` items
// until none is left, so a worker slowed by other load does less. Pinned (native.pinning): the static split, worker
// p takes items [p n / workers, (p + 1) n / workers) on the p-th CPU, the same rows on the same core every step
// (NUMA: the pages its writes place stay local). The state lives on the heap: a pool task that starts after the
// caller has returned finds no work left and touches nothing else.
static void parallel_for(ffi::ThreadPool& pool, int64_t workers, int64_t n, int64_t block, bool pin,
                         std::function<void(int64_t, int64_t)> fn) {
  if (workers <= 1 || n <= block) {
    if (n > 0) { Pin guard(pin ? 0 : -1); (void)guard; fn(0, n); }
    return;
  }
  struct Shared {
    std::atomic<int64_t> next{0}, done{0};
    int64_t n, block, workers;
    bool pin;
    std::function<void(int64_t, int64_t)> fn;
  };
  auto sh = std::make_shared<Shared>();
  sh->n = n; sh->block = block; sh->workers = workers; sh->pin = pin; sh->fn = std::move(fn);
  auto work = [](Shared& st) {
    for (;;) {
      int64_t i0, i1;
      if (st.pin) {
        const int64_t p = st.next.fetch_add(1, std::memory_order_relaxed);
        if (p >= st.workers) return;
        i0 = p * st.n / st.workers; i1 = (p + 1) * st.n / st.workers;
        Pin guard(p);
        st.fn(i0, i1);
      } else {
        i0 = st.next.fetch_add(st.block, std::memory_order_relaxed);
        if (i0 >= st.n) return;
        i1 = std::min(i0 + st.block, st.n);
        st.fn(i0, i1);
      }
      st.done.fetch_add(i1 - i0, std::memory_order_release);
    }
  };
  for (int64_t p = 1; p < workers; ++p) pool.Schedule([sh, work]() { work(*sh); });
  work(*sh);
  while (sh->done.load(std::memory_order_acquire) < n) std::this_thread::yield();
}

// ---- the whole lattice --------------------------------------------------------------------------------------------
// u_in: the inflow (D, face) of a kernel inlet, or null; outflow: whether the kernel applies the zero-gradient outflow.
template <int K>
static ffi::Error run(ffi::ThreadPool& pool, const store* src, store* dst, ffi::Span<const int64_t> dims,
                      double omega_plus, double omega_minus, ffi::Span<const double> force,
                      ffi::Span<const double> rates, const RowWalls* W, const real* u_in, int64_t u_in_size,
                      bool outflow, int64_t threads, bool pin) {
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
  real R[LBM_RATES];  // the rates of a collision beyond bgk/trt (lbm.engines.native.collisions.RATES); unset: wp
  for (int r = 0; r < LBM_RATES; ++r) R[r] = r < (int)rates.size() ? (real)rates[r] : wp;
  (void)R;
  real G[LBM_FORCE_SIZE];
  LBM_FORCE_TABLE
  RowFaces faces;
  RowFaces* S = nullptr;
  std::unique_ptr<store[]> upstream;
  if (u_in || outflow) {
    if (D < 2 || dims[1] < 3) return ffi::Error::InvalidArgument("lbm kernel: faces need nx >= 3");
    faces.face_rows = g.n_outer / dims[1];
    faces.U = nullptr;
    faces.upstream = nullptr;
    faces.n_unknown = 0;
    if (u_in) {
      if (!LBM_INLET) return ffi::Error::InvalidArgument("lbm kernel: built without an inlet");
      if (u_in_size != D * faces.face_rows * g.n_inner)
        return ffi::Error::InvalidArgument("lbm kernel: the inflow does not match the x = 0 face");
      faces.U = u_in;
    }
    if (outflow) {  // copy the read rows of the column x = nx - 2 for the unknown directions (before the step)
      for (int i = 0; i < Q; ++i)
        if (OUTER_OFF[i][0] < 0) faces.unknown[faces.n_unknown++] = i;
      const int64_t n = g.n_inner, rows_ = faces.face_rows;
      upstream.reset(new store[(size_t)(faces.n_unknown * rows_ * n)]);
      for (int j = 0; j < faces.n_unknown; ++j)
        for (int64_t r = 0; r < rows_; ++r) {
          const int64_t o = g.n_outer - 2 * rows_ + r;
          int64_t x, y;
          outer_xy(g, o, x, y);
          std::memcpy(upstream.get() + (j * rows_ + r) * n, read_row<K>(g, src, dst, faces.unknown[j], o, x, y),
                      sizeof(store) * n);
        }
      faces.upstream = upstream.get();
    }
    S = &faces;
  }
  const char* pf_env = std::getenv("LBM_NATIVE_PREFETCH_BYTES");
  g.prefetch = std::max<int64_t>(0, pf_env ? std::atoll(pf_env) : PREFETCH_BYTES) / (int64_t)sizeof(store);
  const int64_t workers = g.plane < 16384 ? 1 : worker_count(pool, threads);
  parallel_for(pool, workers, g.n_outer, std::max<int64_t>(1, g.n_outer / (8 * workers)), pin,
               [&](int64_t o0, int64_t o1) { rows<K>(g, src, dst, o0, o1, wp, wm, G, W, S); });
  return ffi::Error::Success();
}

// ---- FFI handlers ---------------------------------------------------------------------------------------------
// Gather the populations at flat slots idx[0..m) into pre (before the step overwrites them).
static void gather(const store* a, ffi::Buffer<ffi::S32>& idx, ffi::ResultBuffer<LBM_FFI_TYPE>& pre) {
  const int32_t* ix = idx.typed_data();
  store* out = reinterpret_cast<store*>(pre->typed_data());
  const int64_t m = (int64_t)idx.element_count();
  for (int64_t j = 0; j < m; ++j) out[j] = a[ix[j]];
}


// The walls' records (null when there are none; the lengths are checked against the rows).
static ffi::Error row_walls(ffi::Span<const int64_t> dims, ffi::Buffer<ffi::S32>& skip_off, ffi::Buffer<ffi::S32>& skip,
                            ffi::Buffer<ffi::S32>& rest_off, ffi::Buffer<ffi::S32>& rest,
                            ffi::Buffer<ffi::S32>& copy_off, ffi::Buffer<ffi::S32>& copy_dst,
                            ffi::Buffer<ffi::S32>& copy_src, ffi::Buffer<LBM_REAL_FFI_TYPE>& copy_add,
                            ffi::Buffer<ffi::S32>& keep_off, ffi::Buffer<ffi::S32>& keep_src,
                            ffi::Buffer<ffi::S32>& keep_dst, RowWalls& w, bool& any) {
  any = skip_off.element_count() > 0;
  if (!any) return ffi::Error::Success();
  int64_t n_outer = 1;
  for (int a = 1; a < D; ++a) n_outer *= dims[a];
  const int64_t rows1 = n_outer + 1;
  if ((int64_t)skip_off.element_count() != rows1 || (int64_t)rest_off.element_count() != rows1 ||
      (int64_t)copy_off.element_count() != rows1 || (int64_t)keep_off.element_count() != rows1 ||
      copy_src.element_count() != copy_dst.element_count() || keep_src.element_count() != keep_dst.element_count() ||
      (copy_add.element_count() && copy_add.element_count() != copy_dst.element_count()))
    return ffi::Error::InvalidArgument("lbm kernel: wall records do not match the lattice");
  w.skip_off = skip_off.typed_data(); w.skip = skip.typed_data();
  w.rest_off = rest_off.typed_data(); w.rest = rest.typed_data();
  w.copy_off = copy_off.typed_data(); w.copy_dst = copy_dst.typed_data(); w.copy_src = copy_src.typed_data();
  w.copy_add = copy_add.element_count() ? reinterpret_cast<const real*>(copy_add.typed_data()) : nullptr;
  w.keep_off = keep_off.typed_data(); w.keep_src = keep_src.typed_data(); w.keep_dst = keep_dst.typed_data();
  return ffi::Error::Success();
}

#define LBM_WALL_PARAMS                                                                                               \
  ffi::Buffer<ffi::S32> skip_off, ffi::Buffer<ffi::S32> skip, ffi::Buffer<ffi::S32> rest_off,                         \
      ffi::Buffer<ffi::S32> rest, ffi::Buffer<ffi::S32> copy_off, ffi::Buffer<ffi::S32> copy_dst,                     \
      ffi::Buffer<ffi::S32> copy_src, ffi::Buffer<LBM_REAL_FFI_TYPE> copy_add, ffi::Buffer<ffi::S32> keep_off,        \
      ffi::Buffer<ffi::S32> keep_src, ffi::Buffer<ffi::S32> keep_dst
#define LBM_WALL_NAMES skip_off, skip, rest_off, rest, copy_off, copy_dst, copy_src, copy_add, keep_off, keep_src, keep_dst

static const real* inflow(ffi::Buffer<LBM_REAL_FFI_TYPE>& u_in) {
  return u_in.element_count() ? reinterpret_cast<const real*>(u_in.typed_data()) : nullptr;
}

static ffi::Error Push(ffi::ThreadPool pool, ffi::Buffer<LBM_FFI_TYPE> src, ffi::Buffer<LBM_FFI_TYPE> dst_in,
                       ffi::Buffer<ffi::S32> idx, ffi::Buffer<ffi::S32> observe, LBM_WALL_PARAMS,
                       ffi::Buffer<LBM_REAL_FFI_TYPE> u_in, ffi::ResultBuffer<LBM_FFI_TYPE> dst,
                       ffi::ResultBuffer<LBM_FFI_TYPE> pre, ffi::ResultBuffer<LBM_FFI_TYPE> post, double omega_plus,
                       double omega_minus, ffi::Span<const double> force, ffi::Span<const double> rates,
                       int64_t outflow, int64_t threads, int64_t pinning) {
  (void)dst_in;
  RowWalls w;
  bool any;
  if (auto err = row_walls(src.dimensions(), LBM_WALL_NAMES, w, any); err.failure()) return err;
  const store* s = reinterpret_cast<const store*>(src.typed_data());
  store* d = reinterpret_cast<store*>(dst->typed_data());
  gather(s, idx, pre);
  auto err = run<PUSH>(pool, s, d, src.dimensions(), omega_plus, omega_minus, force, rates, any ? &w : nullptr,
                       inflow(u_in), (int64_t)u_in.element_count(), outflow != 0, threads, pinning != 0);
  if (err.failure()) return err;
  gather(d, observe, post);
  return ffi::Error::Success();
}

template <int K>
static ffi::Error InPlace(ffi::ThreadPool pool, ffi::Buffer<LBM_FFI_TYPE> a_in, ffi::Buffer<ffi::S32> idx,
                          ffi::Buffer<ffi::S32> observe, LBM_WALL_PARAMS, ffi::Buffer<LBM_REAL_FFI_TYPE> u_in,
                          ffi::ResultBuffer<LBM_FFI_TYPE> a, ffi::ResultBuffer<LBM_FFI_TYPE> pre,
                          ffi::ResultBuffer<LBM_FFI_TYPE> post, double omega_plus, double omega_minus,
                          ffi::Span<const double> force, ffi::Span<const double> rates, int64_t outflow,
                          int64_t threads, int64_t pinning) {
  (void)a_in;
  RowWalls w;
  bool any;
  if (auto err = row_walls(a->dimensions(), LBM_WALL_NAMES, w, any); err.failure()) return err;
  store* p = reinterpret_cast<store*>(a->typed_data());
  gather(p, idx, pre);
  auto err = run<K>(pool, nullptr, p, a->dimensions(), omega_plus, omega_minus, force, rates, any ? &w : nullptr,
                    inflow(u_in), (int64_t)u_in.element_count(), outflow != 0, threads, pinning != 0);
  if (err.failure()) return err;
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

#define LBM_ATTRS .Attr<double>("omega_plus").Attr<double>("omega_minus").Attr<ffi::Span<const double>>("force") \
    .Attr<ffi::Span<const double>>("rates").Attr<int64_t>("outflow").Attr<int64_t>("threads").Attr<int64_t>("pinning")
#define LBM_S32 .Arg<ffi::Buffer<ffi::S32>>()
// idx, observe, then the walls: skip_off, skip, rest_off, rest, copy_off, copy_dst, copy_src, copy_add, keep_off,
// keep_src, keep_dst, the inflow; results: populations, pre (at idx), post (at observe)
#define LBM_STEP_ARGS LBM_S32 LBM_S32 LBM_S32 LBM_S32 LBM_S32 LBM_S32 LBM_S32 LBM_S32 LBM_S32 \
    .Arg<ffi::Buffer<LBM_REAL_FFI_TYPE>>() LBM_S32 LBM_S32 LBM_S32 .Arg<ffi::Buffer<LBM_REAL_FFI_TYPE>>() \
    .Ret<ffi::Buffer<LBM_FFI_TYPE>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>().Ret<ffi::Buffer<LBM_FFI_TYPE>>() LBM_ATTRS
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_push, Push,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>().Arg<ffi::Buffer<LBM_FFI_TYPE>>()
        LBM_STEP_ARGS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_aa_even, InPlace<AA_EVEN>,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>() LBM_STEP_ARGS);
XLA_FFI_DEFINE_HANDLER_SYMBOL(lbm_aa_odd, InPlace<AA_ODD>,
    ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<LBM_FFI_TYPE>>() LBM_STEP_ARGS);
