// The OpenCL device (PoCL in CI): fingerprint and limits, compile errors with the build log,
// wrong and unwritten outputs caught, cheap re-opening from a known fingerprint, and the
// kernel package format. Skipped where no OpenCL device exists.
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "codegen/device_template.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hardware/kernel_package.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class OpenClDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto start = std::chrono::steady_clock::now();
    auto d = OpenDevice("opencl");
    if (!d.ok()) {
      why_ = std::string(d.status().message());
      return;
    }
    device_ = d->release();
    std::printf("probed in %.2f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                device_->Fingerprint().ShortDebugString().c_str());
  }
  static void TearDownTestSuite() { delete device_; }
  void SetUp() override {
    if (!device_) GTEST_SKIP() << "no OpenCL device: " << why_;
  }
  // A hand-written kernel in the gemm template's ABI, launched 1 x M work-items.
  static codegen::Kernel Raw(const std::string& body, const v1::Workload& w) {
    codegen::Kernel k{"opencl",
                      "kiln_gemm",
                      "__kernel void kiln_gemm(__global const float* A, __global const float* B,"
                      " __global float* C) {\n  const int i = get_global_id(0);\n" +
                          body + "\n}\n",
                      {}};
    for (const auto& [n, v] : w.dims()) k.defines.emplace_back("DIM_" + n, v);
    codegen::Launch launch;
    launch.global[0] = w.dims().at("M");
    codegen::AppendLaunchDefines(launch, &k.defines);
    return k;
  }
  static Device* device_;
  static std::string why_;
};
Device* OpenClDeviceTest::device_ = nullptr;
std::string OpenClDeviceTest::why_;

const char kRowLoop[] =
    "for (int j = 0; j < DIM_N; ++j) { float s = 0; for (int k = 0; k < DIM_K; ++k) "
    "s += A[i * DIM_K + k] * B[k * DIM_N + j]; C[i * DIM_N + j] = s; }";

TEST_F(OpenClDeviceTest, FingerprintCarriesLimits) {
  const v1::ChipFingerprint& fp = device_->Fingerprint();
  EXPECT_EQ(fp.kind(), "opencl");
  EXPECT_THAT(fp.chip_type(), StartsWith("opencl-"));
  EXPECT_GT(fp.local_mem_bytes(), 0);
  EXPECT_GT(fp.max_work_group_size(), 0);
  EXPECT_GT(fp.cores(), 0);
  EXPECT_FALSE(fp.compiler().empty());
  const codegen::ChipTraits t = codegen::TraitsFromFingerprint(fp);
  EXPECT_EQ(t.local_mem_bytes, fp.local_mem_bytes());
  EXPECT_EQ(t.max_work_group_size, fp.max_work_group_size());
}

TEST_F(OpenClDeviceTest, HandWrittenKernelVerifiesAndTimes) {
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=3,N=20,K=7");
  auto compiled = device_->Compile(Raw(kRowLoop, w));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  v1::Measurement m = device_->Measure(w, *compiled, testing::QuickOptions());
  EXPECT_EQ(m.status(), v1::OK) << m.message();
  EXPECT_GT(m.median_us(), 0);
  EXPECT_GT(m.samples_us_size(), 0);
}

TEST_F(OpenClDeviceTest, CompileErrorCarriesTheBuildLog) {
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=3,N=20,K=7");
  auto compiled = device_->Compile(Raw("C[i] = undeclared_variable;", w));
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(compiled.status().message()), HasSubstr("undeclared_variable"));
}

TEST_F(OpenClDeviceTest, WrongAndUnwrittenOutputsFail) {
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=3,N=20,K=7");
  std::string off_by_one = kRowLoop;
  off_by_one.replace(off_by_one.find("k < DIM_K"), 9, "k < DIM_K - 1");
  auto wrong = device_->Compile(Raw(off_by_one, w));
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  v1::Measurement m = device_->Measure(w, *wrong, testing::QuickOptions());
  EXPECT_EQ(m.status(), v1::WRONG_RESULT) << m.message();
  auto partial = device_->Compile(Raw("if (i > 0) { " + std::string(kRowLoop) + " }", w));
  ASSERT_TRUE(partial.ok());
  m = device_->Measure(w, *partial, testing::QuickOptions());
  EXPECT_EQ(m.status(), v1::WRONG_RESULT);
  EXPECT_THAT(m.message(), HasSubstr("NaN"));
}

TEST_F(OpenClDeviceTest, UnsupportedWorkloads) {
  EXPECT_FALSE(device_->Supports(*codegen::ParseWorkload("gemm", "M=1,N=64,K=64", "bf16")));
  EXPECT_FALSE(device_->Supports(*codegen::ParseWorkload("rope", "T=1,H=2,D=8")));
  v1::Workload epi = *codegen::ParseWorkload("gemm", "M=1,N=64,K=64");
  epi.set_epilogue("silu");
  EXPECT_FALSE(device_->Supports(epi));
  v1::Measurement m = device_->MeasureBaseline(epi, testing::QuickOptions());
  EXPECT_EQ(m.status(), v1::UNSUPPORTED);
}

TEST_F(OpenClDeviceTest, ReopeningFromAKnownFingerprintIsCheap) {
  v1::ChipFingerprint fp = device_->Fingerprint();
  auto start = std::chrono::steady_clock::now();
  auto again = OpenDevice("opencl:0", &fp);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_EQ((*again)->Fingerprint().chip_type(), fp.chip_type());
  fp.set_model("some other device");
  EXPECT_EQ(OpenDevice("opencl", &fp).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OpenDevice("opencl:99").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenDevice("opencl:-1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KernelPackageTest, RoundTripsBinaryPayloads) {
  const std::string path = KernelCachePath("package-test", "pkg");
  KernelPackage p{"cuda", "kiln_gemm", {{"DIM_M", 64}, {"TM", -1}}, std::string("\0\1\nx\n", 5)};
  ASSERT_TRUE(WriteKernelPackage(path, p).ok());
  auto q = ReadKernelPackage(path);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->dialect, "cuda");
  EXPECT_EQ(q->entry, "kiln_gemm");
  EXPECT_EQ(q->defines, p.defines);
  EXPECT_EQ(q->payload, p.payload);
  EXPECT_EQ(ReadKernelPackage(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::hardware
