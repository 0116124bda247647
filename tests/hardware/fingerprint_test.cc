// Parsing and labelling parts of the CPU fingerprint.
#include "hardware/cpu/fingerprint.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "codegen/knob_space.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::hardware {
namespace {

TEST(FingerprintTest, KeepsOnlyRelevantIsaFlags) {
  EXPECT_THAT(RelevantIsaFeatures("fpu vme sse4_2 avx avx2 fma avx512f avx512bw avx512_bf16 "
                                  "amx_tile amx_bf16 rdrand avx2"),
              ::testing::ElementsAre("amx_bf16", "amx_tile", "avx", "avx2", "avx512_bf16",
                                     "avx512bw", "avx512f", "fma", "sse4_2"));
  EXPECT_THAT(RelevantIsaFeatures("fp asimd evtstrm sve sve2 i8mm"),
              ::testing::ElementsAre("asimd", "i8mm", "sve", "sve2"));
}

TEST(FingerprintTest, ChipTypeLabels) {
  EXPECT_EQ(CpuChipType("x86_64", {"avx2", "avx512f"}), "cpu-x86_64-avx512");
  EXPECT_EQ(CpuChipType("x86_64", {"avx", "avx2", "fma"}), "cpu-x86_64-avx2");
  EXPECT_EQ(CpuChipType("x86_64", {"sse4_2"}), "cpu-x86_64");
  EXPECT_EQ(CpuChipType("aarch64", {"asimd", "sve"}), "cpu-aarch64");
}

TEST(FingerprintTest, CapsAbsurdL3) {
  EXPECT_EQ(codegen::SaneL3Bytes(512LL << 20, 2),
            32LL << 20);  // a 2-vCPU VM reporting the host's L3
  EXPECT_EQ(codegen::SaneL3Bytes(32LL << 20, 2), 32LL << 20);
  EXPECT_EQ(codegen::SaneL3Bytes(512LL << 20, 128), 512LL << 20);  // a real 128-core part
  EXPECT_EQ(codegen::SaneL3Bytes(0, 4), 0);
}

// The peaks are measured once per boot and kept beside the probe; a damaged or forged file is
// measured again, and `fresh` always measures.
TEST(FingerprintTest, PeaksAreMeasuredOncePerBootAndForgedFiguresAreNotBelieved) {
  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/kiln-fingerprint-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      unsetenv("KILN_CACHE_DIR");
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto tc = FindToolchain();
  if (!tc.ok()) GTEST_SKIP() << "no compiler for the probe: " << tc.status();
  if (!fs::exists("/proc/sys/kernel/random/boot_id")) GTEST_SKIP() << "no boot id to key on";

  const v1::ChipFingerprint first = ProbeCpuFingerprint(&*tc);
  ASSERT_GT(first.peak_gflops(), 0);
  ASSERT_GT(first.read_gbytes_per_s(), 0);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir + "/kernels"))
    if (e.path().extension() == ".peaks") files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  auto write = [&](const std::string& text) { std::ofstream(files[0]) << text; };

  // The kept figures are what a later probe reports (these ones no probe would measure).
  write("peak_gflops 12345\npeak_int8_gops 45678\nread_gbytes_per_s 678\n");
  v1::ChipFingerprint again = ProbeCpuFingerprint(&*tc);
  EXPECT_EQ(again.peak_gflops(), 12345);
  EXPECT_EQ(again.peak_int8_gops(), 45678);
  EXPECT_EQ(again.peak_bf16_gflops(), 0);
  EXPECT_EQ(again.read_gbytes_per_s(), 678);
  EXPECT_EQ(again.model(), first.model());

  // Damaged or implausible figures are measured again, and the measurement replaces them.
  for (const char* bad :
       {"", "peak_gflops nan\nread_gbytes_per_s 20\n", "peak_gflops -5\nread_gbytes_per_s 20\n",
        "peak_gflops 100\n", "peak_gflops 1e300\nread_gbytes_per_s 20\n"}) {
    write(bad);
    v1::ChipFingerprint measured = ProbeCpuFingerprint(&*tc);
    EXPECT_GT(measured.peak_gflops(), 0) << "cache: " << bad;
    EXPECT_LT(measured.peak_gflops(), 1e8) << "cache: " << bad;
    EXPECT_GT(measured.read_gbytes_per_s(), 0) << "cache: " << bad;
  }

  // `fresh` measures whatever is kept, and what is kept is the higher of each figure: a low
  // figure (a probe on a busy machine) is replaced, a higher one stays.
  write("peak_gflops 0.5\nread_gbytes_per_s 0.01\n");
  const v1::ChipFingerprint fresh = ProbeCpuFingerprint(&*tc, /*fresh=*/true);
  EXPECT_GT(fresh.peak_gflops(), 0.5);
  EXPECT_EQ(ProbeCpuFingerprint(&*tc).peak_gflops(), fresh.peak_gflops());
  EXPECT_EQ(ProbeCpuFingerprint(&*tc).read_gbytes_per_s(), fresh.read_gbytes_per_s());
  write("peak_gflops 12345\nread_gbytes_per_s 0.01\n");
  EXPECT_NE(ProbeCpuFingerprint(&*tc, /*fresh=*/true).peak_gflops(), 12345);
  const v1::ChipFingerprint kept = ProbeCpuFingerprint(&*tc);
  EXPECT_EQ(kept.peak_gflops(), 12345);
  EXPECT_GT(kept.read_gbytes_per_s(), 0.01);
}

}  // namespace
}  // namespace kiln::hardware
