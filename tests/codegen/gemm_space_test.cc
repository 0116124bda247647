// The CPU GEMM template's knob space, rendering, hashing and template lookup.
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/gemm_template.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;

ChipTraits Avx512Traits() {
  ChipTraits t;
  t.vector_floats = 16;
  t.vector_registers = 32;
  t.cores = 2;
  t.l1d_bytes = 48 << 10;
  t.l2_bytes = 1 << 20;
  t.l3_bytes = 32 << 20;
  return t;
}

ChipTraits Avx2Traits() {
  ChipTraits t;
  t.vector_floats = 8;
  t.vector_registers = 16;
  t.cores = 8;
  t.l2_bytes = 256 << 10;
  t.l3_bytes = 16 << 20;
  return t;
}

v1::Workload Gemm(const char* shape) { return *ParseWorkload("gemm", shape); }

Config Good() {
  return {{"MR", 8},     {"NR", 32},        {"MC", 16}, {"KC", 256},    {"NC", 512}, {"PACK", 1},
          {"UNROLL", 4}, {"LOOP_ORDER", 0}, {"NT", 2},  {"PREPACK", 0}, {"PF", 0}};
}

const KernelTemplate& Template() {
  static auto t = NewCpuGemmTemplate();
  return *t;
}

TEST(GemmSpaceTest, DecodeShapeHasThousandsOfValidPoints) {
  for (const auto& [name, traits] : {std::pair{"avx512", Avx512Traits()}, {"avx2", Avx2Traits()}}) {
    for (const char* shape : {"M=8,N=4096,K=4096", "M=1024,N=1024,K=1024", "M=1,N=4096,K=14336"}) {
      KnobSpace s = Template().Space(Gemm(shape), traits);
      auto start = std::chrono::steady_clock::now();
      auto valid = s.EnumerateValid(1000);  // the first 1000 are enough for the assertion
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      std::printf("%-7s %-22s cartesian %8llu  first %zu valid found in %.0f ms\n", name, shape,
                  static_cast<unsigned long long>(s.CartesianSize()), valid.size(), ms);
      EXPECT_GE(valid.size(), 1000u) << name << " " << shape;
    }
  }
}

TEST(GemmSpaceTest, EveryValidConfigObeysTheRules) {
  const ChipTraits t = Avx512Traits();
  const int64_t M = 8, N = 4096;
  for (const Config& c : Template().Space(Gemm("M=8,N=4096,K=4096"), t).EnumerateValid()) {
    ASSERT_EQ(c.at("NR") % t.vector_floats, 0);
    ASSERT_LE(c.at("MR") * c.at("NR") / t.vector_floats, t.vector_registers - 4);
    ASSERT_GE(c.at("MC"), c.at("MR"));
    ASSERT_LE(c.at("MR"), M);
    ASSERT_EQ(c.at("NC") % c.at("NR"), 0);
    ASSERT_LE(c.at("NT"), t.cores);
    ASSERT_LE(c.at("NT"), (N + c.at("NC") - 1) / c.at("NC"));  // M fits one MC block
    ASSERT_LE((c.at("MR") + c.at("NR")) * c.at("KC") * 4, t.l2_bytes / 2);
  }
}

TEST(GemmSpaceTest, TinyShapesStillHaveValidPoints) {
  for (const char* shape : {"M=1,N=1,K=1", "M=7,N=13,K=5", "M=17,N=33,K=65"})
    EXPECT_FALSE(Template().Space(Gemm(shape), Avx512Traits()).EnumerateValid(1).empty()) << shape;
}

TEST(GemmSpaceTest, RenderProducesTheTemplateWithDefines) {
  auto k = Template().Render(Gemm("M=8,N=4096,K=4096"), Good(), Avx512Traits());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->dialect, "cpp");
  EXPECT_EQ(k->entry, "kiln_gemm");
  EXPECT_EQ(k->source, WithCpuRuntime("gemm.cc", CpuGemmSource()));  // the runtime, then gemm
  EXPECT_THAT(k->source, HasSubstr("kiln_rt::ParallelFor(tiles, NT"));
  EXPECT_THAT(k->source, HasSubstr("extern \"C\" void kiln_gemm(int M, int N, int K"));
  Config defines(k->defines.begin(), k->defines.end());
  EXPECT_EQ(defines.at("VW"), 16);
  for (const auto& [name, value] : Good()) EXPECT_EQ(defines.at(name), value) << name;
}

TEST(GemmSpaceTest, RenderNamesTheBrokenRule) {
  const v1::Workload w = Gemm("M=8,N=4096,K=4096");
  struct Case {
    const char* shape;
    const char* knob;
    int64_t value;
    const char* expect;
  } cases[] = {
      {"M=8,N=4096,K=4096", "NR", 8, "NR % 16 == 0"},
      {"M=8,N=4096,K=4096", "NR", 64, "MR*NR/16 <= 28"},
      {"M=8,N=4096,K=4096", "MR", 7, "knob MR=7 is not in its domain"},
      {"M=8,N=4096,K=4096", "NT", 4, "knob NT=4"},
      {"M=8,N=4096,K=4096", "MC", 64, "MC <= M=8"},
      {"M=8,N=4096,K=4096", "NC", 4096, "NT <= tiles"},
      {"M=8,N=4096,K=300", "KC", 1024, "KC <= K=300"},
      {"M=8,N=4096,K=4096", "PF", 1024, "PF == 0 unless PREPACK == 1"},
      {"M=8,N=4096,K=4096", "PF", 100, "knob PF=100 is not in its domain"},
      {"M=8,N=4096,K=4096", "PFN", 1, "PFN == 0 unless PREPACK == 1 and LOOP_ORDER == 0"},
      {"M=8,N=4096,K=4096", "PFN", 3, "knob PFN=3 is not in its domain"},
  };
  for (const auto& c : cases) {
    Config config = Good();
    config[c.knob] = c.value;
    auto k = Template().Render(Gemm(c.shape), config, Avx512Traits());
    ASSERT_FALSE(k.ok()) << c.knob << "=" << c.value;
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(k.status().message(), HasSubstr(c.expect)) << c.knob << "=" << c.value;
  }
  Config unknown = Good();
  unknown["BOGUS"] = 1;
  EXPECT_THAT(Template().Render(w, unknown, Avx512Traits()).status().message(),
              HasSubstr("unknown knob BOGUS"));
  Config both_prefetches = Good();
  both_prefetches["PREPACK"] = 1, both_prefetches["PF"] = 1024, both_prefetches["PFN"] = 1;
  EXPECT_THAT(Template().Render(w, both_prefetches, Avx512Traits()).status().message(),
              HasSubstr("PF == 0 when PFN > 0"));
  Config missing = Good();
  missing.erase("PACK");
  EXPECT_THAT(Template().Render(w, missing, Avx512Traits()).status().message(),
              HasSubstr("knob PACK has no value"));
}

TEST(GemmSpaceTest, ConfigsRecordedBeforeThePrefetchKnobStillRender) {
  Config old = Good();
  old.erase("PF");
  auto k = Template().Render(Gemm("M=8,N=4096,K=4096"), old, Avx512Traits());
  ASSERT_TRUE(k.ok()) << k.status();
  Config defines(k->defines.begin(), k->defines.end());
  EXPECT_EQ(defines.at("PF"), 0);
  old["PREPACK"] = 1;
  old["PF"] = 2048;
  k = Template().Render(Gemm("M=8,N=4096,K=4096"), old, Avx512Traits());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(Config(k->defines.begin(), k->defines.end()).at("PF"), 2048);
}

// The template's own first guesses fit every shape of the decode suite (and a tiny one) on both
// ISAs (and on 4-lane vectors, where an 8-row tile leaves no room): valid, the register tile no
// taller than M allows, packed weights, all the threads that have a tile to work on.
TEST(GemmSpaceTest, StartingConfigsAreValidOnEveryShape) {
  ChipTraits four_lanes = Avx2Traits();
  four_lanes.vector_floats = 4;
  for (const auto& [name, traits] :
       {std::pair{"avx512", Avx512Traits()}, {"avx2", Avx2Traits()}, {"4-lane", four_lanes}}) {
    for (const char* nk :
         {"N=4096,K=4096", "N=14336,K=4096", "N=4096,K=14336", "N=1024,K=4096", "N=64,K=64"}) {
      for (int m : {1, 2, 4, 8, 16, 32, 64, 128, 512}) {
        const std::string shape = absl::StrCat("M=", m, ",", nk);
        const v1::Workload w = Gemm(shape.c_str());
        const KnobSpace space = Template().Space(w, traits);
        std::vector<Config> starts = Template().StartingConfigs(w, traits);
        ASSERT_FALSE(starts.empty()) << name << " " << shape;
        EXPECT_LE(starts.size(), 4u);
        for (const Config& c : starts) {
          EXPECT_TRUE(space.IsValid(c)) << name << " " << shape << ": " << space.Check(c);
          EXPECT_LE(c.at("MR"), std::max<int64_t>(m, 1)) << name << " " << shape;
          EXPECT_EQ(c.at("PREPACK"), 1);
          EXPECT_TRUE(Template().Render(w, c, traits).ok());
        }
        if (std::string(nk) != "N=64,K=64") {
          EXPECT_EQ(starts[0].at("NT"), traits.cores) << name << " " << shape;
          // Every thread busy: the tiles, claimed one at a time, split within 5% of evenly
          // (where whole register tiles can split N evenly: not 48-column tiles on N=1024).
          for (const Config& c : starts) {
            const int64_t N = w.dims().at("N"), mc = c.at("MC"), nc = c.at("NC"), nt = c.at("NT");
            if (N % c.at("NR") != 0) continue;
            const int64_t tiles = ((m + mc - 1) / mc) * ((N + nc - 1) / nc);
            const double work =
                static_cast<double>(m) / std::min<int64_t>(mc, m) * N / std::min<int64_t>(nc, N);
            EXPECT_GE(work / (nt * ((tiles + nt - 1) / nt)), 0.95)
                << name << " " << shape << ": " << ConfigKey(c);
          }
        }
      }
    }
  }
  // Decode rows: a tile as tall as M (up to 8); batches: the wide 6-row tile.
  const std::vector<Config> decode =
      Template().StartingConfigs(Gemm("M=4,N=4096,K=4096"), Avx512Traits());
  ASSERT_EQ(decode.size(), 2u);
  EXPECT_EQ(decode[0].at("MR"), 4);
  // Both prefetch schemes, since which wins depends on the chip.
  EXPECT_EQ(decode[0].at("PFN"), 1);
  EXPECT_EQ(decode[1].at("MR"), 4);
  EXPECT_EQ(decode[1].at("NR"), 64);
  EXPECT_EQ(decode[1].at("PF"), 4096);
  EXPECT_EQ(decode[1].at("PFN"), 0);
  // N=14336 on two cores: 14 column blocks of 1024, not 7 of 2048 or 10 of 1536 (one a third).
  for (const Config& c : Template().StartingConfigs(Gemm("M=16,N=14336,K=4096"), Avx512Traits()))
    if (14336 % c.at("NR") == 0) {
      EXPECT_EQ(c.at("NC"), 1024) << ConfigKey(c);
    }
  const std::vector<Config> batch =
      Template().StartingConfigs(Gemm("M=512,N=4096,K=4096"), Avx512Traits());
  ASSERT_FALSE(batch.empty());
  EXPECT_EQ(batch[0].at("NR"), 64);
  EXPECT_EQ(batch[0].at("PFN"), 1);  // the next weight micro-panel into L2
  EXPECT_EQ(batch[0].at("PF"), 0);
  EXPECT_EQ(batch[0].at("MR"), 6);
  // With 16 registers a 5-row tile first (the 6-row one spills), then the 6-row one.
  const std::vector<Config> avx2 =
      Template().StartingConfigs(Gemm("M=512,N=4096,K=4096"), Avx2Traits());
  ASSERT_EQ(avx2.size(), 2u);
  EXPECT_EQ(avx2[0].at("MR"), 5);
  EXPECT_EQ(avx2[0].at("NR"), 16);
  EXPECT_EQ(avx2[1].at("MR"), 6);
}

TEST(GemmSpaceTest, Avx2RulesDiffer) {
  Config c = Good();  // 8 x 32 on 8 lanes = 32 accumulators: too many for 16 registers
  auto k = Template().Render(Gemm("M=8,N=4096,K=4096"), c, Avx2Traits());
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr("MR*NR/8 <= 12"));
  c["MR"] = 3;
  EXPECT_TRUE(Template().Render(Gemm("M=8,N=4096,K=4096"), c, Avx2Traits()).ok());
}

TEST(KernelTest, HashIsStableAndCoversDefines) {
  auto a = Template().Render(Gemm("M=8,N=4096,K=4096"), Good(), Avx512Traits());
  auto b = Template().Render(Gemm("M=8,N=4096,K=4096"), Good(), Avx512Traits());
  Config other = Good();
  other["UNROLL"] = 8;
  auto c = Template().Render(Gemm("M=8,N=4096,K=4096"), other, Avx512Traits());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->Hash().size(), 16u);
  EXPECT_EQ(a->Hash().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(a->Hash(), b->Hash());
  EXPECT_NE(a->Hash(), c->Hash());
  Kernel k{"cpp", "f", "int x;", {{"A", 1}}};
  EXPECT_EQ(k.Hash(), Kernel({"cpp", "f", "int x;", {{"A", 1}}}).Hash());
  EXPECT_NE(k.Hash(), Kernel({"opencl", "f", "int x;", {{"A", 1}}}).Hash());
}

TEST(FindTemplateTest, LooksUpByOpAndChipKind) {
  auto t = FindTemplate(Gemm("M=8,N=64,K=64"), "cpu");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), "cpu-gemm");
  EXPECT_EQ(FindTemplate(Gemm("M=8,N=64,K=64"), "quantum").status().code(),
            absl::StatusCode::kUnimplemented);
  v1::Workload bias = Gemm("M=8,N=64,K=64");
  bias.set_epilogue("bias");
  auto fused = FindTemplate(bias, "cpu");
  ASSERT_TRUE(fused.ok()) << fused.status();
  EXPECT_EQ((*fused)->name(), "cpu-gemm-epilogue");  // few rows: the weights streamed once
  v1::Workload prefill = Gemm("M=64,N=64,K=64");
  prefill.set_epilogue("residual");
  auto blocked = FindTemplate(prefill, "cpu");
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  EXPECT_EQ((*blocked)->name(), "cpu-gemm");  // prefill: register tiles, then the epilogue
  v1::ChipFingerprint avx2;
  avx2.set_kind("cpu");
  avx2.add_isa_features("avx2");
  avx2.set_cores(2);
  auto kernel = (*blocked)->Render(
      prefill, (*blocked)->StartingConfigs(prefill, TraitsFromFingerprint(avx2)).at(0),
      TraitsFromFingerprint(avx2));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->entry, "kiln_op");  // the operators' ABI: bias and residual arguments
  EXPECT_THAT(kernel->defines, ::testing::Contains(std::pair<std::string, int64_t>("EPI", 4)));
  prefill.set_epilogue("softplus");
  EXPECT_FALSE((*blocked)->Supports(prefill));
  v1::Workload norm;
  norm.set_op(v1::RMSNORM);  // no dims: no template supports an invalid workload
  EXPECT_EQ(FindTemplate(norm, "cpu").status().code(), absl::StatusCode::kNotFound);
  auto wide = FindTemplate(*ParseWorkload("rope", "T=1,H=2,D=2048"), "cpu");
  EXPECT_EQ(wide.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(wide.status().message().find("cpu-rope"), std::string::npos) << wide.status();
}

TEST(FindTemplateTest, SpaceForUsesTheFingerprint) {
  v1::ChipFingerprint chip;
  chip.set_kind("cpu");
  chip.add_isa_features("avx2");
  chip.set_cores(4);
  auto s = SpaceFor(Gemm("M=8,N=4096,K=4096"), chip);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->FindKnob("NT")->values, ::testing::ElementsAre(1, 2, 4));
  bool has_rule = false;
  for (const auto& c : s->constraints()) has_rule |= c.rule.find("NR % 8 == 0") == 0;
  EXPECT_TRUE(has_rule);
  chip.set_kind("gpu");
  EXPECT_FALSE(SpaceFor(Gemm("M=8,N=4096,K=4096"), chip).ok());
}

}  // namespace
}  // namespace kiln::codegen
