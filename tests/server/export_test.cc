// ExportKernels: a job's best kernels as self-contained sources that build without Kiln.
#include "server/export.h"

#include <dlfcn.h>

#include <cstdlib>
#include <fstream>

#include "codegen/cpu/op_templates.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

// A finished GEMM job on a plain x86-64 CPU (no vector ISA in the fingerprint, so the kernel
// builds anywhere), its best the template's safe default; a second task has no best yet.
v1::Job GemmJob() {
  v1::Job job;
  job.set_id("j-000000000001");
  job.mutable_chip()->set_kind("cpu");
  job.mutable_chip()->set_chip_type("cpu-x86_64");
  job.mutable_chip()->set_model("Test CPU");
  job.mutable_chip()->set_cores(2);
  auto w = codegen::ParseWorkload("gemm", "M=8,N=64,K=32", "");
  v1::TaskResult* t = job.add_tasks();
  *t->mutable_workload() = *w;
  t->set_workload_key(codegen::WorkloadKey(*w));
  auto tmpl = codegen::FindTemplate(*w, "cpu");
  const auto space = (*tmpl)->Space(*w, codegen::TraitsFromFingerprint(job.chip()));
  *t->mutable_best_config() = codegen::ToProto(codegen::SafeDefaultConfig(space));
  t->mutable_best()->set_status(v1::OK);
  t->mutable_best()->set_median_us(12.5);
  t->mutable_best()->add_samples_us(12.5);
  auto r = codegen::ParseWorkload("rmsnorm", "T=1,D=64", "");
  *job.add_tasks()->mutable_workload() = *r;
  return job;
}

TEST(ExportTest, BestKernelsBuildOnTheirOwn) {
  const v1::Job job = GemmJob();
  auto out = ExportJobKernels(job);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->job_id(), job.id());
  EXPECT_EQ(out->chip().model(), "Test CPU");
  ASSERT_EQ(out->kernels_size(), 1);  // the task without a best is left out
  const auto& k = out->kernels(0);
  EXPECT_EQ(k.workload_key(), "gemm m=8 n=64 k=32 fp32");
  EXPECT_EQ(k.file_name(), "gemm_m8_n64_k32_fp32.cc");
  EXPECT_EQ(k.dialect(), "cpp");
  // A name of its own, so that several kernels link into one program; the template's own name
  // (which the worker loads) is renamed in the source.
  EXPECT_EQ(k.entry(), "kiln_gemm_m8_n64_k32");
  EXPECT_THAT(k.source(), HasSubstr("\n#define kiln_gemm kiln_gemm_m8_n64_k32\n"));
  EXPECT_DOUBLE_EQ(k.best().median_us(), 12.5);
  EXPECT_THAT(k.source(),
              HasSubstr("// Kiln kernel for gemm m=8 n=64 k=32 fp32, exported from job"));
  for (const auto& [name, value] : k.config().knobs())
    EXPECT_THAT(k.source(), HasSubstr("#define " + name + " " + std::to_string(value) + "\n"));
  // The file alone builds into a shared object exporting the entry, as its header says.
  const std::string dir = ::testing::TempDir();
  const std::string src = dir + "/" + k.file_name(), so = dir + "/exported-gemm.so";
  std::ofstream(src) << k.source();
  const std::string cmd =
      "c++ -O3 -march=native -fopenmp -shared -fPIC -o " + so + " " + src + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_NE(dlsym(h, k.entry().c_str()), nullptr) << k.entry();
  dlclose(h);
}

TEST(ExportTest, NothingToExportIsAPreconditionNamingWhy) {
  v1::Job job = GemmJob();
  job.mutable_tasks(0)->clear_best();
  auto none = ExportJobKernels(job);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("has no verified kernel yet"));
  job.clear_chip();
  auto unbound = ExportJobKernels(job);
  EXPECT_EQ(unbound.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unbound.status().message(), HasSubstr("has not run on any worker yet"));
}

// Strings a worker or a job chose (the chip's model and type, the workload key) cannot leave
// the comment they are written into: no newline, no "*/", no line-splicing backslash.
TEST(ExportTest, StringsInTheSourceCannotLeaveTheirComment) {
  v1::Job job = GemmJob();
  job.mutable_chip()->set_model("x\n__attribute__((constructor)) void f(){}");
  job.mutable_chip()->set_chip_type("cpu-x86_64 */ int evil; /* \\");
  job.mutable_tasks(0)->set_workload_key("gemm\r\n#include </etc/passwd>\\");
  auto out = ExportJobKernels(job);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::string& src = out->kernels(0).source();
  const std::string first_lines = src.substr(0, src.find("#define"));
  size_t start = 0;
  int lines = 0;
  for (size_t nl; (nl = first_lines.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = first_lines.substr(start, nl - start);
    ++lines;
    EXPECT_TRUE(line.empty() || line.rfind("// ", 0) == 0)
        << "a header line leaves the comment: " << line;
    EXPECT_EQ(line.find('\\'), std::string::npos) << line;
    EXPECT_EQ(line.find("*/"), std::string::npos) << line;
    EXPECT_EQ(line.find('\r'), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 4);  // the same four header lines as for an ordinary chip
  EXPECT_THAT(src, HasSubstr("(x%0A__attribute__((constructor)) void f(){}, 2 cores)"));
  EXPECT_THAT(src, HasSubstr("// Kiln kernel for gemm%0D%0A#include </etc/passwd>%5C,"));
  // The file names stay plain whatever the key holds.
  EXPECT_EQ(out->kernels(0).file_name(), "gemminclude_etcpasswd.cc");
  // ...and the source still builds.
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/escaped-export.cc", so = dir + "/escaped-export.so";
  std::ofstream(file) << src;
  const std::string cmd = "c++ -O1 -fopenmp -shared -fPIC -o " + so + " " + file + " 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace kiln::server
