#include "server/validate.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/strategy.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "server/planner/planner.h"

namespace kiln::server {
namespace {

bool IsHexId(const std::string& id, char prefix) {
  if (id.size() != 14 || id[0] != prefix || id[1] != '-') return false;
  for (size_t i = 2; i < id.size(); ++i)
    if (!absl::ascii_isxdigit(id[i]) || absl::ascii_isupper(id[i])) return false;
  return true;
}

// Whether the template's space has `knob` on some chip of its kind: a job is validated before it
// is bound to a chip, and some knobs exist only where the chip has them (VEC with AVX-512's 16
// lanes), so the space is asked under each vector width; binding checks the chip it gets.
bool SomeChipHasKnob(const codegen::KernelTemplate& tmpl, const v1::Workload& w,
                     const std::string& knob) {
  for (int lanes : {8, 16, 4}) {
    codegen::ChipTraits traits;
    traits.vector_floats = lanes;
    traits.vector_registers = lanes == 16 ? 32 : 16;
    if (tmpl.Space(w, traits).FindKnob(knob)) return true;
  }
  return false;
}

}  // namespace

bool IsModelJob(const v1::JobSpec& spec) {
  return !spec.model().empty() || !spec.hf_config_json().empty();
}

absl::Status ValidateModelJobSpec(const v1::JobSpec& spec) {
  if (spec.has_workload())
    return absl::InvalidArgumentError(
        "workload: a model job (model or hf_config_json) takes no operator workload");
  if (spec.hf_config_json().size() > (1 << 20))
    return absl::InvalidArgumentError("hf_config_json: larger than 1 MiB");
  ASSIGN_OR_RETURN(ModelPlan plan, PlanModelJob(spec));
  RETURN_IF_ERROR(ValidateCommon(spec));
  const std::string kind = spec.chip().substr(0, spec.chip().find('-'));
  bool pinned_somewhere = spec.pin().empty();
  for (const PlannedTask& t : plan.tasks) {
    auto tmpl = codegen::FindTemplate(t.workload, kind);
    if (tmpl.status().code() == absl::StatusCode::kNotFound)
      return absl::InvalidArgumentError(absl::StrCat("model: ", tmpl.status().message()));
    if (!tmpl.ok()) continue;
    for (const auto& [knob, value] : spec.pin())
      pinned_somewhere |= SomeChipHasKnob(**tmpl, t.workload, knob);
  }
  if (!pinned_somewhere)
    return absl::InvalidArgumentError("pin: no operator of the model has the pinned knobs");
  return absl::OkStatus();
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  if (IsModelJob(spec)) return ValidateModelJobSpec(spec);
  if (!spec.phase().empty() || spec.batch() != 0 || spec.context() != 0 ||
      spec.prefill_tokens() != 0 || spec.dtype() != v1::DTYPE_UNSPECIFIED)
    return absl::InvalidArgumentError(
        "phase/batch/context/prefill_tokens/dtype: apply to model jobs (model or hf_config_json); "
        "an operator job's dtype is workload.dtype");
  if (!spec.has_workload())
    return absl::InvalidArgumentError("workload: an operator workload (op and shape) is required");
  if (auto s = codegen::ValidateWorkload(spec.workload(), "workload"); !s.ok()) return s;
  return ValidateCommon(spec);
}

absl::Status ValidateCommon(const v1::JobSpec& spec) {
  if (spec.chip().empty())
    return absl::InvalidArgumentError(
        "chip: a chip-type label prefix is required (e.g. cpu, cpu-x86_64-avx512)");
  for (char c : spec.chip())
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '_' || c == '.' ||
          c == ':'))
      return absl::InvalidArgumentError(absl::StrCat(
          "chip: '", spec.chip(), "' may hold only lower-case letters, digits and - _ . :"));
  if (spec.budget_trials() < 0 || spec.budget_trials() > kMaxBudgetTrials)
    return absl::InvalidArgumentError(absl::StrCat(
        "budget_trials: must be in 1..", kMaxBudgetTrials, ", got ", spec.budget_trials()));
  if (!std::isfinite(spec.max_seconds()) || spec.max_seconds() < 0 ||
      spec.max_seconds() > kMaxJobSeconds)
    return absl::InvalidArgumentError(absl::StrCat("max_seconds: must be in 0..", kMaxJobSeconds,
                                                   " (0 = no limit), got ", spec.max_seconds()));
  if (auto s = agent::CheckStrategyName(spec.strategy()); !s.ok()) return s;
  if (spec.priority() < -100 || spec.priority() > 100)
    return absl::InvalidArgumentError(
        absl::StrCat("priority: must be in -100..100, got ", spec.priority()));
  if (IsModelJob(spec)) return absl::OkStatus();
  std::string kind = spec.chip().substr(0, spec.chip().find('-'));
  auto tmpl = codegen::FindTemplate(spec.workload(), kind);
  if (tmpl.status().code() == absl::StatusCode::kNotFound)  // the kind is known, the op is not
    return absl::InvalidArgumentError(absl::StrCat("workload: ", tmpl.status().message()));
  if (tmpl.ok()) {
    for (const auto& [knob, value] : spec.pin()) {
      if (!SomeChipHasKnob(**tmpl, spec.workload(), knob))
        return absl::InvalidArgumentError(absl::StrCat(
            "pin: ", codegen::OpName(spec.workload().op()), " on ", kind, " has no knob ", knob));
    }
  }
  return absl::OkStatus();
}

void NormalizeJobSpec(v1::JobSpec* spec, uint64_t entropy) {
  if (spec->budget_trials() == 0) spec->set_budget_trials(64);
  if (spec->strategy().empty()) spec->set_strategy("default");
  if (spec->seed() == 0) spec->set_seed(entropy | 1);
  if (IsModelJob(*spec)) {
    if (spec->phase().empty()) spec->set_phase("decode");
    if (spec->batch() == 0) spec->set_batch(1);
    if (spec->phase() == "decode" && spec->context() == 0) spec->set_context(1024);
    if (spec->phase() == "prefill" && spec->prefill_tokens() == 0) spec->set_prefill_tokens(512);
    if (spec->dtype() == v1::DTYPE_UNSPECIFIED) spec->set_dtype(v1::FP32);
    return;
  }
  if (spec->workload().dtype() == v1::DTYPE_UNSPECIFIED)
    spec->mutable_workload()->set_dtype(v1::FP32);
}

std::string NewId(char prefix, uint64_t entropy) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%c-%012llx", prefix,
                static_cast<unsigned long long>(entropy & 0xffffffffffffULL));
  return buf;
}

absl::Status ValidateJobId(const std::string& id, const std::string& field) {
  if (IsHexId(id, 'j')) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", id, "' is not a job id (expected j- and 12 hex digits)"));
}

absl::Status ValidateWorkerId(const std::string& id, const std::string& field) {
  if (IsHexId(id, 'w')) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": '", id, "' is not a worker id (expected w- and 12 hex digits)"));
}

}  // namespace kiln::server
