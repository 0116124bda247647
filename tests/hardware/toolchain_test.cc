// The shared compile path: the precompiled prelude of the CPU kernels' system headers.
#include "hardware/toolchain.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace kiln::hardware {
namespace {
namespace fs = std::filesystem;

// A kernel that uses the prelude's headers, as the CPU templates do.
constexpr char kKernel[] =
    "#include <math.h>\n"
    "#include <string.h>\n"
    "#if defined(__AVX2__)\n"
    "#include <immintrin.h>\n"
    "#endif\n"
    "extern \"C\" float kiln_test(const float* x, int n) {\n"
    "  float s = 0; for (int i = 0; i < n; ++i) s += expf(x[i]);\n"
    "  return s * NB; }\n";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ToolchainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-toolchain-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("KILN_CACHE_DIR", dir_.c_str(), 1);
    auto tc = FindToolchain();
    if (!tc.ok()) GTEST_SKIP() << tc.status();
    tc_ = *tc;
    if (tc_.version.find("clang") != std::string::npos)
      GTEST_SKIP() << "the prelude is precompiled for GCC only; this compiler is " << tc_.version;
  }
  void TearDown() override {
    unsetenv("KILN_CACHE_DIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // The same kernel compiled without a prelude, under the same name (the name is in the object)
  // in a cache of its own: the object to compare against.
  std::string PlainObject(const std::string& name) const {
    const std::string plain = dir_ + "/plain";
    setenv("KILN_CACHE_DIR", plain.c_str(), 1);
    auto built = CompileCached(tc_, Request(name, ""));
    setenv("KILN_CACHE_DIR", dir_.c_str(), 1);
    EXPECT_TRUE(built.ok()) << built.status();
    return built.ok() ? ReadAll(built->path) : "";
  }
  CompileRequest Request(const std::string& name, const std::string& prelude) const {
    CompileRequest req;
    req.source = kKernel;
    req.defines = {{"NB", 4}};
    req.name = name;
    req.prelude = prelude;
    return req;
  }
  std::string dir_;
  Toolchain tc_;
};

// The prelude is built once into the cache and used: with -Werror=invalid-pch a .gch that GCC
// found but could not use fails the compile. The object is byte for byte the one compiled
// without it.
TEST_F(ToolchainTest, PreludeIsPrecompiledUsedAndChangesNothing) {
  tc_.flags.push_back("-Werror=invalid-pch");
  auto with = CompileCached(tc_, Request("with", "prelude-a"));
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_TRUE(fs::exists(dir_ + "/kernels/prelude-a.h.gch"));
  EXPECT_EQ(ReadAll(dir_ + "/kernels/prelude-a.h"), PreludeSource());
  EXPECT_TRUE(ReadAll(with->path) == PlainObject("with")) << "the objects differ";
}

// A precompiled header this compiler cannot use (another compiler's, a corrupt file) costs
// time, not the compile: GCC reads the header's text instead.
TEST_F(ToolchainTest, AnUnusablePrecompiledPreludeFallsBackToTheText) {
  fs::create_directories(dir_ + "/kernels");
  std::ofstream(dir_ + "/kernels/prelude-b.h") << PreludeSource();
  std::ofstream(dir_ + "/kernels/prelude-b.h.gch") << "not a precompiled header";
  auto built = CompileCached(tc_, Request("stale", "prelude-b"));
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(ReadAll(built->path) == PlainObject("stale")) << "the objects differ";
}

// A prelude that breaks the compile (here a header the compiler reads as text, since its .gch
// is unusable, and that fails) costs a second compile, never the kernel: the kernel compiles
// without it, and later compiles in this process skip it.
TEST_F(ToolchainTest, ACompileThePreludeBreaksIsDoneWithoutIt) {
  fs::create_directories(dir_ + "/kernels");
  std::ofstream(dir_ + "/kernels/prelude-e.h") << "#error a broken prelude\n";
  std::ofstream(dir_ + "/kernels/prelude-e.h.gch") << "not a precompiled header";
  for (const char* name : {"broken-prelude-1", "broken-prelude-2"}) {
    auto built = CompileCached(tc_, Request(name, "prelude-e"));
    ASSERT_TRUE(built.ok()) << name << ": " << built.status();
    EXPECT_TRUE(ReadAll(built->path) == PlainObject(name)) << name << ": the objects differ";
  }
}

// The cache may be deleted at any time, prelude and all: the next compile builds it again.
TEST_F(ToolchainTest, ACacheDeletedMeanwhileIsRebuilt) {
  ASSERT_TRUE(CompileCached(tc_, Request("first", "prelude-d")).ok());
  std::error_code ec;
  fs::remove_all(dir_ + "/kernels", ec);
  ASSERT_FALSE(ec) << ec.message();
  auto again = CompileCached(tc_, Request("second", "prelude-d"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(fs::exists(dir_ + "/kernels/prelude-d.h.gch"));
}

// A compile error still names the source's problem with the prelude in front of it.
TEST_F(ToolchainTest, CompileErrorsStillReachTheCaller) {
  CompileRequest req = Request("broken", "prelude-c");
  req.source = "extern \"C\" void kiln_test() { undeclared_name(); }\n";
  auto built = CompileCached(tc_, req);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(built.status().message().find("undeclared_name"), std::string::npos) << built.status();
}

}  // namespace
}  // namespace kiln::hardware
