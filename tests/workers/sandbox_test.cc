// A crashing, hanging or runaway kernel is reported as a failed Measurement and the calling
// process (the worker) keeps serving.
#include "workers/sandbox.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "workers/trial_child.h"
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

  static v1::SandboxRequest Request(const std::string& body) {
    codegen::Kernel k;
    k.dialect = "cpp";
    k.entry = "kiln_gemm";
    k.source =
        "#include <cstdlib>\n#include <cstring>\n#include <unistd.h>\nextern \"C\" void "
        "kiln_gemm(int M, int N, int K, "
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
    return req;
  }

  static SandboxLimits Limits(double timeout = 5, long long mem = 1LL << 30) {
    SandboxLimits limits;
    limits.timeout_seconds = timeout;
    limits.memory_bytes = mem;
    return limits;
  }

  v1::Measurement RunBody(const std::string& body, double timeout = 5, long long mem = 1LL << 30) {
    return RunSandboxed(Request(body), Limits(timeout, mem));
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

// kiln-trial is found from the executable's own path: in an installation that has moved (no path
// of the build or install tree is compiled in), beside it, and in a build tree.
TEST(TrialExecutableTest, FoundRelativeToTheExecutable) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/kiln-find-trial-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const fs::path root = tmpl;
  auto touch = [](const fs::path& p, bool executable) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "#!/bin/sh\n";
    fs::permissions(p, executable ? fs::perms::owner_all : fs::perms::owner_read);
  };
  const fs::path prefix = root / "moved-prefix";
  touch(prefix / "bin/kiln-worker", true);
  EXPECT_EQ(FindTrialExecutable((prefix / "bin/kiln-worker").string()), "");
  touch(prefix / "bin/kiln-trial", true);  // beside it
  EXPECT_EQ(FindTrialExecutable((prefix / "bin/kiln-worker").string()),
            (prefix / "bin/kiln-trial").string());
  touch(prefix / "libexec/kiln/kiln-trial", true);  // the installed layout comes first
  EXPECT_EQ(FindTrialExecutable((prefix / "bin/kiln-worker").string()),
            (prefix / "libexec/kiln/kiln-trial").string());
  touch(prefix / "libexec/kiln/kiln-trial", false);  // not executable: skipped
  EXPECT_EQ(FindTrialExecutable((prefix / "bin/kiln-worker").string()),
            (prefix / "bin/kiln-trial").string());

  const fs::path build = root / "build";  // any build tree, from any of its programs
  touch(build / "CMakeCache.txt", false);
  EXPECT_EQ(FindTrialExecutable((build / "cli/kiln").string()), "");  // not built yet
  touch(build / "workers/kiln-trial", true);
  for (const char* program : {"cli/kiln", "bench/kiln-bench-kernels", "tests/workers/some_test"})
    EXPECT_EQ(FindTrialExecutable((build / program).string()),
              (build / "workers/kiln-trial").string())
        << program;
  EXPECT_EQ(FindTrialExecutable((root / "elsewhere/bin/kiln").string()), "");
  fs::remove_all(root);
}

// The long-lived trial process gives the same answers as one-shot children and keeps serving.
TEST_F(SandboxTest, TrialServerServesTrialsInOneProcess) {
  TrialServer server;
  for (int i = 0; i < 3; ++i) {
    auto m = server.Run(Request(kCorrect), Limits());
    EXPECT_EQ(m.status(), v1::OK) << m.message();
    EXPECT_GT(m.median_us(), 0);
  }
  EXPECT_EQ(server.started(), 1);
  EXPECT_EQ(server.served(), 3);
  server.Stop();
  EXPECT_EQ(server.Run(Request(kCorrect), Limits()).status(), v1::OK);
  EXPECT_EQ(server.started(), 2);
}

// A kernel that fails ends the process; the next trial gets a fresh one. A crash in a process
// that had served trials is measured again in a one-shot child before it is reported.
TEST_F(SandboxTest, TrialServerRestartsAfterAFailure) {
  TrialServer server;
  ASSERT_EQ(server.Run(Request(kCorrect), Limits()).status(), v1::OK);
  auto crashed = server.Run(Request("volatile int* p = nullptr; *p = 1;"), Limits());
  EXPECT_EQ(crashed.status(), v1::CRASHED);
  EXPECT_NE(crashed.message().find("signal"), std::string::npos) << crashed.message();
  EXPECT_EQ(server.served(), 0);
  EXPECT_EQ(server.Run(Request(kCorrect), Limits()).status(), v1::OK);
  EXPECT_EQ(server.started(), 2);

  auto wrong = server.Run(Request("for (int i = 0; i < M * N; ++i) C[i] = 1.0f;"), Limits());
  EXPECT_EQ(wrong.status(), v1::WRONG_RESULT);
  auto hang = server.Run(Request("for (volatile int x = 0;; ++x) {}"), Limits(2));
  EXPECT_EQ(hang.status(), v1::TIMEOUT);
  EXPECT_NE(hang.message().find("2 s"), std::string::npos) << hang.message();
  auto runaway =
      server.Run(Request("for (;;) { char* p = (char*)malloc(64 << 20); if (!p) abort(); "
                         "memset(p, 1, 64 << 20); }"),
                 Limits(20, 2048LL << 20));
  EXPECT_EQ(runaway.status(), v1::CRASHED);
  EXPECT_NE(runaway.message().find("memory limit 2048 MiB"), std::string::npos)
      << runaway.message();
  EXPECT_EQ(server.Run(Request(kCorrect), Limits()).status(), v1::OK);
  // Processes: the first (ended by the crash, which was then re-run one-shot), one until the
  // wrong result, one until the hang, one until the runaway allocation, and the last.
  EXPECT_EQ(server.started(), 5);
}

// A kernel that closes the results pipe and then hangs is still bounded by the trial's timeout.
TEST_F(SandboxTest, TrialServerKernelThatClosesItsResultsAndHangsIsATimeout) {
  TrialServer server;
  auto start = std::chrono::steady_clock::now();
  auto m = server.Run(
      Request("for (int fd = 3; fd < 64; ++fd) close(fd); for (volatile int x = 0;; ++x) {}"),
      Limits(2));
  EXPECT_EQ(m.status(), v1::TIMEOUT) << m.message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
  EXPECT_EQ(server.Run(Request(kCorrect), Limits()).status(), v1::OK);
}

// What a kernel prints goes to stderr: it cannot break the framing of the results.
TEST_F(SandboxTest, TrialServerIsNotConfusedByKernelOutput) {
  TrialServer server;
  const std::string printing = std::string("(void)!write(1, \"noise\\n\", 6); ") + kCorrect;
  for (int i = 0; i < 2; ++i) {
    auto m = server.Run(Request(printing), Limits());
    EXPECT_EQ(m.status(), v1::OK) << m.message();
  }
  EXPECT_EQ(server.started(), 1);
}

TEST(TrialFrameTest, RoundTripAndBrokenStreams) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_TRUE(WriteFrame(fds[1], "hello"));
  ASSERT_TRUE(WriteFrame(fds[1], ""));
  ASSERT_EQ(write(fds[1],
                  "\x09\0\0\0"
                  "abc",
                  7),
            7);  // 9 bytes announced, 3 sent
  close(fds[1]);
  std::string got, error;
  ASSERT_TRUE(ReadFrame(fds[0], &got, &error));
  EXPECT_EQ(got, "hello");
  ASSERT_TRUE(ReadFrame(fds[0], &got, &error));
  EXPECT_EQ(got, "");
  EXPECT_FALSE(ReadFrame(fds[0], &got, &error));
  EXPECT_NE(error.find("after 3 of a frame's 9 bytes"), std::string::npos) << error;
  close(fds[0]);

  ASSERT_EQ(pipe(fds), 0);
  close(fds[1]);
  error.clear();
  EXPECT_FALSE(ReadFrame(fds[0], &got, &error));  // a clean end: no error
  EXPECT_EQ(error, "");
  close(fds[0]);
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
  if (int code = kiln::workers::MaybeTrialChild(argc, argv); code >= 0) return code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
