// Kiln CPU probe: measures peak fp32 FMA throughput, the bf16 and int8 dot products' peaks where
// the ISA has them (int8 on AVX2: the multiply-add sequence its kernels use), and read bandwidth
// on all cores.
//
// Built by the CPU backend through its normal compile path (-O3 -march=native -fopenmp) and
// run as a child process, so a fault here cannot take the worker down. Usage:
//   peak_probe THREADS BUFFER_MIB
// prints "peak_gflops X", "peak_bf16_gflops B", "peak_int8_gops I" (0: no such instructions) and
// "read_gbytes_per_s Y".
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define VW 16
#define ACCUMULATORS 24  // of 32 vector registers: covers 2 FMA pipes x 4+ cycles latency
#elif defined(__AVX__)
#include <immintrin.h>
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

// The same for the dot-product instructions: vdpbf16ps (16 lanes x 2 products: 64 FLOP) and
// vpdpbusd (16 lanes x 4 byte products: 128 int8 OP), ACCUMULATORS independent chains.
enum DotKind { kBf16, kInt8 };
static double DotRate(DotKind kind, double seconds, float* sink) {
#if defined(__AVX512BF16__) && defined(__AVX512VNNI__)
  __m512 f[ACCUMULATORS];
  __m512i n[ACCUMULATORS];
  for (int j = 0; j < ACCUMULATORS; ++j)
    f[j] = _mm512_set1_ps((float)j), n[j] = _mm512_set1_epi32(j);
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = a;  // pairs of bf16 1.0
  const __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(1);
  const long window = 1 << 16;
  double best = 0;
  const double start = Now();
  for (double t0 = start; t0 - start < seconds;) {
    if (kind == kBf16) {
      for (long i = 0; i < window; ++i) {
#pragma GCC unroll 32
        for (int j = 0; j < ACCUMULATORS; ++j) f[j] = _mm512_dpbf16_ps(f[j], a, b);
      }
    } else {
      for (long i = 0; i < window; ++i) {
#pragma GCC unroll 32
        for (int j = 0; j < ACCUMULATORS; ++j) n[j] = _mm512_dpbusd_epi32(n[j], u, s);
      }
    }
    const double t1 = Now();
    const double rate = (kind == kBf16 ? 64.0 : 128.0) * ACCUMULATORS * window / (t1 - t0);
    if (rate > best) best = rate;
    t0 = t1;
  }
  for (int j = 0; j < ACCUMULATORS; ++j) *sink += f[j][0] + (float)_mm512_cvtsi512_si32(n[j]);
  return best;
#elif defined(__AVX2__)
  // No dot-product instructions: int8 products as AVX2 kernels sum them (vpmaddubsw: 32 u8 x s8
  // products summed in pairs to int16; vpmaddwd by ones: pairs of those to int32; vpaddd), 64 OP
  // a step. There is no bf16 counterpart (bf16 is widened to fp32 and runs on the FMAs).
  // Each step multiplies its chain's own sum (as the s8 operand): with constant operands the
  // compiler folds the products away and times the additions alone.
  // VNNI without bf16 (no such probe here): 0, and the roof takes its multiple of the FMA peak.
#if defined(__AVX512VNNI__)
  if (kind == kInt8) return 0;
#endif
  if (kind == kBf16) return 0;
  enum { kChains = 8 };  // independent chains: more spill (2 constants and the temps need the rest)
  __m256i n[kChains];
  for (int j = 0; j < kChains; ++j) n[j] = _mm256_set1_epi32(j);
  const __m256i u = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
  const long window = 1 << 16;
  double best = 0;
  const double start = Now();
  for (double t0 = start; t0 - start < seconds;) {
    for (long i = 0; i < window; ++i) {
#pragma GCC unroll 16
      for (int j = 0; j < kChains; ++j)
        n[j] = _mm256_add_epi32(n[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, n[j]), ones));
    }
    const double t1 = Now();
    const double rate = 64.0 * kChains * window / (t1 - t0);
    if (rate > best) best = rate;
    t0 = t1;
  }
  for (int j = 0; j < kChains; ++j) *sink += (float)_mm256_extract_epi32(n[j], 0);
  return best;
#else
  (void)kind, (void)seconds, (void)sink;
  return 0;
#endif
}

// Sum over all threads, running together, of each thread's best window. kind -1: fp32 FMA.
static double PeakGflops(int threads, int kind = -1) {
  double total = 0;
  float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total) reduction(+ : sink)
  total += kind < 0 ? FmaRate(0.2, &sink) : DotRate((DotKind)kind, 0.1, &sink);
  if (sink == 12345.0f) printf("#");  // keeps the chains alive
  return total / 1e9;
}

// Sustained read bandwidth: all threads sweep their own part of a buffer much larger than the
// caches together, and a pass counts when the last thread is done (bytes / wall time of the
// pass, the best of the passes, as STREAM reports). Per-thread chunk rates summed over
// threads overstated it on a shared VM: when one thread is preempted the other gets the whole
// memory system for a while, and its fast chunks were counted as if both ran at that rate.
static double ReadGbytesPerSecond(int threads, size_t bytes) {
  const size_t n = bytes / sizeof(Vec) / (8 * threads) * (8 * threads);
  Vec* buf = (Vec*)aligned_alloc(2 << 20, n * sizeof(Vec));
  if (!buf || n == 0) return 0;
  madvise(buf, n * sizeof(Vec), MADV_HUGEPAGE);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    for (size_t i = n / threads * t; i < n / threads * (t + 1); ++i)  // first touch, own part
      buf[i] = Vec{} + (float)(i & 7);
  }
  // At least 7 passes and 0.25 s: the best of a few milliseconds' worth of passes read 41 GB/s
  // on a machine that sustains 80 when a neighbour was busy for that moment.
  enum { kMinRounds = 7, kMaxRounds = 500 };
  const double start = Now();
  double best = 0;
  float sink = 0;
  for (int round = 0; round < kMaxRounds && (round < kMinRounds || Now() - start < 0.25); ++round) {
    const double t0 = Now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const int t = omp_get_thread_num();
      Vec s[8] = {};
      for (size_t i = n / threads * t; i < n / threads * (t + 1); i += 8)
#pragma GCC unroll 8
        for (int u = 0; u < 8; ++u) s[u] += buf[i + u];
      for (int u = 1; u < 8; ++u) s[0] += s[u];
      sink += s[0][0];
    }
    const double rate = n * sizeof(Vec) / (Now() - t0);
    if (rate > best) best = rate;
  }
  free(buf);
  if (sink == 12345.0f) printf("#");
  return best / 1e9;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
  size_t mib = argc > 2 ? strtoull(argv[2], 0, 10) : 256;
  if (threads < 1) threads = 1;
  printf("peak_gflops %.3f\n", PeakGflops(threads));
  printf("peak_bf16_gflops %.3f\n", PeakGflops(threads, kBf16));
  printf("peak_int8_gops %.3f\n", PeakGflops(threads, kInt8));
  printf("read_gbytes_per_s %.3f\n", ReadGbytesPerSecond(threads, mib << 20));
  return 0;
}
