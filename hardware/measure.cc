#include "hardware/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"
#include "hardware/buffers.h"

namespace kiln::hardware {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Linear-interpolation quantile (R type 7) of sorted values.
double Quantile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  double h = (sorted.size() - 1) * p;
  size_t lo = static_cast<size_t>(std::floor(h));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

// The distribution-free 95% confidence interval of the median of sorted samples: the order
// statistics n/2 -+ 1.96*sqrt(n)/2 (normal approximation of the binomial), 1-based.
std::pair<double, double> MedianInterval(const std::vector<double>& sorted) {
  const double n = sorted.size();
  const double spread = 0.98 * std::sqrt(n);
  long lo = static_cast<long>(std::floor(n / 2 - spread));
  long hi = static_cast<long>(std::ceil(n / 2 + spread));
  lo = std::clamp<long>(lo, 1, sorted.size());
  hi = std::clamp<long>(hi, 1, sorted.size());
  return {sorted[lo - 1], sorted[hi - 1]};
}

}  // namespace

// Racing's early exit for a configuration far slower than the best (see TimeRepeated).
constexpr double kFarBehind = 1.5;

v1::Measurement TimeRepeated(const std::function<void(int set)>& run, int sets,
                             const MeasureOptions& opts,
                             const std::function<void(int set)>& prepare) {
  const auto start = Clock::now();
  sets = std::max(1, sets);
  int next = 0;
  auto prepare_next = [&]() {
    if (prepare) prepare(next);
  };
  auto run_next = [&]() {
    run(next);
    next = (next + 1) % sets;
  };
  for (int i = 0; i < opts.warmup; ++i) {
    prepare_next();
    run_next();
  }

  std::vector<double> samples;
  bool raced = false, raced_ahead = false;
  const int max_samples = std::max(1, opts.max_samples);
  while (true) {
    prepare_next();
    const auto t0 = Clock::now();
    run_next();
    const auto t1 = Clock::now();
    samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (static_cast<int>(samples.size()) >= max_samples) break;
    if (Seconds(start, t1) >= opts.max_seconds) break;
    // Far behind the best: timing noise on a CPU makes runs slower, never much faster, so once
    // every run, two at least, took kFarBehind times the best's median the configuration cannot
    // be the new best, and a slow kernel is not timed to the cap.
    if (opts.race_us > 0 && samples.size() >= 2 &&
        *std::min_element(samples.begin(), samples.end()) > kFarBehind * opts.race_us) {
      raced = true;
      break;
    }
    if (static_cast<int>(samples.size()) >= opts.min_samples) {
      std::vector<double> sorted = samples;
      std::sort(sorted.begin(), sorted.end());
      const auto [lo, hi] = MedianInterval(sorted);
      if ((hi - lo) / 2 < opts.target_ci * Quantile(sorted, 0.5)) break;
      if (opts.race_us > 0 && lo > opts.race_us) {
        raced = true;
        break;
      }
      if (opts.race_us > 0 && hi < opts.race_us) {  // surely a new best: the coordinator times
        raced_ahead = true;                         // it again in full (a REMEASURE trial)
        break;
      }
    }
  }
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_raced(raced);
  m.set_raced_ahead(raced_ahead);
  for (double s : samples) m.add_samples_us(s);
  Summarize(&m);
  m.set_measure_seconds(Seconds(start, Clock::now()));
  return m;
}

namespace {

// Stores src[i] (or `word` when src is null) into dst[0, n), non-temporally where the CPU has it.
void StoreWords(uint32_t* dst, const uint32_t* src, size_t n, uint32_t word, bool stream) {
  size_t i = 0;
#if defined(__SSE2__)
  if (stream) {
    for (; i < n && reinterpret_cast<uintptr_t>(dst + i) % 16 != 0; ++i)
      dst[i] = src ? src[i] : word;
    const __m128i fill = _mm_set1_epi32(static_cast<int>(word));
    for (; i + 4 <= n; i += 4)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                       src ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)) : fill);
    for (; i < n; ++i) dst[i] = src ? src[i] : word;
    _mm_sfence();  // the streamed lines are visible to the kernel's threads before it starts
    return;
  }
#endif
  if (src)
    std::memcpy(dst, src, n * 4);
  else
    std::fill(dst, dst + n, word);
}

}  // namespace

void PoisonWords(void* data, size_t words, uint32_t word, bool bypass_cache) {
  uint32_t* p = static_cast<uint32_t*>(data);
  ParallelChunks(
      words, [&](size_t b, size_t e) { StoreWords(p + b, nullptr, e - b, word, bypass_cache); });
}

void CopyWords(void* dst, const void* src, size_t words, bool bypass_cache) {
  uint32_t* d = static_cast<uint32_t*>(dst);
  const uint32_t* s = static_cast<const uint32_t*>(src);
  ParallelChunks(words,
                 [&](size_t b, size_t e) { StoreWords(d + b, s + b, e - b, 0, bypass_cache); });
}

void Summarize(v1::Measurement* m) {
  std::vector<double> s(m->samples_us().begin(), m->samples_us().end());
  std::sort(s.begin(), s.end());
  m->set_median_us(Quantile(s, 0.5));
  m->set_p10_us(Quantile(s, 0.1));
  m->set_p90_us(Quantile(s, 0.9));
  double cv = 0;
  if (s.size() >= 2) {
    double mean = 0, var = 0;
    for (double x : s) mean += x;
    mean /= s.size();
    for (double x : s) var += (x - mean) * (x - mean);
    var /= s.size() - 1;
    cv = mean > 0 ? std::sqrt(var) / mean : 0;
  }
  m->set_cv(cv);
}

void FillThroughput(const v1::Workload& w, v1::Measurement* m) {
  if (m->median_us() <= 0) return;
  m->set_gflops(codegen::WorkloadFlops(w) / (m->median_us() * 1e3));
  m->set_gbytes_per_s(codegen::WorkloadBytes(w) / (m->median_us() * 1e3));
}

double ComputePeak(const v1::Workload& w, const v1::ChipFingerprint& chip) {
  const double fp32 = chip.peak_gflops();
  // Dot-product instructions do 2 (bf16) or 4 (int8) products per lane where an FMA does one:
  // a fingerprint taken before their probes existed gets that multiple of the FMA peak.
  if (w.dtype() == v1::BF16) {
    if (chip.peak_bf16_gflops() > 0) return std::max(fp32, chip.peak_bf16_gflops());
    // No bf16 figure: a CPU without bf16 dot products (AVX2: its bf16 GEMMs widen to fp32 and
    // run on the FMAs), or a fingerprint from before the probe.
    const auto& isa = chip.isa_features();
    const bool dot = isa.empty() || std::find(isa.begin(), isa.end(), "avx512_bf16") != isa.end();
    return dot ? 2 * fp32 : fp32;
  }
  if (codegen::IsQuantized(w.dtype())) {
    if (chip.peak_int8_gops() > 0) return std::max(fp32, chip.peak_int8_gops());
    // No int8 figure: a fingerprint from before the probe measured AVX2's integer products
    // (their multiple of the FMA peak: 4 with VNNI dot products, 2 with AVX2's), or a CPU
    // without integer vectors, whose kernels run portable loops (the FMA peak).
    const auto& isa = chip.isa_features();
    auto has = [&](const char* f) { return std::find(isa.begin(), isa.end(), f) != isa.end(); };
    if (isa.empty() || has("avx512_vnni") || has("avx_vnni")) return 4 * fp32;
    return has("avx2") ? 2 * fp32 : fp32;
  }
  return fp32;
}

void ApplyRooflineGuard(const v1::Workload& w, const v1::ChipFingerprint& chip, bool warm,
                        v1::Measurement* m) {
  // A measured peak can be beaten a little (turbo on fewer cores, probe inefficiency).
  constexpr double kHeadroom = 1.5;
  if (m->status() != v1::OK || m->median_us() <= 0) return;
  double flops_us = 0, bytes_us = 0;
  const double peak = ComputePeak(w, chip);
  if (peak > 0) flops_us = codegen::WorkloadFlops(w) / (peak * 1e3);
  if (!warm && chip.read_gbytes_per_s() > 0)
    bytes_us = codegen::WorkloadBytes(w) / (chip.read_gbytes_per_s() * 1e3);
  const double bound = std::max(flops_us, bytes_us);
  if (bound <= 0 || m->median_us() >= bound / kHeadroom) return;
  m->set_status(v1::SUSPECT);
  m->set_message(absl::StrCat(
      "median ", m->median_us(), " us is faster than physically possible: the roofline bound is ",
      bound, " us (", flops_us > bytes_us ? "flops / peak " : "bytes / read bandwidth ",
      flops_us > bytes_us ? peak : chip.read_gbytes_per_s(),
      flops_us > bytes_us ? " GFLOP/s" : " GB/s", "), allowed down to bound/", kHeadroom));
}

int RotatingSets(double bytes_per_set, const v1::ChipFingerprint& chip, bool warm,
                 double max_total_bytes) {
  if (warm || bytes_per_set <= 0) return 1;
  double llc = chip.l3_bytes() > 0 ? chip.l3_bytes() : chip.l2_bytes();
  if (llc <= 0) llc = 32.0 * (1 << 20);
  // At least four times the LLC and 512 MiB, so each set has been evicted by the time its turn
  // comes again. The LLC that CPUID reports is not the whole story on the EPYC VMs we measure
  // on: a decode GEMM (46 MB of weights) timed over 2x the LLC ran at 115% of the DRAM read
  // probe, over 276 MB at 64 GB/s and only over 552 MB at the 52 GB/s it gets inside the
  // composed decode step, whose weights span gigabytes. Timing warmer than the step misleads the
  // tuner (configs good for cached data) and the step estimate.
  const double footprint = std::max(4 * llc, 512.0 * (1 << 20));
  const double wanted = std::floor(footprint / bytes_per_set) + 1;
  const double cap = std::max(1.0, std::floor(max_total_bytes / bytes_per_set));
  return static_cast<int>(std::clamp(wanted, 1.0, std::min(cap, 1e9)));
}

}  // namespace kiln::hardware
