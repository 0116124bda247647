#include "hardware/cpu/read_sweep.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "hardware/cpu/fingerprint.h"
#include "hardware/cpu/kernel_runtime.h"
#include "hardware/measure.h"

namespace kiln::hardware {
namespace {

constexpr size_t kPage = size_t{2} << 20;
constexpr size_t kChunk = size_t{4} << 20;  // a work item: small enough to balance two threads

typedef float Vec __attribute__((vector_size(64)));

// Sum of n floats (n a multiple of 128), eight independent vector chains: built for AVX-512 and
// AVX2 as well as the baseline ISA, picked when the process loads (the sweep must read at the
// width the kernels do, or it would understate the bandwidth on one core).
__attribute__((target_clones("avx512f", "avx2", "default"))) float SumChunk(const float* p,
                                                                            size_t n) {
  const Vec* v = reinterpret_cast<const Vec*>(p);
  Vec s[8] = {};
  for (size_t i = 0; i < n / 16; i += 8)
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) s[u] += v[i + u];
  for (int u = 1; u < 8; ++u) s[0] += s[u];
  float out = 0;
  for (int j = 0; j < 16; ++j) out += s[0][j];
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReadSweep>> ReadSweep::Create(size_t bytes, int threads) {
  bytes = std::max(kPage, bytes / kPage * kPage);
  float* data = static_cast<float*>(std::aligned_alloc(kPage, bytes));
  if (!data)
    return absl::ResourceExhaustedError(
        absl::StrCat("read sweep: cannot allocate ", bytes >> 20, " MiB"));
  madvise(data, bytes, MADV_HUGEPAGE);  // best effort: fewer TLB misses, as the kernels' weights
  const size_t per = kChunk / sizeof(float), n = bytes / sizeof(float);
  RunOnKernelPool(static_cast<long>((bytes + kChunk - 1) / kChunk), threads, [&](long c) {
    for (size_t i = c * per; i < std::min(n, (c + 1) * per); ++i)
      data[i] = static_cast<float>(i & 7);
  });
  return std::unique_ptr<ReadSweep>(new ReadSweep(data, bytes, std::max(1, threads)));
}

ReadSweep::~ReadSweep() { std::free(data_); }

double ReadSweep::Pass() {
  const long chunks = static_cast<long>((bytes_ + kChunk - 1) / kChunk);
  const size_t per = kChunk / sizeof(float), n = bytes_ / sizeof(float);
  std::vector<float> sums(chunks);
  const auto t0 = std::chrono::steady_clock::now();
  RunOnKernelPool(chunks, threads_, [&](long c) {
    const size_t begin = c * per;
    sums[c] = SumChunk(data_ + begin, std::min(per, n - begin));
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (float x : sums) sink_ += x;
  return s > 0 ? bytes_ / s / 1e9 : 0;
}

double ReadSweep::BestGbps(int passes) {
  double best = 0;
  for (int i = 0; i < std::max(1, passes); ++i) best = std::max(best, Pass());
  return best;
}

void ApplyRooflineGuardNow(const v1::Workload& w, const v1::ChipFingerprint& chip, bool warm,
                           v1::Measurement* m) {
  const v1::Measurement before = *m;
  ApplyRooflineGuard(w, chip, warm, m);
  if (m->status() != v1::SUSPECT) return;
  v1::ChipFingerprint at_now = chip;
  if (!warm) {  // a cold result: the bandwidth first (a sweep is cheaper than the probe)
    auto sweep = ReadSweep::Create(size_t{256} << 20, std::max(1, chip.cores()));
    const double now = sweep.ok() ? (*sweep)->BestGbps(3) : 0;
    if (now > chip.read_gbytes_per_s()) {
      at_now.set_read_gbytes_per_s(now);
      *m = before;
      ApplyRooflineGuard(w, at_now, warm, m);
      if (m->status() != v1::SUSPECT) return;
    }
  }
  // Still faster than the peaks allow: the compute peaks may be low the same way (the host's
  // probe, kept for the boot, ran while it was busy). Probe again (the higher figures are kept
  // for the boot too), at most once a minute a process: a worker whose fingerprint read low
  // then judges its later results by what this process probed, without a probe each.
  if (chip.kind() != "cpu") return;
  static absl::Mutex mu;
  static v1::ChipFingerprint* probed = new v1::ChipFingerprint;
  static std::chrono::steady_clock::time_point last_probe;
  absl::MutexLock lock(&mu);
  auto judge = [&] {
    KeepHigherPeaks(*probed, &at_now);
    *m = before;
    ApplyRooflineGuard(w, at_now, warm, m);
  };
  judge();
  const auto now = std::chrono::steady_clock::now();
  if (m->status() != v1::SUSPECT ||
      (probed->peak_gflops() > 0 && now - last_probe < std::chrono::minutes(1)))
    return;
  auto tc = FindToolchain();
  if (!tc.ok()) return;
  last_probe = now;
  KeepHigherPeaks(ProbeCpuFingerprint(&*tc, /*fresh=*/true), probed);
  judge();
}

}  // namespace kiln::hardware
