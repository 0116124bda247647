// The CPU device: opening, fingerprint, compile errors and caching, verification, timing,
// the OpenBLAS baseline and the roofline guard.
#include "hardware/cpu/cpu_device.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "codegen/cpu/gemm_template.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hardware/cpu/kernel_runtime.h"
#include "hardware/cpu/torch_baseline/torch_ops.h"
#include "hardware/device.h"

namespace kiln::hardware {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

v1::Workload Gemm(const char* shape) { return *codegen::ParseWorkload("gemm", shape); }

bool HasIsa(const v1::ChipFingerprint& chip, const std::string& feature) {
  const auto& f = chip.isa_features();
  return std::find(f.begin(), f.end(), feature) != f.end();
}

codegen::Kernel Raw(std::string body) {
  return {"cpp",
          "kiln_gemm",
          "extern \"C\" void kiln_gemm(int M, int N, int K, const float* A, const float* B, "
          "float* C) {\n" +
              body + "\n}\n",
          {}};
}

MeasureOptions Quick() {
  MeasureOptions o;
  o.max_seconds = 0.2;
  o.min_samples = 3;
  o.max_samples = 20;
  return o;
}

class CpuDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto start = std::chrono::steady_clock::now();
    auto d = OpenDevice("cpu");
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = d->release();
    std::printf("probed in %.2f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                device_->Fingerprint().ShortDebugString().c_str());
  }
  static void TearDownTestSuite() { delete device_; }
  static Device* device_;
};
Device* CpuDeviceTest::device_ = nullptr;

// A process that links kiln_hardware hands the kernels it loads its one thread pool
// (codegen/cpu/templates/parallel.h): the hook must be in its dynamic symbol table.
TEST(KernelRuntimeTest, HostExportsTheKernelThreadPool) {
  EXPECT_NE(dlsym(RTLD_DEFAULT, "kiln_rt_parallel_for_v1"), nullptr);
  EXPECT_TRUE(CheckKernelHost().ok()) << CheckKernelHost();
}

TEST(OpenDeviceTest, UnknownSpecIsInvalid) {
  auto d = OpenDevice("tpu:0");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("unknown device 'tpu:0'"));
}

TEST(OpenDeviceTest, KnownFingerprintIsReusedWithoutProbing) {
  v1::ChipFingerprint known;
  known.set_kind("cpu");
  known.set_model("handed over by the worker");
  auto start = std::chrono::steady_clock::now();
  auto d = OpenDevice("cpu", &known);
  ASSERT_TRUE(d.ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.5);
  EXPECT_EQ((*d)->Fingerprint().model(), "handed over by the worker");
}

TEST_F(CpuDeviceTest, FingerprintIsPlausible) {
  const v1::ChipFingerprint& fp = device_->Fingerprint();
  EXPECT_EQ(fp.kind(), "cpu");
  EXPECT_THAT(fp.chip_type(), StartsWith("cpu-"));
  EXPECT_FALSE(fp.model().empty());
  EXPECT_FALSE(fp.vendor().empty());
  EXPECT_FALSE(fp.compiler().empty());
  EXPECT_FALSE(fp.hostname().empty());
  EXPECT_GE(fp.cores(), 1);
  EXPECT_GT(fp.memory_bytes(), 0);
  EXPECT_GT(fp.peak_gflops(), 0);
  EXPECT_GT(fp.read_gbytes_per_s(), 0);
  EXPECT_LE(fp.l3_bytes(), std::max<int64_t>(32LL << 20, fp.cores() * (16LL << 20)));
}

TEST_F(CpuDeviceTest, SupportsWhatItHasTemplatesFor) {
  EXPECT_TRUE(device_->Supports(Gemm("M=8,N=64,K=64")));
  v1::Workload bias = Gemm("M=8,N=64,K=64");
  bias.set_epilogue("bias");
  EXPECT_TRUE(device_->Supports(bias));
  // A valid workload no CPU template covers: rope over heads wider than 1024.
  v1::Workload wide = *codegen::ParseWorkload("rope", "T=1,H=2,D=2048");
  EXPECT_FALSE(device_->Supports(wide));
  CompiledKernel none;
  EXPECT_EQ(device_->Measure(wide, none, Quick()).status(), v1::UNSUPPORTED);
  EXPECT_EQ(device_->BaselineName(Gemm("M=8,N=64,K=64")), "onednn-packed");
  EXPECT_EQ(device_->BaselineName(Gemm("M=1,N=64,K=64")), "openblas-sgemv");
}

// Every route a user could run instead is timed and listed; the measurement is the fastest's.
TEST_F(CpuDeviceTest, BaselineTimesEveryRouteAndKeepsTheFastest) {
  struct Case {
    v1::Workload w;
    std::vector<std::string> routes;
  };
  v1::Workload bf16 = Gemm("M=4,N=256,K=512");
  bf16.set_dtype(v1::BF16);
  v1::Workload residual = Gemm("M=1,N=256,K=512");
  residual.set_epilogue("residual");
  const std::string torch = torch_baseline::Name();
  // A chip whose roofline no route can pass, so that a busy host's probe never turns a route into
  // SUSPECT here (the guard has tests of its own).
  v1::ChipFingerprint chip = device_->Fingerprint();
  chip.set_peak_gflops(1e9);
  chip.set_read_gbytes_per_s(1e9);
  auto roomy = OpenDevice("cpu", &chip);
  ASSERT_TRUE(roomy.ok());
  for (const Case& c :
       {Case{Gemm("M=1,N=256,K=512"),
             {"openblas-sgemv", "openblas-sgemv-nk", "openblas-sgemm", "openblas-sgemm-nk",
              "blis-sgemm", "onednn-packed"}},
        Case{Gemm("M=16,N=256,K=512"),
             {"openblas-sgemm", "openblas-sgemm-nk", "blis-sgemm", "onednn-packed"}},
        Case{bf16,
             {"onednn-bf16-packed", torch + "-linear", "onednn-packed-fp32-weights",
              torch + "-linear-fp32-weights"}},
        Case{residual, {torch, torch + "-linear"}},
        Case{*codegen::ParseWorkload("softmax", "T=4,N=1000"), {torch, "onednn-softmax"}}}) {
    v1::Measurement m = (*roomy)->MeasureBaseline(c.w, Quick());
    ASSERT_EQ(m.status(), v1::OK) << codegen::WorkloadKey(c.w) << ": " << m.message();
    std::set<std::string> names;
    double fastest = 1e300;
    for (const auto& r : m.baseline_routes()) {
      names.insert(r.name());
      // bf16 matmuls (oneDNN's, LibTorch's) are fast from AVX-512 up: an AVX2 host lists the
      // bf16 routes, unsupported, and times the fp32-weights ones instead.
      if (r.status() == v1::UNSUPPORTED && r.dtype() == "bf16" && !HasIsa(chip, "avx512f")) {
        EXPECT_NE(r.message().find("AVX-512"), std::string::npos)
            << r.name() << ": " << r.message();
        continue;
      }
      EXPECT_EQ(r.status(), v1::OK) << r.name() << " at " << r.threads() << ": " << r.message();
      EXPECT_GT(r.median_us(), 0) << r.name();
      EXPECT_GE(r.samples_us_size(), 1) << r.name();
      if (r.status() == v1::OK) fastest = std::min(fastest, r.median_us());
      if (r.name().find("-nk") != std::string::npos ||
          r.name().find("packed") != std::string::npos) {
        EXPECT_GT(r.prepack_us(), 0) << r.name() << ": its layout is made ahead of time";
      }
    }
    for (const std::string& want : c.routes)
      EXPECT_TRUE(names.count(want)) << codegen::WorkloadKey(c.w) << " lacks " << want;
    // Each route at 1 thread and at all cores (one at all cores only for a second pool variant).
    EXPECT_GE(m.baseline_routes_size(),
              static_cast<int>(c.routes.size()) * std::min(2, device_->Fingerprint().cores()));
    EXPECT_DOUBLE_EQ(m.median_us(), fastest);
    ASSERT_NE(FastestRoute(m), nullptr);
    EXPECT_DOUBLE_EQ(FastestRoute(m)->median_us(), fastest);
  }
}

TEST_F(CpuDeviceTest, SyntaxErrorReturnsTheDiagnostics) {
  auto c = device_->Compile(Raw("this is not C++;"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("compile failed"));
  EXPECT_THAT(c.status().message(), HasSubstr("error"));
  EXPECT_THAT(c.status().message(), HasSubstr("this"));
  EXPECT_LE(c.status().message().size(), 2200u);
  EXPECT_EQ(device_->Compile({"cuda", "k", "", {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CpuDeviceTest, GarbageOutputIsWrongResult) {
  auto c = device_->Compile(Raw("for (long i = 0; i < (long)M * N; ++i) C[i] = 1.0f;"));
  ASSERT_TRUE(c.ok()) << c.status();
  v1::Measurement m = device_->Measure(Gemm("M=7,N=13,K=5"), *c, Quick());
  EXPECT_EQ(m.status(), v1::WRONG_RESULT);
  EXPECT_THAT(m.message(), HasSubstr("C[0][0] = 1, want"));
  EXPECT_THAT(m.message(), HasSubstr("max_error"));
  EXPECT_EQ(m.samples_us_size(), 0);  // never timed
}

TEST_F(CpuDeviceTest, UnwrittenElementIsWrongResult) {
  // A correct GEMM except that it skips the last element, which keeps its NaN poison.
  auto c = device_->Compile(Raw(R"(
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        if (i == M - 1 && j == N - 1) continue;
        float s = 0;
        for (int k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
        C[i * N + j] = s;
      })"));
  ASSERT_TRUE(c.ok()) << c.status();
  v1::Measurement m = device_->Measure(Gemm("M=17,N=33,K=65"), *c, Quick());
  EXPECT_EQ(m.status(), v1::WRONG_RESULT);
  EXPECT_THAT(m.message(), HasSubstr("C[16][32] = nan"));
}

TEST_F(CpuDeviceTest, MissingEntryIsACompileError) {
  codegen::Kernel k = Raw("");
  k.entry = "not_there";
  auto c = device_->Compile(k);
  ASSERT_TRUE(c.ok()) << c.status();
  v1::Measurement m = device_->Measure(Gemm("M=2,N=2,K=2"), *c, Quick());
  EXPECT_EQ(m.status(), v1::COMPILE_ERROR);
  EXPECT_THAT(m.message(), HasSubstr("not_there"));
}

TEST_F(CpuDeviceTest, CompilesOnceThenReusesTheObject) {
  char dir[] = "/tmp/kiln-cache-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string saved = getenv("KILN_CACHE_DIR") ? getenv("KILN_CACHE_DIR") : "";
  setenv("KILN_CACHE_DIR", dir, 1);
  codegen::Kernel k = Raw("for (long i = 0; i < (long)M * N; ++i) C[i] = 0;");
  auto first = device_->Compile(k);
  auto second = device_->Compile(k);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_THAT(first->artifact, StartsWith(std::string(dir) + "/kernels/" + k.Hash()));
  EXPECT_EQ(first->artifact, second->artifact);
  EXPECT_EQ(first->source_hash, k.Hash());
  EXPECT_THAT(first->toolchain, HasSubstr("-O3 -march=native -fopenmp"));
  EXPECT_GT(first->compile_seconds, 0.02);
  EXPECT_LT(second->compile_seconds, first->compile_seconds / 4);
  if (saved.empty())
    unsetenv("KILN_CACHE_DIR");
  else
    setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  std::string rm = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(rm.c_str()), 0);
}

TEST_F(CpuDeviceTest, MeasuresTheDecodeGemmAndTheBaselineCold) {
  const v1::Workload w = Gemm("M=8,N=4096,K=4096");
  const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
  codegen::Config config = {{"MR", 8},
                            {"NR", 2 * traits.vector_floats},
                            {"MC", 16},
                            {"KC", 256},
                            {"NC", 512},
                            {"PACK", 1},
                            {"UNROLL", 4},
                            {"LOOP_ORDER", 0},
                            {"NT", std::min(2, traits.cores)},
                            {"PREPACK", 0}};
  if (traits.vector_registers < 32) config["MR"] = 4;
  auto kernel = codegen::NewCpuGemmTemplate()->Render(w, config, traits);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  auto compiled = device_->Compile(*kernel);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  // Compiled for a process that exports the thread pool: the kernel brings no pool of its own,
  // so it never starts a thread (codegen/cpu/templates/parallel.h, KILN_RT_HOSTED).
  EXPECT_THAT(compiled->toolchain, HasSubstr("-DKILN_RT_HOSTED=1"));
  std::ifstream so(compiled->artifact, std::ios::binary);
  const std::string object((std::istreambuf_iterator<char>(so)), std::istreambuf_iterator<char>());
  EXPECT_THAT(object, HasSubstr("kiln_rt_parallel_for_v1"));
  EXPECT_THAT(object, Not(HasSubstr("pthread_create")));
  for (bool baseline : {false, true}) {
    v1::Measurement m =
        baseline ? device_->MeasureBaseline(w, Quick()) : device_->Measure(w, *compiled, Quick());
    std::printf("%s: %s\n", baseline ? "openblas" : "kernel", m.ShortDebugString().c_str());
    EXPECT_EQ(m.status(), v1::OK) << m.message();
    EXPECT_EQ(m.cache_mode(), "cold");
    EXPECT_GE(m.samples_us_size(), 1);
    EXPECT_GT(m.median_us(), 0);
    EXPECT_GT(m.gflops(), 0);
    EXPECT_GT(m.gbytes_per_s(), 0);
    EXPECT_LT(m.max_error(), 1e-4);
    EXPECT_GE(m.measure_seconds(), m.median_us() * 1e-6);
  }
  MeasureOptions warm = Quick();
  warm.warm = true;
  EXPECT_EQ(device_->Measure(w, *compiled, warm).cache_mode(), "warm");
}

TEST_F(CpuDeviceTest, FasterThanTheRooflineIsSuspect) {
  v1::ChipFingerprint slow = device_->Fingerprint();
  slow.set_peak_gflops(0.001);  // claims the chip is a million times slower than it is
  auto d = OpenDevice("cpu", &slow);
  ASSERT_TRUE(d.ok());
  // Without a compiler the peaks cannot be probed again, and the fingerprint's stand.
  const char* cxx = std::getenv("KILN_CXX");
  const std::string saved = cxx ? cxx : "";
  setenv("KILN_CXX", "/nonexistent/c++", 1);
  v1::Measurement m = (*d)->MeasureBaseline(Gemm("M=64,N=64,K=64"), Quick());
  if (cxx) {
    setenv("KILN_CXX", saved.c_str(), 1);
  } else {
    unsetenv("KILN_CXX");
  }
  EXPECT_EQ(m.status(), v1::SUSPECT);
  EXPECT_THAT(m.message(), HasSubstr("roofline"));
  // With one, the peaks are probed again before a result is called faster than the chip: the
  // fingerprint's figure was what was wrong.
  m = (*d)->MeasureBaseline(Gemm("M=64,N=64,K=64"), Quick());
  EXPECT_EQ(m.status(), v1::OK) << m.message();
}

}  // namespace
}  // namespace kiln::hardware
