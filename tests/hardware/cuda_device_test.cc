// GPU runtime tests of the CUDA backend (label gpu; skipped without an NVIDIA driver): the
// fingerprint, every operator case's default and random configurations against the reference,
// cuBLAS and the default-configuration baselines, a compile error, and the decode GEMM tuned
// against cuBLAS (printed).
#include "hardware/cuda/cuda_device.h"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

class CudaDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto d = OpenDevice("cuda");
    if (!d.ok()) {
      why_ = std::string(d.status().message());
      return;
    }
    device_ = d->release();
    std::printf("%s\n", device_->Fingerprint().ShortDebugString().c_str());
  }
  static void TearDownTestSuite() { delete device_; }
  void SetUp() override {
    if (!device_) GTEST_SKIP() << "no CUDA device: " << why_;
  }
  static Device* device_;
  static std::string why_;
};
Device* CudaDeviceTest::device_ = nullptr;
std::string CudaDeviceTest::why_;

TEST_F(CudaDeviceTest, Fingerprint) {
  const v1::ChipFingerprint& fp = device_->Fingerprint();
  EXPECT_EQ(fp.kind(), "cuda");
  EXPECT_THAT(fp.chip_type(), ::testing::StartsWith("cuda-sm"));
  EXPECT_GT(CudaArch(fp), 0);
  EXPECT_GT(fp.local_mem_bytes(), 0);
  EXPECT_GT(fp.max_work_group_size(), 0);
  EXPECT_GT(fp.peak_gflops(), 0);
}

TEST_F(CudaDeviceTest, EveryOperatorCaseVerifies) {
  for (const v1::Workload& w : testing::OperatorCases()) {
    ASSERT_TRUE(device_->Supports(w)) << codegen::WorkloadKey(w);
    auto t = codegen::FindDeviceTemplate(w, "cuda");
    ASSERT_TRUE(t.ok());
    const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
    std::vector<codegen::Config> configs = {(*t)->DefaultConfig(w, traits)};
    for (auto& c : testing::RandomConfigs((*t)->Space(w, traits), 6, 11)) configs.push_back(c);
    for (const auto& c : configs) {
      v1::Measurement m = testing::RunConfig(*device_, **t, w, c);
      std::printf("%-44s %-12s %9.2f us  %s\n", codegen::WorkloadKey(w).c_str(),
                  v1::MeasurementStatus_Name(m.status()).c_str(), m.median_us(),
                  codegen::ConfigKey(c).c_str());
      EXPECT_TRUE(m.status() == v1::OK || m.status() == v1::UNSUPPORTED)
          << codegen::WorkloadKey(w) << " " << codegen::ConfigKey(c) << ": " << m.message();
    }
    v1::Measurement b = device_->MeasureBaseline(w, testing::QuickOptions());
    EXPECT_EQ(b.status(), v1::OK) << device_->BaselineName(w) << ": " << b.message();
  }
}

TEST_F(CudaDeviceTest, CompileErrorCarriesTheLog) {
  codegen::Kernel k{
      "cuda", "kiln_gemm", "extern \"C\" __global__ void kiln_gemm() { nope(); }", {}};
  auto compiled = device_->Compile(k);
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(std::string(compiled.status().message()), ::testing::HasSubstr("nope"));
}

TEST_F(CudaDeviceTest, DecodeGemmAgainstCublas) {
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=8,N=4096,K=4096");
  auto t = codegen::FindDeviceTemplate(w, "cuda");
  const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
  MeasureOptions opts;
  v1::Measurement blas = device_->MeasureBaseline(w, opts);
  ASSERT_EQ(blas.status(), v1::OK) << blas.message();
  double best = 0;
  for (const auto& c : testing::RandomConfigs((*t)->Space(w, traits), 40, 5)) {
    v1::Measurement m = testing::RunConfig(*device_, **t, w, c, opts);
    if (m.status() == v1::OK && (best == 0 || m.median_us() < best)) best = m.median_us();
  }
  std::printf("gemm m=8 n=k=4096: cuBLAS %.1f us, best of 40 random configurations %.1f us\n",
              blas.median_us(), best);
  EXPECT_GT(best, 0);
}

}  // namespace
}  // namespace kiln::hardware
