// Kiln CPU probe: measures peak fp32 FMA throughput and read bandwidth on all cores.
//
// Built by the CPU backend through its normal compile path (-O3 -march=native -fopenmp) and
// run as a child process, so a fault here cannot take the worker down. Usage:
//   peak_probe THREADS BUFFER_MIB
// prints "peak_gflops X" and "read_gbytes_per_s Y".
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__AVX512F__)
#define VW 16
#define ACCUMULATORS 24  // of 32 vector registers: covers 2 FMA pipes x 4+ cycles latency
#elif defined(__AVX__)
#define VW 8
#define ACCUMULATORS 12  // of 16
#else
#define VW 4
#define ACCUMULATORS 12
#endif

typedef float Vec __attribute__((vector_size(VW * 4)));

static double Now() { return omp_get_wtime(); }

// Best FLOP/s of one thread over ~1 ms windows of independent FMA chains, for about
// `seconds`. Windows in which the thread was preempted (a loaded machine) are ignored.
static double FmaRate(double seconds, float* sink) {
  Vec acc[ACCUMULATORS];
  for (int j = 0; j < ACCUMULATORS; ++j) acc[j] = Vec{} + (float)j;
  const Vec mul = Vec{} + 0.999999f, add = Vec{} + 1e-6f;
  const long window = 1 << 17;
  double best = 0;
  const double start = Now();
  for (double t0 = start; t0 - start < seconds;) {
    for (long i = 0; i < window; ++i) {
#pragma GCC unroll 32
      for (int j = 0; j < ACCUMULATORS; ++j) acc[j] = acc[j] * mul + add;
    }
    const double t1 = Now();
    const double rate = 2.0 * VW * ACCUMULATORS * window / (t1 - t0);
    if (rate > best) best = rate;
    t0 = t1;
  }
  for (int j = 0; j < ACCUMULATORS; ++j) *sink += acc[j][0];
  return best;
}

// Sum over all threads, running together, of each thread's best window.
static double PeakGflops(int threads) {
  double total = 0;
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total) reduction(+ : sink)
  total += FmaRate(0.2, &sink);
  if (sink == 12345.0f) printf("#");  // keeps the chains alive
  return total / 1e9;
}

static int CompareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// Read bandwidth of all threads sweeping their own part of a large buffer together: the sum
// over threads of the 80th percentile of their chunk rates (robust to preemption).
static double ReadGbytesPerSecond(int threads, size_t bytes) {
  const size_t n = bytes / sizeof(Vec);
  size_t chunk = n / threads / 8;  // at least 8 chunks per thread, each at most 4 MiB
  if (chunk > (4 << 20) / sizeof(Vec)) chunk = (4 << 20) / sizeof(Vec);
  chunk = chunk < 1024 ? 1024 : chunk / 8 * 8;
  Vec* buf = (Vec*)aligned_alloc(2 << 20, n * sizeof(Vec));
  if (!buf) return 0;
  madvise(buf, n * sizeof(Vec), MADV_HUGEPAGE);
  double total = 0;
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total) reduction(+ : sink)
  {
    const int t = omp_get_thread_num();
    const size_t begin = n / threads * t / chunk * chunk,
                 end = n / threads * (t + 1) / chunk * chunk;
    for (size_t i = begin; i < end; ++i) buf[i] = Vec{} + (float)(i & 7);  // first touch
    enum { kRounds = 3 };
    const size_t chunks = (end - begin) / chunk;
    double* rates = (double*)malloc(sizeof(double) * (chunks * kRounds + 1));
    size_t count = 0;
#pragma omp barrier
    for (int round = 0; round < kRounds; ++round) {
      for (size_t c = begin; c < end; c += chunk) {
        Vec s[8] = {};
        const double t0 = Now();
        for (size_t i = c; i < c + chunk; i += 8)
#pragma GCC unroll 8
          for (int u = 0; u < 8; ++u) s[u] += buf[i + u];
        rates[count++] = chunk * sizeof(Vec) / (Now() - t0);
        for (int u = 1; u < 8; ++u) s[0] += s[u];
        sink += s[0][0];
      }
    }
    if (count > 0) {
      qsort(rates, count, sizeof(double), CompareDoubles);
      total += rates[count * 8 / 10];
    }
    free(rates);
  }
  free(buf);
  if (sink == 12345.0f) printf("#");
  return total / 1e9;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
  size_t mib = argc > 2 ? strtoull(argv[2], 0, 10) : 256;
  if (threads < 1) threads = 1;
  printf("peak_gflops %.3f\n", PeakGflops(threads));
  printf("read_gbytes_per_s %.3f\n", ReadGbytesPerSecond(threads, mib << 20));
  return 0;
}
