// Model jobs: presets, HuggingFace config.json parsing, and the plan of a model job (its step's
// operator graph reduced to tasks with multiplicities), plus the tokens-per-second estimate.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codegen/model_graph.h"
#include "kiln/v1/types.pb.h"

namespace kiln::server {

// tinyllama-1.1b, llama-3.2-1b, llama-3-8b, mistral-7b, mixtral-8x7b, mamba-130m, mamba-1.4b.
std::vector<std::string> PresetNames();
absl::StatusOr<v1::ModelArch> PresetArch(const std::string& name);

// A config.json of the llama, mistral, qwen2, mixtral or mamba architectures. Malformed JSON, an
// unknown architecture, a missing, mistyped or contradictory field: INVALID_ARGUMENT naming it.
absl::StatusOr<v1::ModelArch> ParseHfConfig(absl::string_view json);

struct PlannedTask {
  v1::Workload workload;
  std::string key;
  int count = 0;  // invocations per step (per layer x layers, plus the head's)
};

struct ModelPlan {
  v1::ModelArch arch;
  codegen::StepGraph graph;
  std::vector<PlannedTask> tasks;  // one per distinct workload, in first-use order
};

// Resolves spec.model (a preset) or spec.hf_config_json and plans the step for the spec's phase,
// batch, context / prefill_tokens and dtype. Errors name the JobSpec field.
absl::StatusOr<ModelPlan> PlanModelJob(const v1::JobSpec& spec);

// tokens per step / sum(count * median) from each task's best (or, with use_baseline, the
// baseline's) median; 0 when a task has none. A best's median is scaled by its task's
// in_step_factor once the probe step has measured it.
double EstimateTokensPerSecond(const v1::Job& job, int tokens_per_step, bool use_baseline = false);

}  // namespace kiln::server
