// Decode GEMM M=8, N=K=4096 (label slow): a few configurations, prepacked weights included,
// verified and timed cold next to OpenBLAS. Asserts correctness only and prints the table for a
// reader; speed is judged by the benchmarks (bench/), never by a timed test on a shared machine.
#include <algorithm>
#include <array>
#include <cstdio>

#include "codegen/cpu/gemm_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"
#include "hardware/device.h"

namespace kiln::hardware {
namespace {

TEST(CpuDecodeGemmTest, ConfigsVerifyAtDecodeShapeNextToOpenBlas) {
  auto device = OpenDevice("cpu");
  ASSERT_TRUE(device.ok()) << device.status();
  Device& d = **device;
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=8,N=4096,K=4096");
  const codegen::ChipTraits t = codegen::TraitsFromFingerprint(d.Fingerprint());
  const int64_t vw = t.vector_floats, nt = std::min(2, t.cores);
  auto tmpl = codegen::NewCpuGemmTemplate();
  MeasureOptions opts;  // defaults: cold, 1 s cap, 2% CI target

  // MR, NR (in vectors), MC, KC, NC, PACK, UNROLL, LOOP_ORDER, NT; the last one is bad.
  const std::vector<std::array<int64_t, 9>> rows = {
      {8, 2, 16, 256, 512, 1, 4, 0, nt}, {8, 2, 16, 512, 256, 1, 4, 0, nt},
      {8, 2, 16, 256, 512, 0, 4, 0, nt}, {8, 2, 16, 256, 512, 1, 4, 0, 1},
      {8, 2, 16, 256, 512, 0, 4, 0, 1},  {1, 1, 16, 64, 64, 0, 1, 1, 1},
  };
  std::vector<codegen::Config> configs;
  for (const auto& r : rows) {
    configs.push_back({{"MR", t.vector_registers < 32 ? std::min<int64_t>(r[0], 4) : r[0]},
                       {"NR", r[1] * vw},
                       {"MC", r[2]},
                       {"KC", r[3]},
                       {"NC", r[4]},
                       {"PACK", r[5]},
                       {"UNROLL", r[6]},
                       {"LOOP_ORDER", r[7]},
                       {"NT", r[8]},
                       {"PREPACK", 0}});
  }
  codegen::Config prepacked = configs[2];  // weights packed ahead of time, streamed contiguously
  prepacked["PREPACK"] = 1;
  configs.insert(configs.begin(), prepacked);
  v1::Measurement base = d.MeasureBaseline(w, opts);
  ASSERT_EQ(base.status(), v1::OK) << base.message();
  std::printf("%-66s %10s %8s %8s %6s\n", "config", "median_us", "GB/s", "GFLOP/s", "cv");
  double best = 1e30, worst = 0;
  for (const auto& c : configs) {
    auto k = tmpl->Render(w, c, t);
    ASSERT_TRUE(k.ok()) << k.status();
    auto compiled = d.Compile(*k);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    v1::Measurement m = d.Measure(w, *compiled, opts);
    ASSERT_EQ(m.status(), v1::OK) << m.message();
    std::printf("%-66s %10.1f %8.1f %8.1f %6.3f\n", codegen::ConfigKey(c).c_str(), m.median_us(),
                m.gbytes_per_s(), m.gflops(), m.cv());
    best = std::min(best, m.median_us());
    worst = std::max(worst, m.median_us());
  }
  std::printf("%-66s %10.1f %8.1f %8.1f %6.3f\n", d.BaselineName(w).c_str(), base.median_us(),
              base.gbytes_per_s(), base.gflops(), base.cv());
  std::printf("best/openblas %.2f  worst/best %.1f  (read bandwidth probe %.1f GB/s)\n",
              best / base.median_us(), worst / best, d.Fingerprint().read_gbytes_per_s());
}

}  // namespace
}  // namespace kiln::hardware
