// HuggingFace config.json -> ModelArch for the llama, mistral, qwen2, mixtral and mamba
// architectures. Every error names the config field and the rule it breaks.
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/text.h"
#include "server/planner/planner.h"

namespace kiln::server {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& field, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat("hf_config_json: ", field, ": ", rule));
}

// A value as the config has it, for an error message: a short prefix of its JSON text.
std::string Shown(const Json& v) {
  // Containers are not dumped whole (a deep or large one would be costly and echoed).
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return ShortQuote(v.dump());
}

// The most each integer field may hold: generous beside the largest published models (hidden
// 16384-25600, vocab 256000, 128 experts), small enough that every product the planner and the
// operator graph form (e.g. experts x intermediate x hidden x layers) fits in 64 bits and every
// dimension it derives fits in an int. A field outside its range is named.
constexpr int64_t kMaxHidden = 1 << 17;        // hidden_size, intermediate_size
constexpr int64_t kMaxLayers = 1 << 12;        // num_hidden_layers
constexpr int64_t kMaxHeads = 1 << 12;         // attention and key/value heads
constexpr int64_t kMaxHeadDim = 1 << 12;       // head_dim
constexpr int64_t kMaxVocab = 1 << 22;         // vocab_size
constexpr int64_t kMaxExperts = 1 << 12;       // num_local_experts, num_experts_per_tok
constexpr int64_t kMaxSsmState = 1 << 12;      // state_size
constexpr int64_t kMaxConvKernel = 1 << 8;     // conv_kernel
constexpr int64_t kMaxExpand = 64;             // expand
constexpr int64_t kMaxTimeStepRank = 1 << 17;  // time_step_rank

// A required (or defaulted) integer field in 1..max.
absl::StatusOr<int> Int(const Json& j, const char* field, int64_t max,
                        std::optional<int> fallback = {}) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return Bad(field, "is missing");
  }
  if (!it->is_number_integer())
    return Bad(field, absl::StrCat("must be an integer, got ", Shown(*it)));
  // Unsigned JSON integers above INT64_MAX would wrap in get<int64_t>().
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(max))
    return Bad(field, absl::StrCat("must be in 1..", max, ", got ", Shown(*it)));
  const int64_t v = it->get<int64_t>();
  if (v < 1 || v > max) return Bad(field, absl::StrCat("must be in 1..", max, ", got ", v));
  return static_cast<int>(v);
}

// a * b in 64 bits, refused (naming `field`) above `max` instead of overflowing.
absl::StatusOr<int64_t> CheckedProduct(const char* field, int64_t a, int64_t b, int64_t max) {
  int64_t p = 0;
  if (__builtin_mul_overflow(a, b, &p) || p > max)
    return Bad(field, absl::StrCat(a, " x ", b, " exceeds ", max));
  return p;
}

absl::StatusOr<double> Num(const Json& j, const char* field, double fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) return Bad(field, absl::StrCat("must be a number, got ", Shown(*it)));
  const double v = it->get<double>();
  if (!(v > 0) || !std::isfinite(v))
    return Bad(field, absl::StrCat("must be a finite number > 0, got ", v));
  return v;
}

absl::StatusOr<bool> Bool(const Json& j, const char* field, bool fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Bad(field, absl::StrCat("must be true or false, got ", Shown(*it)));
  return it->get<bool>();
}

// model_type from the config, checked against architectures[0] when both are given.
absl::StatusOr<std::string> ModelType(const Json& j) {
  static const std::map<std::string, std::string> kArch = {{"LlamaForCausalLM", "llama"},
                                                           {"MistralForCausalLM", "mistral"},
                                                           {"Qwen2ForCausalLM", "qwen2"},
                                                           {"MixtralForCausalLM", "mixtral"},
                                                           {"MambaForCausalLM", "mamba"}};
  std::string from_arch;
  if (auto it = j.find("architectures"); it != j.end()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      return Bad("architectures", "must be a non-empty list of class names");
    const std::string name = (*it)[0].get<std::string>();
    auto a = kArch.find(name);
    if (a == kArch.end())
      return Bad("architectures", absl::StrCat("unknown architecture '", ShortQuote(name),
                                               "'; supported: LlamaForCausalLM, "
                                               "MistralForCausalLM, Qwen2ForCausalLM, "
                                               "MixtralForCausalLM, MambaForCausalLM"));
    from_arch = a->second;
  }
  std::string type;
  if (auto it = j.find("model_type"); it != j.end()) {
    if (!it->is_string()) return Bad("model_type", "must be a string");
    type = absl::AsciiStrToLower(it->get<std::string>());
    bool known = false;
    for (const auto& [cls, t] : kArch) known = known || t == type;
    if (!known)
      return Bad("model_type", absl::StrCat("unknown architecture '", ShortQuote(type),
                                            "'; supported: llama, mistral, qwen2, mixtral, mamba"));
  }
  if (type.empty() && from_arch.empty())
    return Bad("model_type", "is missing (and so is architectures)");
  if (!type.empty() && !from_arch.empty() && type != from_arch)
    return Bad("model_type",
               absl::StrCat("'", type, "' contradicts architectures[0] (", from_arch, ")"));
  return type.empty() ? from_arch : type;
}

absl::StatusOr<v1::ModelArch> Transformer(const Json& j, const std::string& type) {
  v1::ModelArch a;
  a.set_name(type);
  a.set_family(type == "mixtral" ? "mixtral" : "llama");
  ASSIGN_OR_RETURN(int hidden, Int(j, "hidden_size", kMaxHidden));
  ASSIGN_OR_RETURN(int inter, Int(j, "intermediate_size", kMaxHidden));
  ASSIGN_OR_RETURN(int layers, Int(j, "num_hidden_layers", kMaxLayers));
  ASSIGN_OR_RETURN(int heads, Int(j, "num_attention_heads", kMaxHeads));
  ASSIGN_OR_RETURN(int kv, Int(j, "num_key_value_heads", kMaxHeads, heads));
  ASSIGN_OR_RETURN(int vocab, Int(j, "vocab_size", kMaxVocab));
  if (hidden % heads != 0 && !j.contains("head_dim"))
    return Bad("num_attention_heads",
               absl::StrCat(heads, " does not divide hidden_size ", hidden, " (and no head_dim)"));
  ASSIGN_OR_RETURN(int head_dim, Int(j, "head_dim", kMaxHeadDim, hidden / heads));
  // The attention projections' width, (heads + 2 kv_heads) x head_dim, is a GEMM dimension.
  RETURN_IF_ERROR(
      CheckedProduct("head_dim", heads + 2 * static_cast<int64_t>(kv), head_dim, kMaxHidden * 8)
          .status());
  if (heads % kv != 0)
    return Bad("num_key_value_heads",
               absl::StrCat(kv, " does not divide num_attention_heads ", heads));
  if (head_dim % 2 != 0)
    return Bad("head_dim", absl::StrCat("must be even for rope, got ", head_dim));
  ASSIGN_OR_RETURN(double eps, Num(j, "rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(double theta, Num(j, "rope_theta", 10000));
  ASSIGN_OR_RETURN(bool tie, Bool(j, "tie_word_embeddings", false));
  ASSIGN_OR_RETURN(bool bias, Bool(j, "attention_bias", type == "qwen2"));
  a.set_hidden(hidden);
  a.set_intermediate(inter);
  a.set_layers(layers);
  a.set_heads(heads);
  a.set_kv_heads(kv);
  a.set_head_dim(head_dim);
  a.set_vocab(vocab);
  a.set_rms_eps(eps);
  a.set_rope_theta(theta);
  a.set_tie_embeddings(tie);
  a.set_qkv_bias(bias);
  if (type == "mixtral") {
    ASSIGN_OR_RETURN(int experts, Int(j, "num_local_experts", kMaxExperts));
    ASSIGN_OR_RETURN(int topk, Int(j, "num_experts_per_tok", kMaxExperts));
    if (topk > experts)
      return Bad("num_experts_per_tok", absl::StrCat(topk, " exceeds num_local_experts ", experts));
    a.set_experts(experts);
    a.set_experts_per_token(topk);
  }
  return a;
}

absl::StatusOr<v1::ModelArch> Mamba(const Json& j) {
  v1::ModelArch a;
  a.set_name("mamba");
  a.set_family("mamba");
  ASSIGN_OR_RETURN(int hidden, Int(j, "hidden_size", kMaxHidden));
  ASSIGN_OR_RETURN(int layers, Int(j, "num_hidden_layers", kMaxLayers));
  ASSIGN_OR_RETURN(int vocab, Int(j, "vocab_size", kMaxVocab));
  ASSIGN_OR_RETURN(int state, Int(j, "state_size", kMaxSsmState, 16));
  ASSIGN_OR_RETURN(int conv, Int(j, "conv_kernel", kMaxConvKernel, 4));
  ASSIGN_OR_RETURN(int expand, Int(j, "expand", kMaxExpand, 2));
  // d_inner = expand x hidden_size is itself a GEMM dimension: bounded like intermediate_size.
  ASSIGN_OR_RETURN(int64_t expanded, CheckedProduct("expand", expand, hidden, kMaxHidden));
  ASSIGN_OR_RETURN(int inner, Int(j, "intermediate_size", kMaxHidden, static_cast<int>(expanded)));
  if (inner != expanded)
    return Bad("intermediate_size",
               absl::StrCat(inner, " contradicts expand * hidden_size = ", expanded));
  int rank = (hidden + 15) / 16;
  if (auto it = j.find("time_step_rank"); it != j.end() && !(it->is_string() && *it == "auto")) {
    ASSIGN_OR_RETURN(rank, Int(j, "time_step_rank", kMaxTimeStepRank));
  }
  ASSIGN_OR_RETURN(double eps, Num(j, "layer_norm_epsilon", 1e-5));
  ASSIGN_OR_RETURN(bool tie, Bool(j, "tie_word_embeddings", true));
  a.set_hidden(hidden);
  a.set_layers(layers);
  a.set_vocab(vocab);
  a.set_d_state(state);
  a.set_d_conv(conv);
  a.set_d_inner(inner);
  a.set_dt_rank(rank);
  a.set_rms_eps(eps);
  a.set_tie_embeddings(tie);
  return a;
}

}  // namespace

absl::StatusOr<v1::ModelArch> ParseHfConfig(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InvalidArgumentError(
        "hf_config_json: not valid JSON (truncated or malformed config.json)");
  if (!j.is_object()) return absl::InvalidArgumentError("hf_config_json: must be a JSON object");
  ASSIGN_OR_RETURN(std::string type, ModelType(j));
  if (type == "mamba") return Mamba(j);
  return Transformer(j, type);
}

}  // namespace kiln::server
