// Every model operator's CPU template, compiled for its safe default and for random
// configurations, verified against the reference on round and odd shapes; so is its LibTorch
// baseline. (The differential table of DESIGN.md §10 for the cpu backend.)
#include <array>
#include <atomic>
#include <random>
#include <thread>

#include "codegen/cpu/op_templates.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"
#include "hardware/device.h"

namespace kiln::hardware {
namespace {

struct Case {
  const char* op;
  const char* shape;
  const char* dtype;
  const char* epilogue;
};

// Round and odd shapes of every operator (small: the references run in double).
const Case kCases[] = {
    {"gemm", "M=1,N=256,K=128", "fp32", "residual"},
    {"gemm", "M=3,N=77,K=65", "fp32", "bias"},
    {"gemm", "M=5,N=130,K=33", "fp32", "silu"},
    {"gemm", "M=2,N=64,K=31", "fp32", "gelu"},
    {"gemm", "M=1,N=256,K=128", "bf16", ""},
    {"gemm", "M=9,N=95,K=67", "bf16", "residual"},
    {"gemm", "M=64,N=96,K=128", "bf16", "bias"},
    {"gemm", "M=77,N=45,K=67", "bf16", "residual"},
    {"gemm", "M=1,N=256,K=128", "int8", ""},
    {"gemm", "M=3,N=77,K=64", "int8", "bias"},
    {"gemm", "M=5,N=130,K=96", "int4", "residual"},
    {"gemm", "M=1,N=33,K=32", "int4", "silu"},
    {"rmsnorm", "T=1,D=2048", "fp32", ""},
    {"rmsnorm", "T=3,D=77", "fp32", "residual"},
    {"rope", "T=1,H=32,D=64", "fp32", ""},
    {"rope", "T=3,H=5,D=18", "fp32", ""},
    {"attention_decode", "B=1,H=8,KVH=2,D=64,L=256", "fp32", ""},
    {"attention_decode", "B=2,H=6,KVH=3,D=20,L=37", "fp32", ""},
    // The vector path (head size a multiple of the vector width) with partial position blocks.
    {"attention_decode", "B=2,H=8,KVH=2,D=64,L=37", "fp32", ""},
    {"attention_decode", "B=1,H=4,KVH=1,D=128,L=1", "fp32", ""},
    {"attention_decode", "B=1,H=32,KVH=8,D=128,L=200", "fp32", ""},
    {"attention_prefill", "B=1,H=4,KVH=2,D=32,S=64", "fp32", ""},
    {"attention_prefill", "B=2,H=3,KVH=1,D=12,S=29", "fp32", ""},
    {"softmax", "T=1,N=32000", "fp32", ""},
    {"softmax", "T=3,N=101", "fp32", ""},
    {"swiglu", "T=1,F=5632", "fp32", ""},
    {"swiglu", "T=3,F=333", "fp32", ""},
    {"moe_router", "T=1,D=256,E=8,TOPK=2", "fp32", ""},
    {"moe_router", "T=5,D=37,E=7,TOPK=3", "fp32", ""},
    {"moe_gemm", "T=1,E=8,TOPK=2,N=256,K=128", "fp32", ""},
    {"moe_gemm", "T=3,E=5,TOPK=2,N=70,K=33", "bf16", ""},
    {"ssm_scan", "B=1,T=1,D=256,S=16", "fp32", ""},
    {"ssm_scan", "B=2,T=5,D=37,S=7", "fp32", ""},
    {"conv1d", "B=1,T=1,D=256,W=4", "fp32", ""},
    {"conv1d", "B=2,T=5,D=37,W=3", "fp32", ""},
};

MeasureOptions VerifyOnly() {
  MeasureOptions o;
  o.warm = true;
  o.warmup = 0;
  o.min_samples = 1;
  o.max_samples = 2;
  o.max_seconds = 0.01;
  return o;
}

// One kernel to verify: a template at a configuration on a workload; `what` names it in a
// failure.
struct Variant {
  const codegen::KernelTemplate* tmpl;
  v1::Workload w;
  codegen::Config config;
  std::string what;
};

class OpKernelsTest : public ::testing::TestWithParam<Case> {
 protected:
  // Renders and compiles every variant on all cores at once, as a worker does (compiles overlap
  // compiles, never a measurement), then measures each in turn and expects it to verify.
  static void ExpectAllVerify(const std::vector<Variant>& variants) {
    const auto traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
    std::vector<absl::StatusOr<CompiledKernel>> compiled(variants.size(),
                                                         absl::UnknownError("not compiled"));
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i = next++; i < variants.size(); i = next++) {
        const Variant& v = variants[i];
        auto kernel = v.tmpl->Render(v.w, v.config, traits);
        compiled[i] = kernel.ok() ? device_->Compile(*kernel)
                                  : absl::StatusOr<CompiledKernel>(kernel.status());
      }
    };
    std::vector<std::thread> threads;
    const size_t n = std::min<size_t>(variants.size(), std::thread::hardware_concurrency());
    for (size_t i = 0; i < std::max<size_t>(n, 1); ++i) threads.emplace_back(work);
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      const std::string name = v.what + " " + codegen::ConfigKey(v.config);
      if (!compiled[i].ok()) {
        ADD_FAILURE() << name << ": " << compiled[i].status();
        continue;
      }
      v1::Measurement m = device_->Measure(v.w, *compiled[i], VerifyOnly());
      EXPECT_EQ(m.status(), v1::OK) << name << ": " << m.message();
    }
  }
  static void SetUpTestSuite() {
    auto d = OpenDevice("cpu");
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = d->release();
  }
  static void TearDownTestSuite() { delete device_; }
  static Device* device_;
};
Device* OpKernelsTest::device_ = nullptr;

TEST_P(OpKernelsTest, DefaultAndRandomConfigsVerify) {
  const Case& c = GetParam();
  auto w = codegen::ParseWorkload(c.op, c.shape, c.dtype);
  ASSERT_TRUE(w.ok()) << w.status();
  w->set_epilogue(c.epilogue);
  const std::string key = codegen::WorkloadKey(*w);
  ASSERT_TRUE(device_->Supports(*w)) << key;
  auto tmpl = codegen::FindTemplate(*w, "cpu");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  const auto traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
  codegen::KnobSpace space = (*tmpl)->Space(*w, traits);
  std::vector<codegen::Config> configs = {codegen::SafeDefaultConfig(space)};
  ASSERT_FALSE(configs[0].empty()) << key;
  std::vector<codegen::Config> all = space.EnumerateValid();
  std::mt19937 rng(std::hash<std::string>()(key));
  configs.push_back(all[rng() % all.size()]);
  std::vector<Variant> variants;
  for (const auto& config : configs) variants.push_back({*tmpl, *w, config, key});
  ExpectAllVerify(variants);
  v1::Measurement base = device_->MeasureBaseline(*w, VerifyOnly());
  EXPECT_EQ(base.status(), v1::OK)
      << key << " " << device_->BaselineName(*w) << ": " << base.message();
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpKernelsTest, ::testing::ValuesIn(kCases));

// The quantized GEMM on an odd shape along every path: both formats, activations quantized or
// not, each row-panel height, with and without prefetch, one column block and several.
TEST_F(OpKernelsTest, QuantizedGemmEveryPathVerifies) {
  const auto traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
  std::vector<Variant> variants;
  for (const char* dtype : {"int8", "int4"}) {
    auto w = codegen::ParseWorkload("gemm", "M=7,N=45,K=96", dtype);
    ASSERT_TRUE(w.ok()) << w.status();
    w->set_epilogue("gelu");
    auto tmpl = codegen::FindTemplate(*w, "cpu");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    for (int64_t aq : {0, 1})
      for (int64_t mr : {1, 2, 4})
        for (int64_t nb : {16, 64}) {
          const codegen::Config c = {
              {"NT", traits.cores}, {"NB", nb}, {"MR", mr}, {"AQ", aq}, {"PF", mr == 2 ? 512 : 0}};
          variants.push_back({*tmpl, *w, c, dtype});
        }
  }
  ExpectAllVerify(variants);
}

// The register-blocked bf16 GEMM on an odd shape (K odd, ragged row and column tiles) along its
// paths: both tile widths, several K slices, one and several row tiles per work item, and every
// epilogue.
TEST_F(OpKernelsTest, Bf16BlockedGemmEveryPathVerifies) {
  const auto traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
  auto w = codegen::ParseWorkload("gemm", "M=71,N=83,K=301", "bf16");
  ASSERT_TRUE(w.ok()) << w.status();
  w->set_epilogue("silu");
  auto tmpl = codegen::FindTemplate(*w, "cpu");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ASSERT_EQ((*tmpl)->name(), "cpu-gemm-bf16");
  std::vector<Variant> variants;
  // The tiles this chip's knob space offers: AVX-512 (32 registers) or AVX2 (16).
  const bool wide = traits.vector_registers >= 32;
  const std::vector<int64_t> nrs = wide ? std::vector<int64_t>{16, 32} : std::vector<int64_t>{16};
  const std::vector<int64_t> mrs =
      wide ? std::vector<int64_t>{4, 6, 14} : std::vector<int64_t>{2, 5, 6};
  for (int64_t nr : nrs)
    for (int64_t mr : mrs)
      for (int64_t kc : {128, 1024}) {
        if (mr * nr > 28 * 16) continue;
        const codegen::Config c = {{"NT", traits.cores}, {"MR", mr},  {"NR", nr},
                                   {"KC", kc},           {"NC", 128}, {"MT", mr == 4 ? 4 : 8}};
        variants.push_back({*tmpl, *w, c, "silu"});
      }
  // The other epilogues, applied in registers on the last K slice (one slice and several).
  for (const char* epilogue : {"", "bias", "gelu", "residual"})
    for (int64_t kc : {128, 1024}) {
      w->set_epilogue(epilogue);
      const codegen::Config c = {
          {"NT", traits.cores}, {"MR", wide ? 12 : 5}, {"NR", wide ? 32 : 16},
          {"KC", kc},           {"NC", 128},           {"MT", 4}};
      variants.push_back({*tmpl, *w, c, epilogue});
    }
  ExpectAllVerify(variants);
}

// K must be whole groups of 32 for a quantized format: refused, naming K and the group.
TEST(QuantizedGemmTest, KNotAMultipleOfTheGroupIsRefused) {
  auto w = codegen::ParseWorkload("gemm", "M=1,N=64,K=100", "int4");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("K=100 is not a multiple of int4's group of 32"),
            std::string::npos)
      << w.status();
}

// Attention decode's vector path at its corners: both vector widths, prefetch on and off and
// near a chunk's end, chunks shorter than a block and empty ones (SPLIT=32 over 37 positions),
// each thread's last kv head in more chunks than the others (TAIL), one or two kv heads a thread,
// head groups that do not fill the value pass's 4 heads (G=7: 4 + 3), one head (G=1) and two
// full groups of 4 (G=8).
TEST_F(OpKernelsTest, AttentionDecodeSplitsAndPrefetchVerify) {
  const char* shapes[] = {"B=1,H=14,KVH=2,D=64,L=37", "B=2,H=32,KVH=8,D=128,L=200",
                          "B=1,H=3,KVH=3,D=32,L=19", "B=1,H=16,KVH=2,D=64,L=45"};
  // (SPLIT, TAIL, PF, PFL, VEC); VEC only where the chip has AVX-512 (the knob is absent
  // elsewhere). TAIL needs two threads: NT stays at the default (all cores) where there are two.
  const std::vector<std::array<int64_t, 5>> cases = {
      {1, 1, 0, 2, 16}, {1, 2, 2, 1, 8},  {4, 1, 1, 2, 16}, {32, 4, 2, 2, 8},
      {4, 2, 1, 1, 8},  {4, 1, 2, 1, 16}, {1, 4, 1, 1, 16}, {2, 2, 2, 1, 16}};
  std::vector<Variant> variants;
  for (const char* shape : shapes) {
    auto w = codegen::ParseWorkload("attention_decode", shape);
    ASSERT_TRUE(w.ok()) << w.status();
    auto tmpl = codegen::FindTemplate(*w, "cpu");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    const auto traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
    codegen::Config config = codegen::SafeDefaultConfig((*tmpl)->Space(*w, traits));
    for (const auto& [split, tail, pf, pfl, vec] : cases) {
      config["SPLIT"] = split;
      config["TAIL"] = config.at("NT") > 1 ? tail : 1;
      config["PF"] = pf;
      config["PFL"] = pfl;
      if (config.count("VEC")) config["VEC"] = vec;
      variants.push_back({*tmpl, *w, config, shape});
    }
  }
  ExpectAllVerify(variants);
}

// A wrong kernel is caught: the scan without its skip connection fails verification.
TEST(OpHarnessTest, RejectsWrongKernel) {
  auto d = OpenDevice("cpu");
  ASSERT_TRUE(d.ok());
  auto w = codegen::ParseWorkload("swiglu", "T=2,F=50");
  codegen::Kernel k;
  k.dialect = "cpp";
  k.entry = codegen::kCpuOpEntry;
  k.source =
      "extern \"C\" void kiln_op(const long long* d, void* const* a, const float* p) {\n"
      "  float* o = (float*)a[2]; for (long i = 0; i + 1 < d[0] * d[1]; ++i) o[i] = 0; }\n";
  auto compiled = (*d)->Compile(k);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  v1::Measurement m = (*d)->Measure(*w, *compiled, VerifyOnly());
  EXPECT_EQ(m.status(), v1::WRONG_RESULT) << m.message();
}

}  // namespace
}  // namespace kiln::hardware
