// The planner: presets against their published parameter counts, operator multiplicities, and
// HuggingFace config.json parsing (valid, malformed, unknown and contradictory files).
#include "server/planner/planner.h"

#include <map>

#include "codegen/model_graph.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Preset(const std::string& name) {
  v1::JobSpec s;
  s.set_model(name);
  s.set_phase("decode");
  s.set_batch(1);
  s.set_context(1024);
  return s;
}

TEST(PlannerTest, PresetsMatchPublishedParameterCounts) {
  // From each model card / the safetensors index: the graph's weights plus embeddings.
  const std::map<std::string, int64_t> published = {
      {"tinyllama-1.1b", 1100048384}, {"llama-3.2-1b", 1235814400},  {"llama-3-8b", 8030261248},
      {"mistral-7b", 7241732096},     {"mixtral-8x7b", 46702792704}, {"mamba-130m", 129135360},
      {"mamba-1.4b", 1372178432}};
  ASSERT_EQ(PresetNames().size(), published.size());
  for (const auto& [name, params] : published) {
    auto plan = PlanModelJob(Preset(name));
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    EXPECT_EQ(plan->arch.parameters(), params) << name;
    for (const auto& t : plan->tasks)
      EXPECT_TRUE(codegen::ValidateWorkload(t.workload).ok()) << t.key;
  }
}

TEST(PlannerTest, TinyllamaDecodeTasksAndCounts) {
  auto plan = PlanModelJob(Preset("tinyllama-1.1b"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, int> count;
  for (const auto& t : plan->tasks) count[t.key] = t.count;
  EXPECT_EQ(plan->tasks.size(), 11u);
  EXPECT_EQ(count["rmsnorm t=1 d=2048 fp32"], 2 * 22 + 1);
  EXPECT_EQ(count["gemm m=1 n=2560 k=2048 fp32"], 22);   // q, k and v fused: (32 + 2 x 4) x 64
  EXPECT_EQ(count["gemm m=1 n=11264 k=2048 fp32"], 22);  // gate and up fused
  EXPECT_EQ(count["gemm m=1 n=2048 k=5632 +residual fp32"], 22);
  EXPECT_EQ(count["attention_decode b=1 h=32 kvh=4 d=64 l=1024 fp32"], 22);
  EXPECT_EQ(count["gemm m=1 n=32000 k=2048 fp32"], 1);
  EXPECT_EQ(count["softmax t=1 n=32000 fp32"], 1);
}

TEST(PlannerTest, MoeMambaPrefillAndBf16Plans) {
  auto mixtral = PlanModelJob(Preset("mixtral-8x7b"));
  ASSERT_TRUE(mixtral.ok());
  std::map<std::string, int> count;
  for (const auto& t : mixtral->tasks) count[t.key] = t.count;
  EXPECT_EQ(count["moe_gemm t=1 e=8 topk=2 n=14336 k=4096 fp32"], 64);
  EXPECT_EQ(count["moe_router t=1 d=4096 e=8 topk=2 fp32"], 32);
  EXPECT_EQ(count["swiglu t=2 f=14336 fp32"], 32);
  auto mamba = Preset("mamba-1.4b");
  mamba.set_dtype(v1::BF16);
  auto m = PlanModelJob(mamba);
  ASSERT_TRUE(m.ok());
  count.clear();
  for (const auto& t : m->tasks) count[t.key] = t.count;
  EXPECT_EQ(count["ssm_scan b=1 t=1 d=4096 s=16 fp32"], 48);
  EXPECT_EQ(count["conv1d b=1 t=1 d=4096 w=4 fp32"], 48);
  EXPECT_EQ(count["gemm m=1 n=8192 k=2048 bf16"], 48);
  auto prefill = Preset("llama-3.2-1b");
  prefill.set_phase("prefill");
  prefill.set_batch(2);
  prefill.set_prefill_tokens(128);
  auto p = PlanModelJob(prefill);
  ASSERT_TRUE(p.ok()) << p.status();
  count.clear();
  for (const auto& t : p->tasks) count[t.key] = t.count;
  EXPECT_EQ(count["attention_prefill b=2 h=32 kvh=8 d=64 s=128 fp32"], 16);
  EXPECT_EQ(count["gemm m=256 n=3072 k=2048 fp32"], 16);  // qkv_proj over 2 x 128 tokens
  EXPECT_EQ(p->graph.tokens, 256);
}

TEST(PlannerTest, StepBytesReadCountEachWeightOnceAndTheCache) {
  // tinyllama: the published count less the (untied) embedding table, read once a token, plus
  // 22 layers' K and V caches of 4 heads x 1024 positions x 64 (fp32): 4.184 GB in fp32.
  auto plan = PlanModelJob(Preset("tinyllama-1.1b"));
  ASSERT_TRUE(plan.ok());
  const double kv = 22.0 * 2 * 4 * 1024 * 64 * 4, weights = 1100048384.0 - 32000.0 * 2048;
  EXPECT_DOUBLE_EQ(codegen::StepBytesRead(plan->graph), 4 * weights + kv);
  // bf16: GEMM weights at 2 bytes, the norms (2 a layer and the final one) stay fp32.
  auto bf16 = Preset("tinyllama-1.1b");
  bf16.set_dtype(v1::BF16);
  auto b = PlanModelJob(bf16);
  ASSERT_TRUE(b.ok());
  const double norms = (2.0 * 22 + 1) * 2048;
  EXPECT_DOUBLE_EQ(codegen::StepBytesRead(b->graph), 2 * (weights - norms) + 4 * norms + kv);
  // int8 and int4: a byte (half a byte) a weight and a 2-byte scale per 32 weights.
  for (auto [dtype, per_weight] : {std::pair{v1::INT8, 1.0625}, std::pair{v1::INT4, 0.5625}}) {
    auto q = Preset("tinyllama-1.1b");
    q.set_dtype(dtype);
    auto p = PlanModelJob(q);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_DOUBLE_EQ(codegen::StepBytesRead(p->graph),
                     per_weight * (weights - norms) + 4 * norms + kv);
  }
  // mixtral, one token: 2 of the 8 experts' three matrices a layer.
  auto m = PlanModelJob(Preset("mixtral-8x7b"));
  ASSERT_TRUE(m.ok());
  const double experts = 32.0 * 8 * 3 * 14336 * 4096, unused = experts * 6 / 8;
  const double mkv = 32.0 * 2 * 8 * 1024 * 128 * 4;
  EXPECT_DOUBLE_EQ(codegen::StepBytesRead(m->graph),
                   4 * (46702792704.0 - 32000.0 * 4096 - unused) + mkv);
}

// A quantized dtype applies where it can: GEMMs with K in whole groups of 32. mamba-130m's
// dt_proj (K = dt_rank = 48) stays fp32, mixtral's experts run in bf16 (no quantized grouped GEMM).
TEST(PlannerTest, QuantizedDtypeFallsBackWhereItCannotApply) {
  for (const char* model : {"mamba-130m", "mixtral-8x7b", "tinyllama-1.1b"}) {
    auto spec = Preset(model);
    spec.set_dtype(v1::INT4);
    auto plan = PlanModelJob(spec);
    ASSERT_TRUE(plan.ok()) << model << ": " << plan.status();
    for (const auto& op : plan->graph.layer) {
      const v1::Workload& w = op.workload;
      if (w.op() != v1::GEMM && w.op() != v1::MOE_GEMM) continue;  // GEMMs and expert GEMMs
      EXPECT_EQ(w.dtype(), w.dims().at("K") % 32 == 0 ? v1::INT4 : v1::FP32)
          << model << " " << op.role;
    }
  }
}

constexpr char kQwen2[] = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
  "num_key_value_heads": 2, "num_hidden_layers": 24, "vocab_size": 151936, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";

TEST(HfConfigTest, Qwen2IsParsed) {
  auto a = ParseHfConfig(kQwen2);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->family(), "llama");
  EXPECT_EQ(a->head_dim(), 64);
  EXPECT_EQ(a->kv_heads(), 2);
  EXPECT_TRUE(a->qkv_bias());
  EXPECT_TRUE(a->tie_embeddings());
  v1::JobSpec s;
  s.set_hf_config_json(kQwen2);
  auto plan = PlanModelJob(s);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->arch.parameters(), 494032768);  // Qwen2-0.5B's published count
}

TEST(HfConfigTest, MambaAndMixtralAreParsed) {
  auto m = ParseHfConfig(R"({"architectures": ["MambaForCausalLM"], "hidden_size": 768,
    "num_hidden_layers": 24, "vocab_size": 50280, "state_size": 16, "expand": 2,
    "conv_kernel": 4, "time_step_rank": "auto", "intermediate_size": 1536})");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->dt_rank(), 48);
  EXPECT_EQ(m->d_inner(), 1536);
  auto x = ParseHfConfig(R"({"model_type": "mixtral", "hidden_size": 1024,
    "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2,
    "num_hidden_layers": 2, "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 2})");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->family(), "mixtral");
  EXPECT_EQ(x->experts(), 4);
}

TEST(HfConfigTest, BadConfigsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,)", "not valid JSON"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"architectures": ["GPT2LMHeadModel"]})", "architectures: unknown architecture"},
      {R"({"model_type": "falcon"})", "model_type: unknown architecture 'falcon'"},
      {R"({"hidden_size": 64})", "model_type: is missing"},
      {R"({"model_type": "llama", "architectures": ["MambaForCausalLM"]})", "contradicts"},
      {R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 10})",
       "intermediate_size: is missing"},
      {R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3,
           "vocab_size": 10})",
       "num_key_value_heads: 3 does not divide num_attention_heads 4"},
      {R"({"model_type": "llama", "hidden_size": "64"})", "hidden_size: must be an integer"},
      {R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
           "num_local_experts": 2, "num_experts_per_tok": 3})",
       "num_experts_per_tok: 3 exceeds num_local_experts 2"},
      {R"({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 10,
           "expand": 2, "intermediate_size": 100})",
       "intermediate_size: 100 contradicts"},
  };
  for (const auto& [json, want] : cases) {
    auto a = ParseHfConfig(json);
    ASSERT_FALSE(a.ok()) << json;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(want)) << json;
  }
  v1::JobSpec s;
  s.set_model("gpt-5");
  EXPECT_THAT(std::string(PlanModelJob(s).status().message()), HasSubstr("unknown preset"));
}

// Config values are bounded per field and their products are formed in checked 64-bit math: an
// `expand` of 131073 once overflowed int and was accepted.
TEST(HfConfigTest, OverflowingValuesAreRefusedNamingTheField) {
  const std::string mamba = R"({"model_type": "mamba", "num_hidden_layers": 2, "vocab_size": 10,)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {mamba + R"("hidden_size": 32768, "expand": 131073})", "expand: must be in 1..64"},
      {mamba + R"("hidden_size": 131072, "expand": 64})", "expand: 64 x 131072 exceeds 131072"},
      {mamba + R"("hidden_size": 2147483648})", "hidden_size: must be in 1..131072"},
      {mamba + R"("hidden_size": 18446744073709551615})", "hidden_size: must be in 1..131072"},
      {mamba + R"("hidden_size": -5})", "hidden_size: must be in 1..131072"},
      {mamba + R"("hidden_size": 64, "time_step_rank": 1e300})",
       "time_step_rank: must be an integer"},
      {R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
           "num_hidden_layers": 100000, "num_attention_heads": 32, "vocab_size": 10})",
       "num_hidden_layers: must be in 1..4096"},
      {R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
           "num_hidden_layers": 2, "num_attention_heads": 4096, "head_dim": 4096,
           "vocab_size": 10})",
       "head_dim: 12288 x 4096 exceeds"},
      {R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
           "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
           "num_local_experts": 1000000, "num_experts_per_tok": 2})",
       "num_local_experts: must be in 1..4096"},
      {R"({"model_type": "llama", "hidden_size": [[[[1]]]]})", "must be an integer, got a list"},
      {R"({"model_type": "llama", "hidden_size": ")" + std::string(100000, 'x') + R"("})",
       "hidden_size: must be an integer"},
      {R"({"model_type": ")" + std::string(100000, 'y') + R"("})",
       "model_type: unknown architecture"},
  };
  for (const auto& [json, want] : cases) {
    auto a = ParseHfConfig(json);
    ASSERT_FALSE(a.ok()) << json.substr(0, 200);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(want)) << json.substr(0, 200);
    EXPECT_LT(a.status().message().size(), 400u) << "the error echoes the config";
  }
  // The largest accepted sizes plan without overflow: parameters stay positive.
  v1::JobSpec s;
  s.set_hf_config_json(R"({"model_type": "mixtral", "hidden_size": 131072,
    "intermediate_size": 131072, "num_hidden_layers": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 4194304, "num_local_experts": 4096,
    "num_experts_per_tok": 2})");
  auto plan = PlanModelJob(s);
  if (plan.ok()) {
    EXPECT_GT(plan->arch.parameters(), 0);
  }
}

}  // namespace
}  // namespace kiln::server
