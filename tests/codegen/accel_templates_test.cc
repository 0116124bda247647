// The accelerator templates (opencl, cuda, sim): registry, knob spaces with device limits as
// constraints, default configurations valid on every shape, rendering with launch geometry.
#include <string>
#include <vector>

#include "codegen/device_template.h"
#include "codegen/sim/sim_templates.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;

v1::Workload W(const char* op, const char* shape) { return *ParseWorkload(op, shape); }

// Shapes from decode (M=1) to prefill sizes, ragged and tiny ones included.
std::vector<v1::Workload> Shapes() {
  std::vector<v1::Workload> out;
  for (const char* s : {"M=1,N=4096,K=4096", "M=64,N=4096,K=4096", "M=5,N=7,K=3", "M=1,N=1,K=1",
                        "M=33,N=100,K=17", "M=512,N=11008,K=4096"})
    out.push_back(W("gemm", s));
  for (const char* s : {"T=1,D=4096", "T=7,D=3", "T=512,D=8192"}) out.push_back(W("rmsnorm", s));
  for (const char* s : {"T=1,N=32000", "T=5,N=7", "T=1,N=1"}) out.push_back(W("softmax", s));
  for (const char* s : {"T=1,F=11008", "T=3,F=5"}) out.push_back(W("swiglu", s));
  for (const char* s :
       {"B=1,H=32,KVH=8,D=128,L=4096", "B=4,H=4,KVH=1,D=80,L=7", "B=1,H=1,KVH=1,D=1,L=1"})
    out.push_back(W("attention_decode", s));
  return out;
}

// A CPU-like device (PoCL, AVX-512), a GPU and a small embedded GPU.
std::vector<ChipTraits> Chips() {
  ChipTraits cpu;
  cpu.vector_floats = 16;
  cpu.local_mem_bytes = 512 << 10;
  cpu.max_work_group_size = 4096;
  ChipTraits gpu;
  gpu.vector_floats = 4;
  gpu.local_mem_bytes = 48 << 10;
  gpu.max_work_group_size = 1024;
  ChipTraits small;
  small.vector_floats = 4;
  small.local_mem_bytes = 16 << 10;
  small.max_work_group_size = 256;
  return {cpu, gpu, small};
}

TEST(AccelTemplatesTest, EveryOperatorHasOpenClAndCudaTemplates) {
  for (const char* kind : {"opencl", "cuda"})
    for (const v1::Workload& w : Shapes()) {
      auto t = FindDeviceTemplate(w, kind);
      ASSERT_TRUE(t.ok()) << kind << " " << WorkloadKey(w) << ": " << t.status();
      EXPECT_THAT((*t)->name(), ::testing::StartsWith(kind));
    }
  EXPECT_TRUE(FindDeviceTemplate(W("gemm", "M=8,N=64,K=64"), "sim").ok());
  EXPECT_EQ(FindTemplate(W("rmsnorm", "T=1,D=64"), "sim").status().code(),
            absl::StatusCode::kNotFound);
  v1::Workload bf16 = *ParseWorkload("gemm", "M=1,N=64,K=64", "bf16");
  EXPECT_FALSE(FindTemplate(bf16, "opencl").ok()) << "fp32 only";
}

TEST(AccelTemplatesTest, DefaultConfigurationsAreValidEverywhere) {
  for (const char* kind : {"opencl", "cuda", "sim"})
    for (const v1::Workload& w : Shapes()) {
      auto t = FindDeviceTemplate(w, kind);
      if (!t.ok()) continue;
      for (const ChipTraits& chip : Chips()) {
        ChipTraits c = chip;
        c.l2_bytes = 8 << 20;  // the sim's SRAM
        KnobSpace space = (*t)->Space(w, c);
        Config def = (*t)->DefaultConfig(w, c);
        EXPECT_TRUE(space.IsValid(def)) << kind << " " << WorkloadKey(w) << " " << ConfigKey(def)
                                        << ": " << space.Check(def).message();
      }
    }
}

TEST(AccelTemplatesTest, DeviceLimitsMaskConfigurations) {
  const v1::Workload w = W("gemm", "M=64,N=4096,K=4096");
  auto t = FindDeviceTemplate(w, "opencl");
  ASSERT_TRUE(t.ok());
  ChipTraits tiny;
  tiny.vector_floats = 4;
  tiny.local_mem_bytes = 4 << 10;
  tiny.max_work_group_size = 64;
  KnobSpace space = (*t)->Space(w, tiny);
  Config c = (*t)->DefaultConfig(w, tiny);
  c["WGM"] = 16;
  c["WGN"] = 8;  // 128 work-items > 64
  EXPECT_THAT(std::string(space.Check(c).message()), HasSubstr("work-group size limit"));
  c = (*t)->DefaultConfig(w, tiny);
  c["TK"] = 64;  // (32 + 32) * 64 * 4 = 16 KiB of local memory > 4 KiB
  EXPECT_THAT(std::string(space.Check(c).message()), HasSubstr("local memory"));
  for (const Config& v : space.EnumerateValid(2000)) {
    EXPECT_LE(v.at("WGM") * v.at("WGN"), 64);
    if (v.at("LOCAL")) {
      EXPECT_LE((v.at("WGM") * v.at("TM") + v.at("WGN") * v.at("TN")) * v.at("TK") * 4, 4096);
    }
  }
}

TEST(AccelTemplatesTest, RenderCarriesDimsKnobsAndLaunchGeometry) {
  const v1::Workload w = W("gemm", "M=5,N=96,K=33");
  auto t = FindDeviceTemplate(w, "opencl");
  ASSERT_TRUE(t.ok());
  ChipTraits chip = Chips()[1];
  Config c = (*t)->DefaultConfig(w, chip);
  auto k = (*t)->Render(w, c, chip);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->dialect, "opencl");
  EXPECT_EQ(k->entry, "kiln_gemm");
  EXPECT_THAT(k->source, HasSubstr("__kernel"));
  auto has = [&](const std::string& name, int64_t value) {
    for (const auto& [n, v] : k->defines)
      if (n == name) return v == value;
    return false;
  };
  EXPECT_TRUE(has("DIM_M", 5) && has("DIM_N", 96) && has("DIM_K", 33));
  EXPECT_TRUE(has("WGN", c.at("WGN")) && has("TM", c.at("TM")));
  auto launch = LaunchFromDefines(k->defines);
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->local[0], c.at("WGN"));
  EXPECT_EQ(launch->global[0] % launch->local[0], 0);
  EXPECT_GE(launch->global[0] / c.at("WGN") * c.at("WGN") * c.at("TN"), 96);
  c["VW"] = 3;
  EXPECT_FALSE((*t)->Render(w, c, chip).ok());
}

TEST(AccelTemplatesTest, SimMappingFitsTheSram) {
  const v1::Workload w = W("gemm", "M=64,N=1024,K=1024");
  auto t = FindDeviceTemplate(w, "sim");
  ASSERT_TRUE(t.ok());
  ChipTraits chip;
  chip.l2_bytes = 256 << 10;
  KnobSpace space = (*t)->Space(w, chip);
  size_t n = 0;
  for (const Config& c : space.EnumerateValid(5000)) {
    EXPECT_LE(SimSramBytes(c), 256 << 10) << ConfigKey(c);
    ++n;
  }
  EXPECT_GT(n, 100u);
  EXPECT_THAT(std::string(space
                              .Check({{"DATAFLOW", 0},
                                      {"TM", 64},
                                      {"TN", 1024},
                                      {"TK", 1024},
                                      {"ORDER", 0},
                                      {"DB", 1}})
                              .message()),
              HasSubstr("SRAM"));
}

}  // namespace
}  // namespace kiln::codegen
