#include "server/validate.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/strategy.h"
#include "codegen/kernel_template.h"
#include "codegen/knob_constraints.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "common/text.h"
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

bool HasControlChar(absl::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

// A label shown in listings and used as a metrics label: bounded, one line.
absl::Status CheckLabel(absl::string_view field, absl::string_view value, size_t max) {
  RETURN_IF_ERROR(CheckLength(field, value, max));
  if (HasControlChar(value))
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": control characters are not allowed, got '", ShortQuote(value), "'"));
  return absl::OkStatus();
}

absl::Status CheckKeys(absl::string_view field,
                       const google::protobuf::Map<std::string, int64_t>& m, int max_entries) {
  if (m.size() > static_cast<size_t>(max_entries))
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", max_entries, " entries, got ", m.size()));
  for (const auto& [key, value] : m) RETURN_IF_ERROR(CheckLabel(field, key, kMaxKeyChars));
  return absl::OkStatus();
}

absl::Status CheckWorkloadSizes(absl::string_view field, const v1::Workload& w) {
  RETURN_IF_ERROR(CheckKeys(absl::StrCat(field, ".dims"), w.dims(), kMaxDims));
  return CheckLength(absl::StrCat(field, ".epilogue"), w.epilogue(), kMaxKeyChars);
}

}  // namespace

absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max) {
  if (value.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": at most ", max, " characters, got ",
                                                 value.size(), " ('", ShortQuote(value), "')"));
}

absl::Status CheckJobSpecSizes(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(CheckLength("chip", spec.chip(), kMaxChipLabelChars));
  RETURN_IF_ERROR(CheckLabel("model", spec.model(), kMaxNameChars));
  RETURN_IF_ERROR(CheckLabel("strategy", spec.strategy(), kMaxStrategyChars));
  RETURN_IF_ERROR(CheckLabel("phase", spec.phase(), kMaxKeyChars));
  if (spec.hf_config_json().size() > kMaxHfConfigBytes)
    return absl::InvalidArgumentError(absl::StrCat("hf_config_json: at most ", kMaxHfConfigBytes,
                                                   " bytes (1 MiB), got ",
                                                   spec.hf_config_json().size()));
  RETURN_IF_ERROR(CheckKeys("pin", spec.pin(), kMaxKnobs));
  for (const char* field : {"exclude", "range"}) {
    const size_t n = field[0] == 'e' ? spec.exclude_size() : spec.range_size();
    if (n > static_cast<size_t>(kMaxKnobs))
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": at most ", kMaxKnobs, " entries, got ", n));
  }
  for (const auto& [knob, values] : spec.exclude()) {
    RETURN_IF_ERROR(CheckLabel("exclude", knob, kMaxKeyChars));
    if (values.values_size() > kMaxExcludedValues)
      return absl::InvalidArgumentError(absl::StrCat(
          "exclude: at most ", kMaxExcludedValues, " values per knob, got ", values.values_size()));
  }
  for (const auto& [knob, range] : spec.range())
    RETURN_IF_ERROR(CheckLabel("range", knob, kMaxKeyChars));
  if (spec.has_workload()) RETURN_IF_ERROR(CheckWorkloadSizes("workload", spec.workload()));
  return absl::OkStatus();
}

absl::Status ValidateRegisterRequest(const v1::RegisterRequest& request) {
  RETURN_IF_ERROR(CheckLabel("name", request.name(), kMaxNameChars));
  const v1::ChipFingerprint& chip = request.chip();
  RETURN_IF_ERROR(CheckLabel("chip.kind", chip.kind(), kMaxChipLabelChars));
  RETURN_IF_ERROR(CheckLabel("chip.chip_type", chip.chip_type(), kMaxChipLabelChars));
  RETURN_IF_ERROR(CheckLabel("chip.vendor", chip.vendor(), kMaxNameChars));
  RETURN_IF_ERROR(CheckLabel("chip.model", chip.model(), kMaxDescriptionChars));
  RETURN_IF_ERROR(CheckLabel("chip.compiler", chip.compiler(), kMaxDescriptionChars));
  RETURN_IF_ERROR(CheckLabel("chip.hostname", chip.hostname(), kMaxDescriptionChars));
  if (chip.isa_features_size() > kMaxIsaFeatures)
    return absl::InvalidArgumentError(absl::StrCat("chip.isa_features: at most ", kMaxIsaFeatures,
                                                   " entries, got ", chip.isa_features_size()));
  for (const auto& f : chip.isa_features())
    RETURN_IF_ERROR(CheckLabel("chip.isa_features", f, kMaxKeyChars));
  if (chip.replay_knobs_size() > kMaxReplayKnobs)
    return absl::InvalidArgumentError(absl::StrCat("chip.replay_knobs: at most ", kMaxReplayKnobs,
                                                   " knobs, got ", chip.replay_knobs_size()));
  for (const auto& k : chip.replay_knobs()) {
    RETURN_IF_ERROR(CheckLabel("chip.replay_knobs.name", k.name(), kMaxKeyChars));
    if (k.values_size() > kMaxReplayKnobValues)
      return absl::InvalidArgumentError(absl::StrCat("chip.replay_knobs.values: at most ",
                                                     kMaxReplayKnobValues, " values, got ",
                                                     k.values_size()));
  }
  return absl::OkStatus();
}

absl::Status ValidateLookupBestRequest(const v1::LookupBestRequest& request) {
  RETURN_IF_ERROR(CheckLabel("chip_type", request.chip_type(), kMaxChipLabelChars));
  return CheckWorkloadSizes("workload", request.workload());
}

bool IsModelJob(const v1::JobSpec& spec) {
  return !spec.model().empty() || !spec.hf_config_json().empty();
}

absl::Status ValidateModelJobSpec(const v1::JobSpec& spec) {
  if (spec.has_workload())
    return absl::InvalidArgumentError(
        "workload: a model job (model or hf_config_json) takes no operator workload");
  RETURN_IF_ERROR(CheckJobSpecSizes(spec));
  ASSIGN_OR_RETURN(ModelPlan plan, PlanModelJob(spec));
  RETURN_IF_ERROR(ValidateCommon(spec));
  const std::string kind = spec.chip().substr(0, spec.chip().find('-'));
  bool pinned_somewhere = spec.pin().empty();
  // Every knob of an exclude or range must be some operator's (a misspelt one would be ignored).
  std::map<std::string, bool> constrained_somewhere;
  for (const auto& [knob, values] : spec.exclude()) constrained_somewhere[knob] = false;
  for (const auto& [knob, range] : spec.range()) constrained_somewhere[knob] = false;
  bool templates_known = false;
  for (const PlannedTask& t : plan.tasks) {
    auto tmpl = codegen::FindTemplate(t.workload, kind);
    if (tmpl.status().code() == absl::StatusCode::kNotFound)
      return absl::InvalidArgumentError(absl::StrCat("model: ", tmpl.status().message()));
    if (!tmpl.ok()) continue;
    templates_known = true;
    for (const auto& [knob, value] : spec.pin())
      pinned_somewhere |= SomeChipHasKnob(**tmpl, t.workload, knob);
    for (auto& [knob, found] : constrained_somewhere)
      found = found || SomeChipHasKnob(**tmpl, t.workload, knob);
    // Values: each operator that has a constrained knob must be left a configuration.
    RETURN_IF_ERROR(codegen::CheckKnobConstraints(spec, t.workload, **tmpl,
                                                  codegen::ConstraintNaming::kFields,
                                                  /*skip_absent_knobs=*/true));
  }
  if (!pinned_somewhere)
    return absl::InvalidArgumentError("pin: no operator of the model has the pinned knobs");
  for (const auto& [knob, found] : constrained_somewhere)
    if (templates_known && !found)
      return absl::InvalidArgumentError(
          absl::StrCat(spec.exclude().count(knob) ? "exclude" : "range",
                       ": no operator of the model has knob ", ShortQuote(knob)));
  return absl::OkStatus();
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(CheckJobSpecSizes(spec));
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
  RETURN_IF_ERROR(CheckJobSpecSizes(spec));
  if (spec.chip().empty())
    return absl::InvalidArgumentError(
        "chip: a chip-type label prefix is required (e.g. cpu, cpu-x86_64-avx512)");
  for (char c : spec.chip())
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '_' || c == '.' ||
          c == ':'))
      return absl::InvalidArgumentError(
          absl::StrCat("chip: '", ShortQuote(spec.chip()),
                       "' may hold only lower-case letters, digits and - _ . :"));
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
        return absl::InvalidArgumentError(
            absl::StrCat("pin: ", codegen::OpName(spec.workload().op()), " on ", kind,
                         " has no knob ", ShortQuote(knob)));
    }
    // The values too (pin, exclude, range), so that a job is refused at once, naming the rule,
    // rather than failing when it is bound to a chip.
    RETURN_IF_ERROR(codegen::CheckKnobConstraints(spec, spec.workload(), **tmpl,
                                                  codegen::ConstraintNaming::kFields));
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
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": '", ShortQuote(id), "' is not a job id (expected j- and 12 hex digits)"));
}

absl::Status ValidateWorkerId(const std::string& id, const std::string& field) {
  if (IsHexId(id, 'w')) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": '", ShortQuote(id), "' is not a worker id (expected w- and 12 hex digits)"));
}

}  // namespace kiln::server
