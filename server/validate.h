// Request validation for the coordinator: every rule names the field it checks.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/tuning_service.pb.h"
#include "kiln/v1/types.pb.h"
#include "kiln/v1/worker_service.pb.h"

namespace kiln::server {

inline constexpr int kMaxBudgetTrials = 100000;
inline constexpr double kMaxJobSeconds = 7 * 24 * 3600;

// Caps on the strings and maps of requests: whatever a request holds is stored, listed by
// `kiln jobs` / `kiln workers` and used as a metrics label, so nothing in it is unbounded.
inline constexpr size_t kMaxNameChars = 128;         // worker names, model presets, vendor
inline constexpr size_t kMaxChipLabelChars = 128;    // chip_type, a job's chip prefix, kind
inline constexpr size_t kMaxStrategyChars = 256;     // "policy:NAME" included
inline constexpr size_t kMaxDescriptionChars = 256;  // chip model, compiler, hostname
inline constexpr size_t kMaxKeyChars = 64;           // knob and dimension names, epilogue, phase
inline constexpr size_t kMaxSourceHashChars = 128;   // a reported kernel source hash
inline constexpr size_t kMaxToolchainChars = 1024;   // a reported compiler and its flags
inline constexpr int kMaxKnobs = 64;                 // entries of a pin map or a config
inline constexpr int kMaxExcludedValues = 1024;      // values of one knob in JobSpec.exclude
inline constexpr int kMaxDims = 16;                  // a workload's named dimensions
inline constexpr int kMaxIsaFeatures = 1024;         // x86 /proc/cpuinfo lists about 150
inline constexpr int kMaxReplayKnobs = 64;
inline constexpr int kMaxReplayKnobValues = 1 << 16;
// A HuggingFace config.json is a few KB; 1 MiB keeps a spec well inside gRPC's 4 MiB message.
inline constexpr size_t kMaxHfConfigBytes = 1 << 20;

// INVALID_ARGUMENT naming `field` and `max` when `value` is longer, quoting a short prefix.
absl::Status CheckLength(absl::string_view field, absl::string_view value, size_t max);
// The caps above on every string and map of a JobSpec; ValidateJobSpec checks them first.
absl::Status CheckJobSpecSizes(const v1::JobSpec& spec);
// Register: the worker's name and every string of its fingerprint (no control characters in
// the ones shown in listings and metrics labels).
absl::Status ValidateRegisterRequest(const v1::RegisterRequest& request);
// LookupBest: the workload and the chip-type label.
absl::Status ValidateLookupBestRequest(const v1::LookupBestRequest& request);

// Checks a JobSpec before anything is written. Fills nothing; see NormalizeJobSpec.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);
// Model jobs: spec.model or spec.hf_config_json is set.
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
