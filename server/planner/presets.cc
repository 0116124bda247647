// The built-in model presets (numbers from each model's published config.json).
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/planner/planner.h"

namespace kiln::server {
namespace {

v1::ModelArch Llama(const char* name, int hidden, int inter, int layers, int heads, int kv,
                    int vocab, bool tie, double theta) {
  v1::ModelArch a;
  a.set_name(name);
  a.set_family("llama");
  a.set_hidden(hidden);
  a.set_intermediate(inter);
  a.set_layers(layers);
  a.set_heads(heads);
  a.set_kv_heads(kv);
  a.set_head_dim(hidden / heads);
  a.set_vocab(vocab);
  a.set_tie_embeddings(tie);
  a.set_rms_eps(1e-5);
  a.set_rope_theta(theta);
  return a;
}

v1::ModelArch Mamba(const char* name, int hidden, int layers) {
  v1::ModelArch a;
  a.set_name(name);
  a.set_family("mamba");
  a.set_hidden(hidden);
  a.set_layers(layers);
  a.set_vocab(50280);
  a.set_d_inner(2 * hidden);
  a.set_d_state(16);
  a.set_d_conv(4);
  a.set_dt_rank((hidden + 15) / 16);
  a.set_tie_embeddings(true);
  a.set_rms_eps(1e-5);
  return a;
}

const std::map<std::string, v1::ModelArch>& Presets() {
  static const auto* presets = [] {
    auto* p = new std::map<std::string, v1::ModelArch>;
    (*p)["tinyllama-1.1b"] = Llama("tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, false, 1e4);
    (*p)["llama-3.2-1b"] = Llama("llama-3.2-1b", 2048, 8192, 16, 32, 8, 128256, true, 5e5);
    (*p)["llama-3-8b"] = Llama("llama-3-8b", 4096, 14336, 32, 32, 8, 128256, false, 5e5);
    (*p)["mistral-7b"] = Llama("mistral-7b", 4096, 14336, 32, 32, 8, 32000, false, 1e4);
    v1::ModelArch mixtral = Llama("mixtral-8x7b", 4096, 14336, 32, 32, 8, 32000, false, 1e6);
    mixtral.set_family("mixtral");
    mixtral.set_experts(8);
    mixtral.set_experts_per_token(2);
    (*p)["mixtral-8x7b"] = mixtral;
    (*p)["mamba-130m"] = Mamba("mamba-130m", 768, 24);
    (*p)["mamba-1.4b"] = Mamba("mamba-1.4b", 2048, 48);
    return p;
  }();
  return *presets;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, arch] : Presets()) names.push_back(name);
  return names;
}

absl::StatusOr<v1::ModelArch> PresetArch(const std::string& name) {
  auto it = Presets().find(name);
  if (it == Presets().end())
    return absl::InvalidArgumentError(absl::StrCat(
        "model: unknown preset '", name, "'; presets: ", absl::StrJoin(PresetNames(), ", "),
        " (or give a config.json with --hf-config)"));
  return it->second;
}

}  // namespace kiln::server
