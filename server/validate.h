// Request validation for the coordinator: every rule names the field it checks.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "kiln/v1/types.pb.h"

namespace kiln::server {

inline constexpr int kMaxBudgetTrials = 100000;
inline constexpr double kMaxJobSeconds = 7 * 24 * 3600;

// Checks a JobSpec before anything is written. Fills nothing; see NormalizeJobSpec.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);
// Model jobs (issue 4): spec.model or spec.hf_config_json is set.
bool IsModelJob(const v1::JobSpec& spec);
absl::Status ValidateModelJobSpec(const v1::JobSpec& spec);
// The rules every job shares: chip, budget, time, strategy, priority.
absl::Status ValidateCommon(const v1::JobSpec& spec);
// Applies defaults (budget 64, strategy "default", seed from `entropy` when 0).
void NormalizeJobSpec(v1::JobSpec* spec, uint64_t entropy);

// Ids: "j-" + 12 hex digits for jobs, "w-" + 12 for workers; trials are JOB-NNNNNN.
std::string NewId(char prefix, uint64_t entropy);
absl::Status ValidateJobId(const std::string& id, const std::string& field = "job_id");
absl::Status ValidateWorkerId(const std::string& id, const std::string& field = "worker_id");

}  // namespace kiln::server
