// Kiln CPU templates' runtime: the parallel loop and a vectorizable exp, prepended to every CPU
// kernel template when it is rendered (compile a template on its own with `c++ -include parallel.h`).
//
// kiln_rt::ParallelFor(n, nt, body) runs body(i) for i in [0, n) on up to nt threads: the caller
// and nt-1 helper threads claim items one at a time, and the caller waits only for items a helper
// has claimed. A helper that another process has preempted therefore costs nothing unless it is
// mid-item, where an OpenMP barrier would wait a whole scheduler time slice for it to arrive (a
// decode step runs ~100 parallel loops of ~100 us: on a shared machine that was the step's
// largest cost). Helpers spin briefly for the next loop, then sleep.
//
// One pool per process: a host that loads kernels (the worker's trial process, the step runner,
// the benchmarks) exports kiln_rt_parallel_for_v1 (hardware/cpu/kernel_runtime.cc), and every
// kernel it loads runs its loops on that one pool. Separate pools per kernel, or OpenMP next to a
// pool, leave one kernel's helpers spinning on the core the next kernel's helpers need: in the
// composed decode step that made GEMMs up to 1.8x slower than when timed alone. A kernel loaded
// by a process without the hook falls back to a pool of its own, joined when it is unloaded.
#ifndef KILN_RT_PARALLEL_H_
#define KILN_RT_PARALLEL_H_
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#ifndef KILN_RT_HOST
// The host's pool, when the loading process provides one (weak: null otherwise).
extern "C" __attribute__((weak)) void kiln_rt_parallel_for_v1(long n, int nt,
                                                               void (*call)(const void*, long),
                                                               const void* body);
#endif

namespace kiln_rt {
// Internal linkage throughout: each kernel's shared object has its own pool, built when it is
// loaded and joined when it is unloaded (a vague-linkage static would be one GNU-unique object
// shared by every loaded kernel and outlive the first one's unloading).
namespace {

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : helpers_) t.join();
  }

  template <typename Body>
  void Run(long n, int nt, const Body& body) {
    // One loop at a time: a loop started while another runs (a nested loop, or a second thread
    // of the host) runs inline on its caller.
    if (nt <= 1 || n <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
      for (long i = 0; i < n; ++i) body(i);
      return;
    }
    while (static_cast<int>(helpers_.size()) < nt - 1) helpers_.emplace_back([this] { Helper(); });
    uint32_t gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_ = [](const void* b, long i) { (*static_cast<const Body*>(b))(i); };
      body_ = &body;
      n_.store(n);
      done_.store(0);
      gen = ++gen_;
      claim_.store(static_cast<uint64_t>(gen) << 32);  // generation | next item
    }
    cv_.notify_all();
    Work(gen);
    for (int spins = 0; done_.load(std::memory_order_acquire) < n; ++spins)
      if (spins > 1000) std::this_thread::yield();
    busy_.store(false, std::memory_order_release);
  }

 private:
  // Claims and runs items of generation `gen` until none is left.
  void Work(uint32_t gen) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    while (static_cast<uint32_t>(c >> 32) == gen) {
      const long i = static_cast<long>(c & 0xffffffffu);
      if (i >= n_.load(std::memory_order_acquire)) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) continue;
      call_(body_, i);  // valid: the caller of `gen` waits for this item before it returns
      done_.fetch_add(1, std::memory_order_release);
      c = claim_.load(std::memory_order_acquire);
    }
  }

  void Helper() {
    uint32_t seen = 0;
    while (true) {
      // Spin ~50 us for the next loop (decode steps issue them back to back), then sleep.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (static_cast<uint32_t>(claim_.load(std::memory_order_acquire) >> 32) == seen &&
             std::chrono::steady_clock::now() < until) {
      }
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || gen_ != seen; });
        if (stop_) return;
        seen = gen_;
      }
      Work(seen);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> helpers_;
  bool stop_ = false;
  uint32_t gen_ = 0;
  std::atomic<uint64_t> claim_{0};
  std::atomic<long> n_{0}, done_{0};
  std::atomic<bool> busy_{false};
  void (*call_)(const void*, long) = nullptr;
  const void* body_ = nullptr;
};

Pool the_pool;

template <typename Body>
inline void ParallelFor(long n, int nt, const Body& body) {
#ifndef KILN_RT_HOST
  if (kiln_rt_parallel_for_v1 && nt > 1 && n > 1) {
    kiln_rt_parallel_for_v1(
        n, nt, [](const void* b, long i) { (*static_cast<const Body*>(b))(i); }, &body);
    return;
  }
#endif
  the_pool.Run(n, nt, body);
}

// exp(x), branch-free so that loops over it vectorize (libm's expf does not): Cephes' expf,
// Cody-Waite reduction and a degree-6 polynomial, ~1 ulp; x is clamped to [-87.3, 88.3].
inline float Exp(float x) {
  x = x < -87.33f ? -87.33f : (x > 88.3f ? 88.3f : x);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  x = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * x + 1.3981999507e-3f;
  p = p * x + 8.3334519073e-3f;
  p = p * x + 4.1665795894e-2f;
  p = p * x + 1.6666665459e-1f;
  p = p * x + 5.0000001201e-1f;
  p = p * x * x + x + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return p * scale;
}

}  // namespace
}  // namespace kiln_rt
#endif  // KILN_RT_PARALLEL_H_
