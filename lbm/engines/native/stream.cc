// The host's memory bandwidth with all its threads: STREAM-like kernels over float32 arrays, each thread streaming
// its own contiguous slice (first touched by that thread), timed pass by pass between two barriers of the threads.
// Built and called by lbm/engines/native/stream.py (ctypes); GB/s counts the bytes a kernel names (a write once).
//
//   kernel 0  copy        a[i] = s a[i]                  in place            1 read + 1 write per element
//   kernel 1  triad       a[i] = a[i] + s b[i]           in place            2 reads + 1 write
//   kernel 2  copy_2buf   b[i] = s a[i]                  into a 2nd array    1 read + 1 write
//   kernel 3  triad_2buf  c[i] = a[i] + s b[i]           into a 3rd array    2 reads + 1 write
//   kernel 4  planes      x_p[i] = 0.5 x_p[i] + 0.01 sum_p x_p[i], p < planes, in place: an LBM step's populations
//                         (planes read and written at once), with a software prefetch of every plane `prefetch`
//                         bytes ahead (0: none), one cache line at a time, as the native LBM kernel does
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// A sense-reversing barrier of `n` spinning threads (no more threads than cores: spinning is cheap).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n), waiting_(0), sense_(false) {}
  void wait() {
    const bool mine = !sense_.load(std::memory_order_relaxed);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      waiting_.store(0, std::memory_order_relaxed);
      sense_.store(mine, std::memory_order_release);
    } else {
      while (sense_.load(std::memory_order_acquire) != mine) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> waiting_;
  std::atomic<bool> sense_;
};

float* allocate(int64_t count) {
  const int64_t align = 2 << 20;  // 2 MiB: huge-page friendly, and every array starts on its own page
  const int64_t bytes = ((count * 4 + align - 1) / align) * align;
  return static_cast<float*>(std::aligned_alloc(align, bytes));
}

void pass(int kernel, float* const* arr, int64_t lo, int64_t hi, int64_t n, int planes, int64_t prefetch) {
  const float s = 1.0001f;
  float* a = arr[0];
  float* b = arr[1];
  float* c = arr[2];
  switch (kernel) {
    case 0:
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) a[i] = s * a[i];
      break;
    case 1:
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) a[i] = a[i] + s * b[i];
      break;
    case 2:
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) b[i] = s * a[i];
      break;
    case 3:
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) c[i] = a[i] + s * b[i];
      break;
    default: {
      constexpr int64_t kLine = 16;  // floats of one 64-byte cache line
      const int64_t ahead = prefetch / 4;
      for (int64_t k0 = lo; k0 < hi; k0 += kLine) {
        if (ahead > 0 && k0 + ahead < n)
          for (int p = 0; p < planes; ++p) __builtin_prefetch(a + p * n + k0 + ahead, 1);
        if (k0 + kLine <= hi) {  // a whole line of cells: vectorised across them
          float acc[kLine] = {};
          for (int p = 0; p < planes; ++p) {
            const float* x = a + p * n + k0;
#pragma omp simd
            for (int64_t j = 0; j < kLine; ++j) acc[j] += x[j];
          }
          for (int p = 0; p < planes; ++p) {
            float* x = a + p * n + k0;
#pragma omp simd
            for (int64_t j = 0; j < kLine; ++j) x[j] = 0.5f * x[j] + 0.01f * acc[j];
          }
          continue;
        }
        for (int64_t i = k0; i < hi; ++i) {  // the slice's last cells
          float acc = 0.f;
          for (int p = 0; p < planes; ++p) acc += a[p * n + i];
          for (int p = 0; p < planes; ++p) a[p * n + i] = 0.5f * a[p * n + i] + 0.01f * acc;
        }
      }
    }
  }
}

}  // namespace

// Runs `repeats` timed passes of `kernel` (after one untimed pass) over arrays of `n` floats (kernel 4: one array of
// `planes` planes of `n` floats) with `threads` threads; writes each pass's seconds into `seconds`. Returns 0, or
// 1 where the arrays cannot be allocated.
extern "C" int lbm_stream(int kernel, int64_t n, int planes, int threads, int repeats, int64_t prefetch,
                          double* seconds) {
  const int arrays = kernel == 4 ? 1 : kernel == 1 || kernel == 2 ? 2 : kernel == 3 ? 3 : 1;
  const int64_t count = kernel == 4 ? n * planes : n;
  float* arr[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < arrays; ++k) {
    arr[k] = allocate(count);
    if (arr[k] == nullptr) {
      for (int j = 0; j < k; ++j) std::free(arr[j]);
      return 1;
    }
  }
  threads = std::max(1, threads);
  Barrier barrier(threads);
  std::chrono::steady_clock::time_point t0;
  auto work = [&](int t) {
    const int64_t lo = n * t / threads / 16 * 16, hi = t + 1 == threads ? n : n * (t + 1) / threads / 16 * 16;
    for (int k = 0; k < arrays; ++k)  // first touch by the thread that streams the slice
      for (int p = 0; p < (kernel == 4 ? planes : 1); ++p)
        for (int64_t i = lo; i < hi; ++i) arr[k][p * n + i] = 1.0f;
    for (int r = -1; r < repeats; ++r) {
      barrier.wait();
      if (t == 0) t0 = std::chrono::steady_clock::now();
      pass(kernel, arr, lo, hi, n, planes, prefetch);
      barrier.wait();
      if (t == 0 && r >= 0) seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (int k = 0; k < arrays; ++k) std::free(arr[k]);
  return 0;
}
