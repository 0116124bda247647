// Parsing and labelling parts of the CPU fingerprint.
#include "hardware/cpu/fingerprint.h"

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

}  // namespace
}  // namespace kiln::hardware
