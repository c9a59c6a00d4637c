// Controlled memory experiment: S populations stored as planes (S, n), each cell read and written in place,
// with a configurable amount of arithmetic per element; 1..T threads (OpenMP, static split, first touch by the
// same split). GB/s counts one read and one write per element (the in-place AA step's traffic).
//   g++ -O3 -march=native -fopenmp -DS=9 -DW=0 scripts/stream_probe.cc -o /tmp/probe9 &&
//   /tmp/probe9 MB WORK THREADS [HUGE [BLOCK [PREFETCH]]]
// WORK < 0: each stream scaled in its own pass (one stream at a time). HUGE: madvise(MADV_HUGEPAGE) before the
// first touch. PREFETCH > 0: a software prefetch (for writing) of every stream PREFETCH floats ahead, one per line.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#ifndef W
#define W 0
#endif
#ifndef S
#define S 9
#endif
int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? atol(argv[1]) : 604;
  const int work = argc > 2 ? atoi(argv[2]) : 0, T = argc > 3 ? atoi(argv[3]) : 1;
  const int huge = argc > 4 ? atoi(argv[4]) : 0;
  const size_t block = argc > 5 ? atol(argv[5]) : 1024;
  const size_t pf = argc > 6 ? atol(argv[6]) : 0;
  const size_t n = mb * 1000000 / 4 / S;
  float* a = static_cast<float*>(aligned_alloc(2 << 20, ((S * n * 4) | ((2 << 20) - 1)) + 1));
  if (huge) madvise(a, S * n * 4, MADV_HUGEPAGE);
  omp_set_num_threads(T);
#pragma omp parallel for schedule(static)
  for (size_t k = 0; k < n; ++k)
    for (int s = 0; s < S; ++s) a[s * n + k] = 1.0f;
  std::vector<double> t;
  for (int rep = 0; rep < 6; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (size_t kb = 0; kb < n; kb += block) {
      const size_t ke = std::min(n, kb + block);
      for (int s = 0; s < S; ++s) {  // one stream at a time (S = 1 per pass) when work < 0
        if (work >= 0) break;
#pragma omp simd
        for (size_t k = kb; k < ke; ++k) a[s * n + k] *= 1.0001f;
      }
      if (work < 0) continue;
      float* p[S];
      for (int s = 0; s < S; ++s) p[s] = a + s * n;
      if (pf)
        for (size_t k = kb; k < ke; k += 16)
          for (int s = 0; s < S; ++s) __builtin_prefetch(p[s] + k + pf, 1);
#pragma omp simd
      for (size_t k = kb; k < ke; ++k) {
        float x[S], acc = 0.f;
#pragma GCC unroll 32
        for (int s = 0; s < S; ++s) { x[s] = p[s][k]; acc += x[s]; }
        float v = acc;
        #pragma GCC unroll 64
        for (int w = 0; w < W; ++w) v = v * 0.999f + 0.001f;
#pragma GCC unroll 32
        for (int s = 0; s < S; ++s) p[s][k] = x[s] * 0.5f + v * 0.01f;
      }
    }
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin() + 1, t.end());
  printf("MB %zu streams %d W %d threads %d huge %d block %zu prefetch %zu: %.1f GB/s (median)\n", mb, S, W, T, huge,
         block, pf, 2.0 * S * n * 4 / t[3] / 1e9);
}
