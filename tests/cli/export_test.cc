// `kiln export` writes only plain base names inside --out, whatever file names the server sends.
#include "cli/export.h"

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

v1::ExportKernelsResponse Response(const std::string& file_name) {
  v1::ExportKernelsResponse r;
  r.set_job_id("j-000000000001");
  auto* k = r.add_kernels();
  k->set_workload_key("gemm m=8 n=64 k=64 fp32");
  k->set_file_name(file_name);
  k->set_source("// kernel\n");
  k->set_dialect("cpp");
  return r;
}

TEST(ExportFileNames, PathsAndOddNamesAreRefusedAndNothingIsWritten) {
  const fs::path root = fs::path(::testing::TempDir()) / "kiln-export-names";
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string out = (root / "out").string();
  const std::string bad[] = {"",
                             "/tmp/kiln-export-escape.cc",
                             "../escape.cc",
                             "sub/../../escape.cc",
                             "a/b.cc",
                             "..",
                             ".hidden.cc",
                             "x..cc",
                             "a\\b.cc",
                             std::string("a\0b.cc", 6),
                             "a\nb.cc",
                             "manifest.json",
                             std::string(300, 'a')};
  for (const std::string& name : bad) {
    auto s = WriteExport(Response(name), out);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("nothing was written")) << name;
    EXPECT_LT(s.status().message().size(), 300u);
    EXPECT_FALSE(fs::exists(out)) << name;
  }
  EXPECT_FALSE(fs::exists(root / "escape.cc"));
  EXPECT_FALSE(fs::exists("/tmp/kiln-export-escape.cc"));
  // The same name twice would overwrite one kernel with another.
  auto twice = Response("k.cc");
  *twice.add_kernels() = twice.kernels(0);
  EXPECT_EQ(WriteExport(twice, out).status().code(), absl::StatusCode::kInvalidArgument);
  // A plain name is written.
  ASSERT_TRUE(WriteExport(Response("gemm_m8_n64_k64_fp32.cc"), out).ok());
  EXPECT_TRUE(fs::exists(fs::path(out) / "gemm_m8_n64_k64_fp32.cc"));
  fs::remove_all(root);
}

}  // namespace
}  // namespace kiln::cli
