// Tests of the CPU operator templates' own starting configurations (codegen/cpu/op_templates.cc).
#include "codegen/cpu/op_templates.h"

#include <string>
#include <utility>

#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"

namespace kiln::codegen {
namespace {

ChipTraits Traits(int cores, int vector_floats) {
  ChipTraits t;
  t.cores = cores;
  t.vector_floats = vector_floats;
  t.vector_registers = vector_floats == 16 ? 32 : 16;
  return t;
}

v1::Workload Attention(const std::string& dims) {
  auto w = ParseWorkload("attention_decode", dims);
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

// Attention decode starts from all cores, the fewest context chunks that give every thread two
// items, each thread's last kv head in two chunks, the next block prefetched into L1 and full
// vectors; valid and renderable on both ISAs. One core: no tail chunks.
TEST(OpTemplatesTest, AttentionDecodeStartsFromFewChunksOnAllCores) {
  const std::pair<const char*, int64_t> cases[] = {
      {"B=1,H=32,KVH=8,D=128,L=512", 1},  // 8 kv heads: 4 items a thread on 2 cores
      {"B=1,H=32,KVH=8,D=128,L=4096", 1},
      {"B=1,H=8,KVH=1,D=64,L=4096", 4},  // one kv head: 4 chunks for 2 threads
  };
  for (const auto& [dims, split] : cases) {
    const v1::Workload w = Attention(dims);
    auto tmpl = FindTemplate(w, "cpu");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    for (int vw : {16, 8}) {
      const ChipTraits chip = Traits(2, vw);
      const std::vector<Config> starts = (*tmpl)->StartingConfigs(w, chip);
      ASSERT_EQ(starts.size(), 1u) << dims << " vw=" << vw;
      const Config& c = starts[0];
      EXPECT_TRUE((*tmpl)->Space(w, chip).IsValid(c)) << dims;
      EXPECT_TRUE((*tmpl)->Render(w, c, chip).ok()) << dims;
      EXPECT_EQ(c.at("NT"), 2) << dims;
      EXPECT_EQ(c.at("SPLIT"), split) << dims;
      EXPECT_EQ(c.at("TAIL"), 2) << dims;
      EXPECT_EQ(c.at("PF"), 1);
      EXPECT_EQ(c.at("PFL"), 1);
      EXPECT_EQ(c.count("VEC"), vw == 16 ? 1u : 0u);
    }
  }
  // Other operators have no starting configurations of their own.
  auto rms = ParseWorkload("rmsnorm", "T=1,D=4096");
  ASSERT_TRUE(rms.ok()) << rms.status();
  EXPECT_TRUE((*FindTemplate(*rms, "cpu"))->StartingConfigs(*rms, Traits(2, 16)).empty());
}

}  // namespace
}  // namespace kiln::codegen
