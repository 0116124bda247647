// kiln-bench-roofline: this machine's limits — peak fp32 FLOP/s (an FMA loop on every core)
// and memory bandwidth (a read-only sweep and STREAM triad, all cores). Medians of repeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/median.h"
#include "common/flags.h"
#include "common/json_text.h"
#include "hardware/cpu/fingerprint.h"
#include "hardware/cpu/read_sweep.h"
#include "hardware/toolchain.h"

namespace {

using kiln::bench::Median;

// STREAM triad a = b + s*c over `floats`-long arrays, split over all cores; GB/s counts the
// 3 arrays' bytes (two reads, one write), as STREAM does.
double Triad(size_t floats, int threads, int repeats) {
  std::vector<float> a(floats), b(floats, 1.0f), c(floats, 2.0f);
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        size_t lo = floats * t / threads, hi = floats * (t + 1) / threads;
        for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
      });
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(3.0 * floats * sizeof(float) / s / 1e9);
  }
  if (a[floats / 2] != 7.0f) std::fprintf(stderr, "triad check failed\n");
  return Median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  bool json = false;
  const std::vector<kiln::Flag> flags = {
      {"--json", kiln::Flag::kSwitch,
       [&](const std::string&) {
         json = true;
         return std::string();
       }},
      {"--repeats", kiln::Flag::kValue,
       [&](const std::string& v) {
         repeats = std::max(1, std::atoi(v.c_str()));
         return std::string();
       }},
  };
  if (kiln::ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr, "usage: kiln-bench-roofline [--repeats N] [--json]\n");
    return 2;
  }
  auto toolchain = kiln::hardware::FindToolchain();
  if (!toolchain.ok()) {
    std::fprintf(stderr, "kiln-bench-roofline: %s\n",
                 std::string(toolchain.status().message()).c_str());
    return 1;
  }
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  // The step runner's sweep (in process, on the kernels' thread pool), alternating with the
  // fingerprint's probe (a child process) so that the two are read in the same moments.
  auto sweep = kiln::hardware::ReadSweep::Create(size_t{512} << 20, threads);
  if (!sweep.ok()) {
    std::fprintf(stderr, "kiln-bench-roofline: %s\n",
                 std::string(sweep.status().message()).c_str());
    return 1;
  }
  std::vector<double> peak, read, pool_read;
  kiln::v1::ChipFingerprint fp;
  for (int r = 0; r < repeats; ++r) {
    fp = kiln::hardware::ProbeCpuFingerprint(&*toolchain, /*fresh=*/true);
    peak.push_back(fp.peak_gflops());
    read.push_back(fp.read_gbytes_per_s());
    pool_read.push_back((*sweep)->BestGbps(7));
  }
  const double triad = Triad(size_t{64} << 20, threads, repeats);  // 3 x 256 MiB
  if (json) {
    using kiln::RoundTo;
    std::printf("%s\n", kiln::JsonText({{"chip_type", fp.chip_type()},
                                        {"model", fp.model()},
                                        {"cores", fp.cores()},
                                        {"peak_gflops", RoundTo(Median(peak), 1)},
                                        {"read_gbytes_per_s", RoundTo(Median(read), 2)},
                                        {"step_sweep_gbytes_per_s", RoundTo(Median(pool_read), 2)},
                                        {"triad_gbytes_per_s", RoundTo(triad, 2)},
                                        {"repeats", repeats}})
                            .c_str());
  } else {
    std::printf("chip          %s (%s), %d cores\n", fp.chip_type().c_str(), fp.model().c_str(),
                fp.cores());
    std::printf("peak fp32     %.1f GFLOP/s   (FMA loop, all cores, median of %d)\n", Median(peak),
                repeats);
    std::printf("read          %.2f GB/s      (read-only sweep, all cores)\n", Median(read));
    std::printf("read (step)   %.2f GB/s      (the step runner's sweep: 512 MiB, kernel pool)\n",
                Median(pool_read));
    std::printf("STREAM triad  %.2f GB/s      (a = b + s*c, 3 x 256 MiB)\n", triad);
  }
  return 0;
}
