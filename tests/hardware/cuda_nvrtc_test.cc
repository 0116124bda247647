// The CUDA backend without a GPU: every CUDA template compiles through NVRTC (default and
// random valid configurations, several architectures), and the device reports itself
// unavailable where there is no NVIDIA driver.
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "hardware/cuda/cuda_api.h"
#include "hardware/cuda/cuda_device.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

codegen::ChipTraits H100Traits() {
  codegen::ChipTraits t;
  t.vector_floats = 4;
  t.local_mem_bytes = 48 << 10;
  t.max_work_group_size = 1024;
  return t;
}

TEST(CudaNvrtcTest, EveryTemplateCompiles) {
  auto version = NvrtcVersion();
  if (!version.ok()) GTEST_SKIP() << version.status();
  std::printf("%s\n", version->c_str());
  std::vector<v1::Workload> cases = testing::OperatorCases();
  cases.push_back(*codegen::ParseWorkload("gemm", "M=64,N=4096,K=4096"));
  cases.push_back(*codegen::ParseWorkload("attention_decode", "B=1,H=32,KVH=8,D=128,L=4096"));
  int compiled = 0;
  for (const v1::Workload& w : cases) {
    auto t = codegen::FindDeviceTemplate(w, "cuda");
    ASSERT_TRUE(t.ok()) << t.status();
    const codegen::ChipTraits traits = H100Traits();
    std::vector<std::pair<codegen::Config, int>> runs = {{(*t)->DefaultConfig(w, traits), 80},
                                                         {(*t)->DefaultConfig(w, traits), 90}};
    for (const auto& c : testing::RandomConfigs((*t)->Space(w, traits), 3,
                                                std::hash<std::string>()(codegen::WorkloadKey(w))))
      runs.push_back({c, 90});
    for (const auto& [config, arch] : runs) {
      auto kernel = (*t)->Render(w, config, traits);
      ASSERT_TRUE(kernel.ok()) << kernel.status();
      auto cubin = NvrtcCompile(kernel->source, kernel->entry + ".cu", kernel->defines, arch);
      ASSERT_TRUE(cubin.ok()) << codegen::WorkloadKey(w) << " " << codegen::ConfigKey(config)
                              << " sm_" << arch << ": " << cubin.status();
      EXPECT_GT(cubin->size(), 1000u);
      ++compiled;
    }
  }
  std::printf("%d kernels compiled\n", compiled);
}

TEST(CudaNvrtcTest, CompileErrorsCarryTheLog) {
  if (!NvrtcVersion().ok()) GTEST_SKIP() << "no NVRTC";
  auto cubin =
      NvrtcCompile("extern \"C\" __global__ void k() { undeclared_thing(); }", "bad.cu", {}, 90);
  ASSERT_FALSE(cubin.ok());
  EXPECT_EQ(cubin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(cubin.status().message(), "undeclared_thing")) << cubin.status();
}

TEST(CudaNvrtcTest, WithoutADriverTheDeviceIsUnavailable) {
  if (LoadCudaDriver().ok()) GTEST_SKIP() << "an NVIDIA driver is present";
  auto d = OpenDevice("cuda");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
  EXPECT_FALSE(OpenDevice("cuda:1").ok());
  EXPECT_EQ(OpenDevice("cuda:x").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaNvrtcTest, ArchFromFingerprint) {
  v1::ChipFingerprint fp;
  fp.add_isa_features("sm_90");
  EXPECT_EQ(CudaArch(fp), 90);
  EXPECT_EQ(CudaArch(v1::ChipFingerprint()), 0);
}

}  // namespace
}  // namespace kiln::hardware
