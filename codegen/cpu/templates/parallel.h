// Kiln CPU templates' runtime: the parallel loop and a vectorizable exp, prepended to every CPU
// kernel template when it is rendered (a template on its own compiles with
// `c++ -include parallel.h`).
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
//
// KILN_RT_HOSTED: Kiln's CPU device defines it when it compiles a kernel for its own processes,
// which always export the hook. The kernel then carries no pool of its own (a fifth of its
// compile time: 0.41 instead of 0.50 s for a GEMM) and, should the hook be missing after all,
// runs its loops on the calling thread.
#ifndef KILN_RT_PARALLEL_H_
#define KILN_RT_PARALLEL_H_
// POSIX threads and GCC atomics rather than <thread>, <mutex> and <atomic>: those headers were
// ~0.45 s of every kernel's ~1.1 s compile.
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

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

template <typename T>
inline T Load(const T& x) {
  return __atomic_load_n(&x, __ATOMIC_ACQUIRE);
}
template <typename T>
inline void Store(T& x, T v) {
  __atomic_store_n(&x, v, __ATOMIC_RELEASE);
}

inline double Seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#ifndef KILN_RT_HOSTED
class Pool {
 public:
  ~Pool() {
    pthread_mutex_lock(&mu_);
    stop_ = true;
    pthread_cond_broadcast(&cv_);
    pthread_mutex_unlock(&mu_);
    for (int i = 0; i < helpers_; ++i) pthread_join(threads_[i], nullptr);
  }

  template <typename Body>
  void Run(long n, int nt, const Body& body) {
    // One loop at a time: a loop started while another runs (a nested loop, or a second thread
    // of the host) runs inline on its caller.
    if (nt <= 1 || n <= 1 || __atomic_exchange_n(&busy_, true, __ATOMIC_ACQUIRE)) {
      for (long i = 0; i < n; ++i) body(i);
      return;
    }
    if (nt > kMaxThreads) nt = kMaxThreads;
    while (helpers_ < nt - 1 &&
           pthread_create(&threads_[helpers_], nullptr, &Pool::HelperMain, this) == 0)
      ++helpers_;
    pthread_mutex_lock(&mu_);
    call_ = [](const void* b, long i) { (*static_cast<const Body*>(b))(i); };
    body_ = &body;
    Store(n_, n);
    Store(done_, 0L);
    const uint32_t gen = ++gen_;
    Store(claim_, static_cast<uint64_t>(gen) << 32);  // generation | next item
    pthread_cond_broadcast(&cv_);
    pthread_mutex_unlock(&mu_);
    Work(gen);
    for (int spins = 0; Load(done_) < n; ++spins)
      if (spins > 1000) sched_yield();
    __atomic_store_n(&busy_, false, __ATOMIC_RELEASE);
  }

 private:
  static constexpr int kMaxThreads = 256;

  // Claims and runs items of generation `gen` until none is left.
  void Work(uint32_t gen) {
    uint64_t c = Load(claim_);
    while (static_cast<uint32_t>(c >> 32) == gen) {
      const long i = static_cast<long>(c & 0xffffffffu);
      if (i >= Load(n_)) return;
      if (!__atomic_compare_exchange_n(&claim_, &c, c + 1, true, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE))
        continue;
      call_(body_, i);  // valid: the caller of `gen` waits for this item before it returns
      __atomic_fetch_add(&done_, 1L, __ATOMIC_RELEASE);
      c = Load(claim_);
    }
  }

  static void* HelperMain(void* self) {
    static_cast<Pool*>(self)->Helper();
    return nullptr;
  }

  void Helper() {
    uint32_t seen = 0;
    while (true) {
      // Spin ~50 us for the next loop (decode steps issue them back to back), then sleep.
      const double until = Seconds() + 50e-6;
      while (static_cast<uint32_t>(Load(claim_) >> 32) == seen && Seconds() < until) {
      }
      pthread_mutex_lock(&mu_);
      while (!stop_ && gen_ == seen) pthread_cond_wait(&cv_, &mu_);
      const bool stop = stop_;
      seen = gen_;
      pthread_mutex_unlock(&mu_);
      if (stop) return;
      Work(seen);
    }
  }

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv_ = PTHREAD_COND_INITIALIZER;
  pthread_t threads_[kMaxThreads];
  int helpers_ = 0;
  bool stop_ = false;
  bool busy_ = false;
  uint32_t gen_ = 0;  // guarded by mu_
  uint64_t claim_ = 0;
  long n_ = 0, done_ = 0;
  void (*call_)(const void*, long) = nullptr;
  const void* body_ = nullptr;
};

Pool the_pool;
#endif  // KILN_RT_HOSTED

template <typename Body>
inline void ParallelFor(long n, int nt, const Body& body) {
#ifndef KILN_RT_HOST
  if (kiln_rt_parallel_for_v1 && nt > 1 && n > 1) {
    kiln_rt_parallel_for_v1(
        n, nt, [](const void* b, long i) { (*static_cast<const Body*>(b))(i); }, &body);
    return;
  }
#endif
#ifdef KILN_RT_HOSTED
  for (long i = 0; i < n; ++i) body(i);
#else
  the_pool.Run(n, nt, body);
#endif
}

// kiln_rt::ParallelRuns(n, nt, body) runs body(i, next) for i in [0, n) on up to nt threads, each
// working through its own contiguous run of the items in order (thread t: [t*n/nt, (t+1)*n/nt))
// and then taking unclaimed items from the far ends of the others' runs, so a thread that starts
// late or is preempted costs no more than with ParallelFor. `next` is the item this thread expects
// to run next (-1 at the end of its run): a body can prefetch its first bytes; should another
// thread take it meanwhile, only the prefetch is wasted. Contiguous runs keep each core's memory
// stream in order from one item to the next; items handed out one at a time alternate between
// the cores (attention decode, templates/attention_decode.cc).
template <typename Body>
inline void ParallelRuns(long n, int nt, const Body& body) {
  constexpr int kMaxRuns = 64;
  if (nt > kMaxRuns) nt = kMaxRuns;
  if (nt > n) nt = static_cast<int>(n);
  if (nt <= 1) {
    for (long i = 0; i < n; ++i) body(i, i + 1 < n ? i + 1 : -1L);
    return;
  }
  if (n > 0xffffffffL) {  // past what a run's 32-bit bounds hold: items one at a time
    ParallelFor(n, nt, [&](long i) { body(i, -1L); });
    return;
  }
  struct alignas(64) Run {
    uint64_t range;  // the unclaimed items: [low 32 bits, high 32 bits)
  };
  Run runs[kMaxRuns];
  for (int t = 0; t < nt; ++t) {
    const uint64_t lo = t * n / nt, hi = (t + 1) * n / nt;
    runs[t].range = lo | hi << 32;
  }
  // Claims the first (front) or the last unclaimed item of a run; -1 when none is left.
  auto claim = [](Run& r, bool front) -> long {
    uint64_t v = Load(r.range);
    for (;;) {
      const uint32_t lo = static_cast<uint32_t>(v), hi = static_cast<uint32_t>(v >> 32);
      if (lo >= hi) return -1;
      const uint64_t to = front ? v + 1 : (v & 0xffffffffu) | static_cast<uint64_t>(hi - 1) << 32;
      if (__atomic_compare_exchange_n(&r.range, &v, to, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return front ? lo : hi - 1;
    }
  };
  ParallelFor(nt, nt, [&](long t) {
    for (long i; (i = claim(runs[t], true)) >= 0;) {
      const uint64_t v = Load(runs[t].range);
      body(i, static_cast<uint32_t>(v) < static_cast<uint32_t>(v >> 32) ? i + 1 : -1L);
    }
    for (int u = 1; u < nt; ++u)
      for (long i; (i = claim(runs[(t + u) % nt], false)) >= 0;) body(i, -1L);
  });
}

// (The exponentials are internal and inlined, so the ABI of a 64-byte vector return without
// AVX-512 never matters: GCC's note where a host file includes this header is silenced.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

// e^r on the Cody-Waite reduced argument r = x - n*ln2 (in two parts), by Cephes' expf
// polynomial (degree 6, ~1 ulp); T is float or a vector (VF, below). The caller scales by 2^n.
template <typename T>
inline T ExpReduced(T x, T n) {
  x = x - n * 0.693359375f + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * x + 1.3981999507e-3f;
  p = p * x + 8.3334519073e-3f;
  p = p * x + 4.1665795894e-2f;
  p = p * x + 1.6666665459e-1f;
  p = p * x + 5.0000001201e-1f;
  return p * x * x + x + 1.0f;
}

// exp(x), x clamped to [-87.3, 88.3]. Branch-free, but GCC 12 does not vectorize loops over it
// (see ExpVT).
inline float Exp(float x) {
  x = x < -87.33f ? -87.33f : (x > 88.3f ? 88.3f : x);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, 4);
  return ExpReduced(x, n) * scale;
}

// The GEMM templates' fused epilogues, EPI: 0 none | 1 + bias[j] | 2 silu | 3 gelu (tanh form) |
// 4 + R[i*N + j] (the residual).
template <int kEpi>
inline float Epilogue(float x, long i, long j, long N, const float* bias, const float* R) {
  if (kEpi == 1) return x + bias[j];
  if (kEpi == 2) return x / (1.0f + Exp(-x));
  if (kEpi == 3)
    return 0.5f * x * (1.0f + __builtin_tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  if (kEpi == 4) return x + R[i * N + j];
  return x;
}

// Exp on a vector at once (GCC vector extensions), the same clamp, reduction and polynomial.
// Loops over Exp do not vectorize with GCC 12 (it vectorizes neither floorf nor the clamp's
// selects there), so the element-wise templates call this on blocks of a vector.
template <typename V, typename I>
inline V ExpVT(V x) {
  const V lo = V{} - 87.33f, hi = V{} + 88.3f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  const V t = x * 1.44269504088896341f + 0.5f;
  V n = __builtin_convertvector(__builtin_convertvector(t, I), V);
  n = t < n ? n - 1.0f : n;  // floor
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  return ExpReduced(x, n) * (V)bits;  // a vector cast: the same bits, read as floats
}

// The host's own vector, kVF floats (16 with AVX-512, 8 with AVX, 4 otherwise): the element-wise
// templates work in blocks of it. A vector wider than the registers is lowered by GCC 12 through
// the stack (SwiGLU ~5x slower on AVX2 in 16-lane blocks than in 8-lane ones).
#if defined(__AVX512F__)
constexpr int kVF = 16;
#elif defined(__AVX__)
constexpr int kVF = 8;
#else
constexpr int kVF = 4;
#endif
typedef float VF __attribute__((vector_size(kVF * 4)));
typedef int32_t IVF __attribute__((vector_size(kVF * 4)));
inline VF LoadVF(const float* p) {
  VF v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreVF(float* p, VF v) { __builtin_memcpy(p, &v, sizeof(v)); }
inline VF ExpVF(VF x) { return ExpVT<VF, IVF>(x); }
#pragma GCC diagnostic pop

}  // namespace
}  // namespace kiln_rt
#endif  // KILN_RT_PARALLEL_H_
