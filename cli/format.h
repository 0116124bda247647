// Text and JSON renderings of jobs, workers and chips (pure functions over proto messages).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/v1/tuning_service.pb.h"
#include "nlohmann/json.hpp"

namespace kiln::cli {

// Whether a measurement is a usable result: OK (or unset) with a positive, finite median.
bool IsUsable(const v1::Measurement& m);
// What a job tunes: the first task's workload key, the spec's workload, or its model.
std::string JobWorkloadText(const v1::Job& job);
// Σ count·best median over the job's tasks (the single best for one task); 0 if any task has
// no usable best yet.
double JobBestMicros(const v1::Job& job);
// "KC=256 MC=64 MR=8" sorted by knob name.
std::string ConfigText(const v1::Config& config);

// ID, STATE, CHIP, WORKLOAD/MODEL, TRIALS, BEST (µs), CREATED. Header only when empty. With a
// model job listed the column is BEST with units: "812.5 µs", a model job's "61.3 tok/s". A line
// under the table for each job that waits for a worker ("job ID waiting: no live worker ...").
std::string FormatJobsTable(const std::vector<v1::Job>& jobs);
// {"jobs": [{"job_id", "state", "chip", "workload", "trials_done", "trials_failed",
// "budget", "best_us", "created_unix_ms", "waiting"}]}, model jobs with "tokens_per_second"
// (measured, else the estimate) and "tokens_per_second_estimated".
std::string JobsJson(const std::vector<v1::Job>& jobs);

// NAME, ID, CHIP TYPE, MODEL, CORES, STATE, LAST HEARTBEAT, TRIALS. `now_ms`: wall clock.
std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers, int64_t now_ms);
// {"workers": [{"id", "name", "state", "slots", "last_heartbeat_unix_ms",
// "heartbeat_age_s", "trials_done", "chip": {...}}]}
std::string WorkersJson(const std::vector<v1::WorkerInfo>& workers, int64_t now_ms);

// The fingerprint as a JSON object (all fields, numbers finite or null).
nlohmann::ordered_json ChipJson(const v1::ChipFingerprint& chip);

}  // namespace kiln::cli
