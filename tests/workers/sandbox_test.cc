// A crashing, hanging or runaway kernel is reported as a failed Measurement and the calling
// process (the worker) keeps serving.
#include "workers/sandbox.h"

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "workers/worker.h"

namespace kiln::workers {
namespace {

v1::Workload SmallGemm() {
  v1::Workload w;
  w.set_op(v1::GEMM);
  w.set_dtype(v1::FP32);
  (*w.mutable_dims())["M"] = 4;
  (*w.mutable_dims())["N"] = 16;
  (*w.mutable_dims())["K"] = 8;
  return w;
}

class SandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { device_ = hardware::OpenDevice("cpu")->release(); }

  v1::Measurement RunBody(const std::string& body, double timeout = 5, long long mem = 1LL << 30) {
    codegen::Kernel k;
    k.dialect = "cpp";
    k.entry = "kiln_gemm";
    k.source =
        "#include <cstdlib>\n#include <cstring>\nextern \"C\" void kiln_gemm(int M, int N, int K, "
        "const float* A, const float* B, float* C) {\n" +
        body + "\n}\n";
    auto compiled = device_->Compile(k);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    v1::SandboxRequest req;
    req.set_device("cpu");
    *req.mutable_chip() = device_->Fingerprint();
    *req.mutable_workload() = SmallGemm();
    req.set_kind(v1::TUNE);
    req.set_artifact(compiled->artifact);
    req.set_entry(compiled->entry);
    req.set_max_seconds(0.2);
    SandboxLimits limits;
    limits.timeout_seconds = timeout;
    limits.memory_bytes = mem;
    return RunSandboxed(req, limits);
  }

  static hardware::Device* device_;
};
hardware::Device* SandboxTest::device_ = nullptr;

const char kCorrect[] =
    "for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) { float s = 0;"
    " for (int k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j]; C[i * N + j] = s; }";

TEST_F(SandboxTest, CorrectKernelIsMeasured) {
  auto m = RunBody(kCorrect);
  EXPECT_EQ(m.status(), v1::OK) << m.message();
  EXPECT_GT(m.median_us(), 0);
  EXPECT_GE(m.samples_us_size(), 1);
}

TEST_F(SandboxTest, SegfaultIsCrashedAndWeGoOn) {
  auto m = RunBody("volatile int* p = nullptr; *p = 1;");
  EXPECT_EQ(m.status(), v1::CRASHED);
  EXPECT_NE(m.message().find("signal"), std::string::npos) << m.message();
  EXPECT_EQ(RunBody(kCorrect).status(), v1::OK);  // still serving
}

TEST_F(SandboxTest, HangIsTimeout) {
  auto m = RunBody("for (volatile int x = 0;; ++x) {}", 2);
  EXPECT_EQ(m.status(), v1::TIMEOUT);
  EXPECT_NE(m.message().find("2 s"), std::string::npos) << m.message();
}

TEST_F(SandboxTest, RunawayAllocationIsStoppedByTheMemoryLimit) {
  auto m = RunBody(
      "for (;;) { char* p = (char*)malloc(64 << 20); if (!p) abort(); memset(p, 1, 64 << 20); }",
      20, 2048LL << 20);  // the trial child maps LibTorch's libraries: leave room for them
  EXPECT_EQ(m.status(), v1::CRASHED);
  EXPECT_NE(m.message().find("memory limit 2048 MiB"), std::string::npos) << m.message();
}

// Tuning trials run in kiln-trial, which starts without LibTorch; baselines and steps need
// LibTorch's operators and run in this (the hosting) binary.
TEST(TrialExecutableTest, TuningTrialsRunInTheLeanExecutable) {
  const std::string tune = TrialExecutable(v1::TUNE);
  EXPECT_EQ(tune.substr(tune.rfind('/') + 1), kTrialExecutableName) << tune;
  EXPECT_EQ(TrialExecutable(v1::BASELINE), SelfExecutable());
  EXPECT_EQ(TrialExecutable(v1::STEP), SelfExecutable());
  // It says what it is when started by hand, and it links no LibTorch.
  SubprocessResult r = RunSubprocess({tune}, {});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_data.find("not for direct use"), std::string::npos) << r.stderr_data;
  SubprocessResult maps = RunSubprocess({"ldd", tune}, {});
  if (maps.ok()) {
    EXPECT_EQ(maps.stdout_data.find("libtorch"), std::string::npos) << maps.stdout_data;
  }
}

TEST_F(SandboxTest, WrongKernelIsWrongResult) {
  auto m = RunBody("for (int i = 0; i < M * N; ++i) C[i] = 1.0f;");
  EXPECT_EQ(m.status(), v1::WRONG_RESULT);
}

TEST_F(SandboxTest, KernelThatWritesNothingIsCaughtByNanPoisoning) {
  auto m = RunBody("");
  EXPECT_EQ(m.status(), v1::WRONG_RESULT) << m.message();
}

}  // namespace
}  // namespace kiln::workers

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == kiln::workers::kTrialChildFlag)
    return kiln::workers::TrialChildMain();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
