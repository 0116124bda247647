// The end-to-end step runner on tiny llama, mixtral and mamba configurations: Kiln's kernels
// (each task's safe default config) against the LibTorch eager forward pass of the same step.
#include "hardware/cpu/step_runner.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu/op_templates.h"
#include "codegen/kernel_template.h"
#include "codegen/model_graph.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"
#include "hardware/device.h"
#include "hardware/reference/step_tolerance.h"

namespace kiln::hardware {
namespace {

// Kiln's step output against LibTorch's: the largest |kiln - torch|, the largest |torch| (the
// tolerance's scale), and whether every Kiln output is finite.
struct Gap {
  double diff = 0, scale = 0;
  bool finite = true;
};
Gap Compare(const std::vector<float>& kiln, const std::vector<float>& torch) {
  Gap g;
  for (size_t i = 0; i < kiln.size(); ++i) {
    g.finite = g.finite && std::isfinite(kiln[i]);
    g.diff = std::max(g.diff, static_cast<double>(std::fabs(kiln[i] - torch[i])));
    g.scale = std::max(g.scale, static_cast<double>(std::fabs(torch[i])));
  }
  return g;
}

v1::ModelArch Tiny(const std::string& family) {
  v1::ModelArch a;
  a.set_name("tiny-" + family);
  a.set_family(family);
  a.set_hidden(64);
  a.set_layers(3);
  a.set_vocab(101);
  a.set_rms_eps(1e-5);
  a.set_rope_theta(10000);
  if (family == "mamba") {
    a.set_d_inner(128);
    a.set_d_state(8);
    a.set_d_conv(4);
    a.set_dt_rank(4);
    a.set_tie_embeddings(true);
  } else {
    a.set_heads(4);
    a.set_kv_heads(2);
    a.set_head_dim(16);
    a.set_intermediate(96);
    a.set_qkv_bias(true);
  }
  if (family == "mixtral") {
    a.set_experts(4);
    a.set_experts_per_token(2);
  }
  return a;
}

class StepRunnerTest : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {
 protected:
  static void SetUpTestSuite() { device_ = OpenDevice("cpu")->release(); }
  static void TearDownTestSuite() { delete device_; }
  static Device* device_;

  // A step request whose kernels are every task's safe default, compiled.
  v1::StepRequest Request(const v1::ModelArch& arch, const std::string& phase, int batch,
                          v1::DType dtype = v1::FP32) {
    v1::StepRequest r;
    *r.mutable_arch() = arch;
    r.set_phase(phase);
    r.set_batch(batch);
    r.set_context(9);
    r.set_prefill_tokens(7);
    r.set_dtype(dtype);
    r.set_layers(2);
    auto g = codegen::BuildStepGraph(arch, phase, batch, 9, 7, dtype);
    EXPECT_TRUE(g.ok()) << g.status();
    std::set<std::string> seen;
    std::vector<codegen::StepOp> ops = g->layer;
    ops.insert(ops.end(), g->tail.begin(), g->tail.end());
    const auto traits = codegen::TraitsFromFingerprint(device_->Fingerprint());
    for (const auto& op : ops) {
      if (!seen.insert(codegen::WorkloadKey(op.workload)).second) continue;
      auto tmpl = codegen::FindTemplate(op.workload, "cpu");
      EXPECT_TRUE(tmpl.ok()) << tmpl.status();
      auto config = codegen::SafeDefaultConfig((*tmpl)->Space(op.workload, traits));
      auto compiled = device_->Compile(*(*tmpl)->Render(op.workload, config, traits));
      EXPECT_TRUE(compiled.ok()) << compiled.status();
      v1::StepKernel* k = r.add_kernels();
      *k->mutable_workload() = op.workload;
      k->set_artifact(compiled->artifact);
      k->set_entry(compiled->entry);
    }
    return r;
  }
};
Device* StepRunnerTest::device_ = nullptr;

TEST_P(StepRunnerTest, KilnStepMatchesTheLibTorchForwardPass) {
  const auto& [family, phase, batch] = GetParam();
  auto out = RunCpuStepOnce(Request(Tiny(family), phase, batch), device_->Fingerprint());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->kiln.size(), static_cast<size_t>(batch * 101));
  const Gap g = Compare(out->kiln, out->torch);
  ASSERT_TRUE(g.finite);
  EXPECT_GT(g.scale, 0);
  EXPECT_LT(g.diff, 1e-4 * g.scale + 1e-5) << family << " " << phase << " max diff " << g.diff;
}

INSTANTIATE_TEST_SUITE_P(Models, StepRunnerTest,
                         ::testing::Values(std::make_tuple("llama", "decode", 1),
                                           std::make_tuple("llama", "decode", 2),
                                           std::make_tuple("llama", "prefill", 2),
                                           std::make_tuple("mixtral", "decode", 2),
                                           std::make_tuple("mamba", "decode", 1),
                                           std::make_tuple("mamba", "prefill", 2)));

// int8 and int4 weights: Kiln's quantized kernels (activations quantized per group by their safe
// default) against LibTorch on the dequantized weights, within the step tolerance of the dtype.
// The experts' grouped GEMMs run quantized too; a GEMM whose K is not whole groups (mamba's
// dt_proj) runs in fp32.
TEST_F(StepRunnerTest, QuantizedStepMatchesLibTorchOnTheDequantizedWeights) {
  for (v1::DType dtype : {v1::INT8, v1::INT4})
    for (const char* family : {"llama", "mixtral", "mamba"}) {
      v1::ModelArch arch = Tiny(family);
      // Every expert taken: top-k routing is discontinuous, and quantized activations move the
      // router's logits by more than a near tie's margin, so which two of four experts a token
      // takes could differ from LibTorch's; what is compared here is the quantized arithmetic.
      if (arch.experts() > 0) arch.set_experts_per_token(arch.experts());
      auto graph = codegen::BuildStepGraph(arch, "decode", 1, 9, 7, dtype);
      ASSERT_TRUE(graph.ok()) << graph.status();
      for (const auto& op : graph->layer)
        if (op.workload.op() == v1::MOE_GEMM || op.role == "qkv_proj") {
          EXPECT_EQ(op.workload.dtype(), dtype) << family << " " << op.role;
        }
      auto out = RunCpuStepOnce(Request(arch, "decode", 1, dtype), device_->Fingerprint());
      ASSERT_TRUE(out.ok()) << family << ": " << out.status();
      const Gap g = Compare(out->kiln, out->torch);
      ASSERT_TRUE(g.finite) << family;
      EXPECT_GT(g.scale, 0);
      EXPECT_LT(g.diff, StepTolerance(dtype) * g.scale)
          << family << " " << codegen::DTypeName(dtype) << " max diff " << g.diff;
    }
}

// A timed step of a few samples: enough to check what it reports.
StepOptions Brief() {
  StepOptions opts;
  opts.max_seconds = 0.2;
  opts.min_samples = 2;
  opts.max_samples = 3;
  return opts;
}

TEST_F(StepRunnerTest, TimedStepReportsBothBackendsAndScales) {
  v1::StepRequest r = Request(Tiny("llama"), "decode", 1, v1::BF16);
  auto res = RunCpuStep(r, device_->Fingerprint(), Brief());
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_GT(res->measured(), 0);
  EXPECT_GT(res->baseline_measured(), 0);
  EXPECT_EQ(res->layers_run(), 2);
  EXPECT_EQ(res->layers_total(), 3);
  EXPECT_NE(res->note().find("2 of 3 layers"), std::string::npos) << res->note();
  EXPECT_LT(res->max_error(), 5e-2);  // bf16 weights: Kiln may round activations too (DOT=1)
  // The bound: per layer norms 2 x 256, q 64x64x2 + bias 256, k and v 32x64x2 + bias 128 each,
  // KV cache 2 x 2 heads x 9 x 16 x 4, o 64x64x2, gate, up, down 96x64x2 each (64768 bytes, x3
  // layers), then the final norm 256 and the head 101x64x2: 207488 bytes for the one token.
  EXPECT_DOUBLE_EQ(res->bytes_per_token(), 207488);
  ASSERT_EQ(res->read_gbytes_per_s_samples_size(), res->samples_us_size());
  EXPECT_GT(res->read_gbytes_per_s(), 0.5);  // a read sweep of 512 MiB: physical bounds
  EXPECT_LT(res->read_gbytes_per_s(), 5000);
  EXPECT_NEAR(res->bound(), res->read_gbytes_per_s() * 1e9 / 207488, 1e-6 * res->bound());
  EXPECT_GT(res->bound_fraction(), 0);
  EXPECT_GE(codegen::DefaultStepLayers(Tiny("llama"), v1::FP32), 3);
  EXPECT_EQ(res->bound_kind(), "memory");
}

// A bf16 step's baseline includes LibTorch with the weights widened to fp32 at load (what a user
// runs where LibTorch's bf16 matmul is slow); on a chip without AVX-512 the bf16 arrangements are
// listed as not timed, and the fastest route is an fp32 one.
TEST_F(StepRunnerTest, Bf16StepListsTheFp32WeightsRoute) {
  v1::StepRequest r = Request(Tiny("llama"), "decode", 1, v1::BF16);
  for (bool avx512 : {true, false}) {
    v1::ChipFingerprint chip = device_->Fingerprint();
    chip.clear_isa_features();
    chip.add_isa_features("avx2");
    if (avx512) chip.add_isa_features("avx512f");
    auto res = RunCpuStep(r, chip, Brief());
    ASSERT_TRUE(res.ok()) << res.status();
    EXPECT_LT(res->max_error(), 5e-2);
    int fp32 = 0, skipped = 0;
    for (const auto& route : res->baseline_routes()) {
      const bool widened = route.name().find("+fp32-weights") != std::string::npos;
      EXPECT_EQ(route.dtype(), widened ? "fp32" : "bf16") << route.name();
      if (widened) {
        ++fp32;
        EXPECT_EQ(route.status(), v1::OK) << route.name() << ": " << route.message();
      } else if (route.status() == v1::UNSUPPORTED) {
        ++skipped;
        EXPECT_NE(route.message().find("no AVX-512"), std::string::npos) << route.message();
      }
    }
    EXPECT_GE(fp32, 2);
    EXPECT_EQ(skipped, avx512 ? 0 : res->baseline_routes_size() - fp32);
    if (!avx512) {
      EXPECT_NE(res->baseline_name().find("+fp32-weights"), std::string::npos);
      EXPECT_EQ(res->baseline_dtype(), "fp32");
    }
  }
}

// Every kernel's time inside the step, by workload: calls scaled to the whole model, the per-call
// times adding up to no more than the step; a probe times Kiln's step only.
TEST_F(StepRunnerTest, StepReportsItsKernelsTimesAndAProbeSkipsTheBaseline) {
  v1::StepRequest r = Request(Tiny("llama"), "decode", 1, v1::FP32);
  for (auto& k : *r.mutable_kernels()) k.set_isolated_us(7);
  auto res = RunCpuStep(r, device_->Fingerprint(), Brief());
  ASSERT_TRUE(res.ok()) << res.status();
  std::set<std::string> keys;
  for (const auto& k : r.kernels()) keys.insert(codegen::WorkloadKey(k.workload()));
  ASSERT_EQ(static_cast<size_t>(res->op_times_size()), keys.size());
  double sum = 0;
  for (const v1::StepOpTime& t : res->op_times()) {
    EXPECT_EQ(keys.count(t.workload_key()), 1u) << t.workload_key();
    EXPECT_GT(t.in_step_us(), 0) << t.workload_key();
    EXPECT_DOUBLE_EQ(t.isolated_us(), 7);
    EXPECT_FALSE(t.roles().empty());
    EXPECT_GE(t.calls_per_step(), 1);
    sum += t.in_step_us() * t.calls_per_step();
    if (t.roles() == "o_proj") {
      EXPECT_EQ(t.calls_per_step(), 3) << "one a layer, 3 layers";
    }
  }
  EXPECT_LE(sum, res->step_us() * 1.05);
  EXPECT_GT(sum, res->step_us() * 0.3);
  EXPECT_FALSE(res->probe());
  r.set_probe(true);
  auto probe = RunCpuStep(r, device_->Fingerprint(), Brief());
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_TRUE(probe->probe());
  EXPECT_GT(probe->measured(), 0);
  EXPECT_EQ(probe->baseline_measured(), 0);
  EXPECT_EQ(probe->baseline_samples_us_size(), 0);
  EXPECT_EQ(probe->op_times_size(), res->op_times_size());
  EXPECT_LT(probe->max_error(), 1e-3);  // still checked against LibTorch's logits
}

// Prefill is bound by compute: the bound is the matrix peak over the FLOP a token costs.
TEST_F(StepRunnerTest, PrefillReportsTheComputeRoof) {
  v1::StepRequest r = Request(Tiny("llama"), "prefill", 1, v1::BF16);
  auto res = RunCpuStep(r, device_->Fingerprint(), Brief());
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->bound_kind(), "compute");
  EXPECT_GE(res->peak_gflops(), device_->Fingerprint().peak_gflops());
  EXPECT_GT(res->flops_per_token(), 2.0 * 3 * 64 * (64 + 2 * 32 + 64 + 3 * 96));  // the GEMMs
  EXPECT_NEAR(res->bound(), res->peak_gflops() * 1e9 / res->flops_per_token(), 1e-6 * res->bound());
  EXPECT_GT(res->bound_fraction(), 0);
  EXPECT_LT(res->bound_fraction(), 1.5);
}

}  // namespace
}  // namespace kiln::hardware

namespace kiln::hardware {
namespace {

// Manual profile (not run by default): tinyllama decode, KILN_PROFILE_LAYERS layers, every GEMM
// through the streaming template; prints each operator role's time per step for both backends.
TEST(StepProfile, DISABLED_Tinyllama) {
  auto device = OpenDevice("cpu");
  ASSERT_TRUE(device.ok());
  v1::ModelArch a;
  a.set_name("tinyllama-1.1b");
  a.set_family("llama");
  a.set_hidden(2048);
  a.set_intermediate(5632);
  a.set_layers(22);
  a.set_heads(32);
  a.set_kv_heads(4);
  a.set_head_dim(64);
  a.set_vocab(32000);
  a.set_rms_eps(1e-5);
  a.set_rope_theta(1e4);
  const char* env = std::getenv("KILN_PROFILE_LAYERS");
  const char* dt = std::getenv("KILN_PROFILE_DTYPE");
  v1::StepRequest r;
  *r.mutable_arch() = a;
  r.set_phase("decode");
  r.set_batch(1);
  r.set_context(1024);
  r.set_dtype(dt && std::string(dt) == "bf16" ? v1::BF16 : v1::FP32);
  r.set_layers(env ? std::atoi(env) : 4);
  auto g = codegen::BuildStepGraph(a, "decode", 1, 1024, 1, r.dtype());
  std::vector<codegen::StepOp> ops = g->layer;
  ops.insert(ops.end(), g->tail.begin(), g->tail.end());
  const auto traits = codegen::TraitsFromFingerprint((*device)->Fingerprint());
  auto tmpls = codegen::NewCpuOpTemplates();
  std::set<std::string> seen;
  for (const auto& op : ops) {
    if (!seen.insert(codegen::WorkloadKey(op.workload)).second) continue;
    const codegen::KernelTemplate* t = nullptr;
    for (const auto& c : tmpls)
      if (c->Supports(op.workload)) t = c.get();
    ASSERT_NE(t, nullptr);
    auto config = codegen::SafeDefaultConfig(t->Space(op.workload, traits));
    auto compiled = (*device)->Compile(*t->Render(op.workload, config, traits));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    v1::StepKernel* k = r.add_kernels();
    *k->mutable_workload() = op.workload;
    k->set_artifact(compiled->artifact);
    k->set_entry(compiled->entry);
  }
  StepOptions opts;
  opts.max_seconds = 10;
  auto res = RunCpuStep(r, (*device)->Fingerprint(), opts);
  ASSERT_TRUE(res.ok()) << res.status();
  std::printf("kiln %.2f tok/s (%.0f us)  torch %.2f tok/s (%.0f us)  err %.2e  %s\n",
              res->measured(), res->step_us(), res->baseline_measured(), res->baseline_step_us(),
              res->max_error(), res->note().c_str());
}

}  // namespace
}  // namespace kiln::hardware
