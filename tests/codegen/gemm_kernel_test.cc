// The CPU GEMM template compiled for diverse configurations and verified on ragged shapes.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "codegen/cpu/gemm_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"
#include "hardware/device.h"

namespace kiln::codegen {
namespace {

class GemmKernelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto d = hardware::OpenDevice("cpu");
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = d->release();
  }
  static void TearDownTestSuite() { delete device_; }
  static hardware::Device* device_;
};
hardware::Device* GemmKernelTest::device_ = nullptr;

v1::Workload Gemm(const std::string& shape) { return *ParseWorkload("gemm", shape); }

// Configurations spanning both PACK modes, both loop orders, 1 and 2 threads, every UNROLL,
// register tiles of 1..6 vectors and blocks that cut every test shape raggedly; with PACK=1 every
// MR (each has its own in-register transposition of A, PackA). The first list
// is valid on AVX2 and AVX-512 alike; the second needs 32 vector registers.
struct Case {
  int64_t mr, nr, mc, kc, nc, pack, unroll, loop_order, nt;
};
const std::vector<Case> kCases = {
    {4, 16, 16, 64, 64, 1, 1, 0, 1},   {3, 32, 32, 128, 128, 0, 4, 1, 2},
    {2, 48, 64, 64, 384, 1, 8, 1, 2},  {1, 16, 16, 64, 64, 0, 2, 0, 1},
    {6, 16, 64, 256, 512, 1, 4, 0, 2}, {1, 64, 16, 64, 256, 0, 1, 1, 2},
    {3, 16, 32, 128, 256, 1, 2, 1, 2}, {1, 32, 16, 128, 128, 1, 4, 1, 1},
};
const std::vector<Case> kWideCases = {
    {14, 32, 128, 256, 512, 1, 4, 0, 2},
    {8, 48, 64, 128, 768, 0, 4, 0, 2},
    {12, 32, 64, 128, 256, 1, 2, 1, 2},
    {8, 32, 64, 64, 128, 1, 1, 0, 1},
};

TEST_F(GemmKernelTest, DiverseConfigsAreCorrectOnRaggedShapes) {
  const ChipTraits traits = TraitsFromFingerprint(device_->Fingerprint());
  const auto tmpl = NewCpuGemmTemplate();
  // Rendered against a large problem (so that every case is a valid point); the compiled
  // kernel takes M, N, K at run time and is then verified on the odd shapes.
  const v1::Workload big = Gemm("M=256,N=4096,K=4096");
  hardware::MeasureOptions verify_only;
  verify_only.warm = true;
  verify_only.warmup = 0;
  verify_only.min_samples = 1;
  verify_only.max_samples = 2;
  verify_only.max_seconds = 0.01;
  std::vector<Case> cases = kCases;
  if (traits.vector_registers >= 32)
    cases.insert(cases.end(), kWideCases.begin(), kWideCases.end());
  for (size_t idx = 0; idx < cases.size(); ++idx) {
    const Case& c = cases[idx];
    // Every other case takes its weights packed ahead of time, so both B paths meet every shape;
    // half of those prefetch the packed stream, near or far ahead within the micro-panel, and
    // the other half (N-major tiles) 1 or 2 micro-panels ahead, shared among the row panels.
    const bool ahead = idx % 4 == 3 && c.loop_order == 0;
    Config config = {{"PREPACK", static_cast<int64_t>(idx % 2)},
                     {"PF", idx % 4 == 1 ? (idx % 8 == 1 ? 1024 : 8192) : 0},
                     {"PFN", ahead ? 1 + static_cast<int64_t>(idx / 4) % 2 : 0},
                     {"MR", c.mr},
                     {"NR", c.nr},
                     {"MC", c.mc},
                     {"KC", c.kc},
                     {"NC", c.nc},
                     {"PACK", c.pack},
                     {"UNROLL", c.unroll},
                     {"LOOP_ORDER", c.loop_order},
                     {"NT", std::min<int64_t>(c.nt, traits.cores)}};
    auto kernel = tmpl->Render(big, config, traits);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    auto compiled = device_->Compile(*kernel);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    std::printf("%-60s compiled in %.2f s\n", ConfigKey(config).c_str(), compiled->compile_seconds);
    for (const char* shape :
         {"M=1,N=1,K=1", "M=7,N=13,K=5", "M=17,N=33,K=65", "M=8,N=4096,K=257", "M=37,N=50,K=300"}) {
      v1::Measurement m = device_->Measure(Gemm(shape), *compiled, verify_only);
      EXPECT_EQ(m.status(), v1::OK) << ConfigKey(config) << " " << shape << ": " << m.message();
      EXPECT_LE(m.max_error(), 1e-4);
    }
  }
}

}  // namespace
}  // namespace kiln::codegen
