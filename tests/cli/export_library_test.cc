// `kiln export` as a library: a job's kernels of every CPU operator (a GEMM with prepacked
// weights, epilogue GEMMs, attention, the element-wise operators, MoE, the scan) exported,
// built with the exported CMakeLists.txt into one program with one thread pool, checked by the
// exported self-test and by a program of this test that calls a kernel the way kiln_kernels.h
// says and compares it with a reference of its own.
#include "cli/export_library.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/export.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "common/json_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/export.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A finished job on a plain x86-64 CPU with two cores: one task per workload, its best the
// template's safe default with `pins` applied where the workload's space has those knobs.
v1::Job JobOf(const std::vector<std::tuple<std::string, std::string, std::string, std::string>>& ws,
              const codegen::Config& pins) {
  v1::Job job;
  job.set_id("j-000000000042");
  job.mutable_chip()->set_kind("cpu");
  job.mutable_chip()->set_chip_type("cpu-x86_64");
  job.mutable_chip()->set_model("Test CPU");
  job.mutable_chip()->set_cores(2);
  for (const auto& [op, shape, dtype, epilogue] : ws) {
    auto w = codegen::ParseWorkload(op, shape, dtype);
    EXPECT_TRUE(w.ok()) << op << " " << shape << ": " << w.status();
    w->set_epilogue(epilogue);
    v1::TaskResult* t = job.add_tasks();
    *t->mutable_workload() = *w;
    t->set_workload_key(codegen::WorkloadKey(*w));
    auto tmpl = codegen::FindTemplate(*w, "cpu");
    EXPECT_TRUE(tmpl.ok()) << tmpl.status();
    const auto space = (*tmpl)->Space(*w, codegen::TraitsFromFingerprint(job.chip()));
    codegen::Config config = codegen::SafeDefaultConfig(space);
    for (const auto& [knob, value] : pins) {
      if (!config.count(knob)) continue;
      codegen::Config pinned = config;
      pinned[knob] = value;
      if (space.IsValid(pinned)) config = pinned;
    }
    *t->mutable_best_config() = codegen::ToProto(config);
    t->mutable_best()->set_status(v1::OK);
    t->mutable_best()->set_median_us(10);
    t->mutable_best()->add_samples_us(10);
  }
  return job;
}

int Shell(const std::string& cmd, std::string* output = nullptr) {
  const std::string log =
      ::testing::TempDir() + "/kiln-lib-cmd-" + std::to_string(getpid()) + ".log";
  const std::string full = "(" + cmd + ") > " + log + " 2>&1";
  const int rc = std::system(full.c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  if (output) *output = ss.str();
  std::remove(log.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string Read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A program of this test: the prepacked GEMM as kiln_kernels.h documents it (pack once, pass
// the packed weights), its result against a double-precision product computed here, and the
// kernel's parallel loops on the library's one pool.
constexpr char kApp[] = R"(#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kiln_kernels.h"
extern "C" long kiln_kernels_parallel_loops(void);
int main() {
  const int M = 8, N = 1024, K = 1024;
  float* A = (float*)malloc(sizeof(float) * M * K);
  float* B = (float*)malloc(sizeof(float) * K * N);
  float* C = (float*)malloc(sizeof(float) * M * N);
  unsigned s = 1;
  for (int i = 0; i < M * K; ++i) A[i] = (float)((s = s * 1103515245u + 12345u) >> 16) / 32768.0f - 1;
  for (int i = 0; i < K * N; ++i) B[i] = (float)((s = s * 1103515245u + 12345u) >> 16) / 32768.0f - 1;
  float* P = (float*)malloc(sizeof(float) * kiln_gemm_m8_n1024_k1024_prepack_floats(N, K));
  kiln_gemm_m8_n1024_k1024_prepack(N, K, B, P);
  kiln_gemm_m8_n1024_k1024(M, N, K, A, P, C);
  int bad = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) ref += (double)A[i * K + k] * B[k * N + j], mag += fabs((double)A[i * K + k] * B[k * N + j]);
      if (!(fabs(C[i * N + j] - ref) <= 1e-4 * mag)) ++bad;
    }
  printf("app: %d wrong elements, %ld parallel loops on the shared pool\n", bad, kiln_kernels_parallel_loops());
  return bad == 0 && kiln_kernels_parallel_loops() > 0 ? 0 : 1;
}
)";

TEST(ExportLibrary, EveryOperatorBuildsIntoOneProgramAndPassesItsSelfTest) {
  const v1::Job job = JobOf(
      {
          {"gemm", "M=8,N=1024,K=1024", "fp32", ""},
          {"gemm", "M=3,N=200,K=96", "fp32", "bias"},
          {"gemm", "M=2,N=128,K=64", "fp32", "residual"},
          {"gemm", "M=2,N=96,K=64", "bf16", "silu"},
          {"attention_decode", "B=1,H=8,KVH=2,D=64,L=100", "fp32", ""},
          {"attention_prefill", "B=1,H=4,KVH=2,D=32,S=9", "fp32", ""},
          {"rmsnorm", "T=2,D=256", "fp32", "residual"},
          {"rope", "T=3,H=4,D=64", "fp32", ""},
          {"softmax", "T=2,N=300", "fp32", ""},
          {"swiglu", "T=2,F=500", "fp32", ""},
          {"moe_router", "T=3,D=64,E=8,TOPK=2", "fp32", ""},
          {"moe_gemm", "T=2,E=4,TOPK=2,N=64,K=32", "fp32", ""},
          {"ssm_scan", "B=1,T=3,D=32,S=16", "fp32", ""},
          {"conv1d", "B=1,T=3,D=32,W=4", "fp32", ""},
          // prefill-sized: the register-blocked GEMM with its epilogue, on the operators' ABI
          {"gemm", "M=64,N=96,K=64", "fp32", "residual"},
      },
      {{"PREPACK", 1}, {"NT", 2}, {"NC", 64}});
  auto exported = server::ExportJobKernels(job);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_EQ(exported->kernels_size(), 15);
  // Unique entry names, derived from the workload.
  EXPECT_EQ(exported->kernels(0).entry(), "kiln_gemm_m8_n1024_k1024");
  EXPECT_EQ(exported->kernels(1).entry(), "kiln_gemm_m3_n200_k96_bias_op");
  EXPECT_EQ(exported->kernels(3).entry(), "kiln_gemm_m2_n96_k64_silu_bf16_op");
  EXPECT_EQ(exported->kernels(4).entry(), "kiln_attention_decode_b1_h8_kvh2_d64_l100_op");
  EXPECT_THAT(exported->kernels(0).source(), HasSubstr("#define kiln_gemm_prepack "));
  EXPECT_EQ(exported->kernels(14).entry(), "kiln_gemm_m64_n96_k64_residual_op");
  EXPECT_THAT(exported->kernels(14).source(), HasSubstr("#define kiln_op_prepack "));

  // Per process: another run of this test may share the temporary folder.
  const fs::path root =
      fs::path(::testing::TempDir()) / ("kiln-export-library-" + std::to_string(getpid()));
  fs::remove_all(root);
  const fs::path dir = root / "kernels";
  auto manifest_text = WriteExport(*exported, dir.string());
  ASSERT_TRUE(manifest_text.ok()) << manifest_text.status();
  for (const char* f : {"kiln_kernels.h", "kiln_kernels.cc", "kiln_runtime.cc", "kiln_parallel.h",
                        "kiln_selftest.h", "kiln_kernels_selftest.cc", "CMakeLists.txt",
                        "README.md", "manifest.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;

  // The manifest states each kernel's calling convention, the prepack step included.
  const auto manifest = nlohmann::ordered_json::parse(*manifest_text);
  const auto& gemm = manifest["kernels"][0]["calling"];
  EXPECT_EQ(gemm["function"], "kiln_gemm_m8_n1024_k1024");
  EXPECT_EQ(gemm["prepack"]["required"], true);
  EXPECT_THAT(gemm["prepack"]["function"].get<std::string>(),
              HasSubstr("kiln_gemm_m8_n1024_k1024_prepack(int N, int K"));
  EXPECT_EQ(gemm["threads"], 2);
  const auto& bias = manifest["kernels"][1]["calling"];
  EXPECT_EQ(bias["function"], "kiln_gemm_m3_n200_k96_bias");
  ASSERT_EQ(bias["operands"].size(), 4u);  // A, B, bias, C: the unused residual left out
  EXPECT_EQ(bias["operands"][1]["name"], "B");
  EXPECT_EQ(bias["operands"][1]["packed"], true);
  EXPECT_EQ(bias["operands"][2]["extent"], nlohmann::ordered_json::array({200}));
  EXPECT_TRUE(manifest["library"].contains("threads"));
  const std::string header = Read(dir / "kiln_kernels.h");
  EXPECT_THAT(header, HasSubstr("void kiln_gemm_m8_n1024_k1024(int M, int N, int K"));
  EXPECT_THAT(header, HasSubstr("long kiln_gemm_m3_n200_k96_bias_prepack_bytes(void);"));
  EXPECT_THAT(header, HasSubstr("PREPACK: kiln_gemm_m8_n1024_k1024 does NOT take B as it is"));
  EXPECT_THAT(header, HasSubstr("void kiln_attention_decode_b1_h8_kvh2_d64_l100(const float* q"));
  EXPECT_THAT(Read(dir / "README.md"), HasSubstr("kiln_gemm_m8_n1024_k1024_prepack(N, K, B, P)"));

  // The exported CMakeLists.txt builds one library and the self-test, which passes.
  const std::string build = (root / "build").string();
  std::string out;
  ASSERT_EQ(
      Shell("cmake -S " + dir.string() + " -B " + build + " && cmake --build " + build + " -j2",
            &out),
      0)
      << out;
  ASSERT_EQ(Shell(build + "/kiln_kernels_selftest", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("0 of 15 kernels failed"));
  EXPECT_THAT(out, HasSubstr("ok   kiln_gemm_m8_n1024_k1024\n"));

  // A program of its own links the library and gets the right product through the prepack step.
  const fs::path app = root / "app";
  fs::create_directories(app);
  std::ofstream(app / "app.cc") << kApp;
  std::ofstream(app / "CMakeLists.txt")
      << "cmake_minimum_required(VERSION 3.16)\nproject(app CXX)\nadd_subdirectory(" << dir.string()
      << " kernels)\nadd_executable(app app.cc)\n"
      << "target_link_libraries(app PRIVATE kiln_kernels)\n";
  const std::string app_build = (root / "app-build").string();
  ASSERT_EQ(Shell("cmake -S " + app.string() + " -B " + app_build + " && cmake --build " +
                      app_build + " -j2 --target app",
                  &out),
            0)
      << out;
  EXPECT_EQ(Shell(app_build + "/app", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("app: 0 wrong elements"));

  // The self-test fails when a kernel is called wrongly: the attention's scale doubled in its
  // typed wrapper.
  std::string wrappers = Read(dir / "kiln_kernels.cc");
  const std::string scale = "const float params[] = {scale};";
  const size_t at = wrappers.find(scale);
  ASSERT_NE(at, std::string::npos) << wrappers;
  wrappers.replace(at, scale.size(), "const float params[] = {2 * scale};");
  std::ofstream(dir / "kiln_kernels.cc") << wrappers;
  ASSERT_EQ(Shell("cmake --build " + build + " -j2", &out), 0) << out;
  EXPECT_EQ(Shell(build + "/kiln_kernels_selftest", &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("FAIL kiln_attention_decode_b1_h8_kvh2_d64_l100: out["));
  if (!std::getenv("KILN_KEEP_EXPORT")) fs::remove_all(root);  // kept to read the files
}

// Kernels of other dialects come without a library; a kernel file may not take a library
// file's name.
TEST(ExportLibrary, OnlyCpuKernelsGetALibraryAndItsNamesAreReserved) {
  v1::ExportKernelsResponse r;
  r.set_job_id("j-000000000043");
  auto* k = r.add_kernels();
  k->set_workload_key("gemm m=8 n=64 k=64 fp32");
  k->set_file_name("gemm_m8_n64_k64_fp32.cl");
  k->set_dialect("opencl");
  k->set_entry("kiln_gemm");
  k->set_source("// kernel\n");
  auto files = LibraryFiles(r);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_TRUE(files->empty());

  k->set_dialect("cpp");
  k->set_entry("kiln_gemm_m8_n64_k64");
  k->set_file_name("CMakeLists.txt");
  const fs::path out =
      fs::path(::testing::TempDir()) / ("kiln-export-reserved-" + std::to_string(getpid()));
  fs::remove_all(out);
  auto written = WriteExport(r, out.string());
  EXPECT_EQ(written.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(out));
  // A coordinator that sends the shared name: sources and manifest, no library, and why.
  k->set_file_name("gemm_m8_n64_k64_fp32.cc");
  k->set_entry("kiln_gemm");
  written = WriteExport(r, out.string());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(*written, HasSubstr("\"not_written\""));
  EXPECT_FALSE(fs::exists(out / "kiln_kernels.h"));
  fs::remove_all(out);
  // An entry point that is not an identifier never reaches the generated code.
  k->set_entry("kiln_x(); system(\"id\"); void kiln_y");
  auto bad = LibraryFiles(r);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("not a C identifier"));
}

}  // namespace
}  // namespace kiln::cli
