#include "server/planner/planner.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"
#include "common/status.h"

namespace kiln::server {

absl::StatusOr<ModelPlan> PlanModelJob(const v1::JobSpec& spec) {
  ModelPlan plan;
  if (!spec.hf_config_json().empty()) {
    if (!spec.model().empty())
      return absl::InvalidArgumentError("model: give a preset or hf_config_json, not both");
    ASSIGN_OR_RETURN(plan.arch, ParseHfConfig(spec.hf_config_json()));
  } else {
    ASSIGN_OR_RETURN(plan.arch, PresetArch(spec.model()));
  }
  const std::string phase = spec.phase().empty() ? "decode" : spec.phase();
  if (phase != "decode" && phase != "prefill")
    return absl::InvalidArgumentError(
        absl::StrCat("phase: expected decode or prefill, got '", spec.phase(), "'"));
  const int batch = spec.batch() == 0 ? 1 : spec.batch();
  const int context = spec.context() == 0 ? 1024 : spec.context();
  const int prefill = spec.prefill_tokens() == 0 ? 512 : spec.prefill_tokens();
  if (batch < 1 || batch > 4096) return absl::InvalidArgumentError("batch: must be in 1..4096");
  if (context < 1 || context > (1 << 20))
    return absl::InvalidArgumentError("context: must be in 1..1048576");
  if (prefill < 1 || prefill > (1 << 16))
    return absl::InvalidArgumentError("prefill_tokens: must be in 1..65536");
  const v1::DType dtype = spec.dtype() == v1::DTYPE_UNSPECIFIED ? v1::FP32 : spec.dtype();
  ASSIGN_OR_RETURN(plan.graph,
                   codegen::BuildStepGraph(plan.arch, phase, batch, context, prefill, dtype));
  plan.arch.set_parameters(codegen::GraphParameters(plan.arch, plan.graph));
  std::map<std::string, size_t> index;
  auto add = [&](const codegen::StepOp& op, int times) -> absl::Status {
    const std::string key = codegen::WorkloadKey(op.workload);
    auto it = index.find(key);
    if (it == index.end()) {
      RETURN_IF_ERROR(
          codegen::ValidateWorkload(op.workload, absl::StrCat("model (", op.role, ")")));
      index[key] = plan.tasks.size();
      plan.tasks.push_back({op.workload, key, 0});
      it = index.find(key);
    }
    plan.tasks[it->second].count += times;
    return absl::OkStatus();
  };
  for (const auto& op : plan.graph.layer) RETURN_IF_ERROR(add(op, plan.graph.layers));
  for (const auto& op : plan.graph.tail) RETURN_IF_ERROR(add(op, 1));
  return plan;
}

double EstimateTokensPerSecond(const v1::Job& job, int tokens_per_step, bool use_baseline) {
  double us = 0;
  for (const auto& t : job.tasks()) {
    const v1::Measurement& m = use_baseline ? t.baseline() : t.best();
    const bool have = use_baseline ? t.has_baseline() : t.has_best();
    if (!have || !(m.median_us() > 0)) return 0;
    const double factor = !use_baseline && t.in_step_factor() > 0 ? t.in_step_factor() : 1.0;
    us += std::max(1, t.count()) * m.median_us() * factor;
  }
  return us > 0 ? tokens_per_step / (us * 1e-6) : 0;
}

}  // namespace kiln::server
