// The results of a job as a readable table and as the JSON object of DESIGN.md §8.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/v1/tuning_service.pb.h"

namespace kiln::cli {

// A trial whose result was refused: a failed measurement (COMPILE_ERROR, WRONG_RESULT, SUSPECT,
// TIMEOUT, CRASHED, ...) or a new best that its re-measurement demoted.
struct RefusedTrial {
  v1::Config config;
  v1::TrialKind kind = v1::TUNE;
  std::string status;   // the MeasurementStatus name, or "DEMOTED"
  std::string message;  // the worker's or the coordinator's reason, in full
};

// One task's outcome, with best and baseline taken from the task result or, when the
// coordinator left them out, from the job's trials.
struct TaskSummary {
  std::string workload;
  int count = 1;
  int ok = 0;
  int failed = 0;
  int budget = 0;
  std::optional<v1::Measurement> best;
  v1::Config best_config;
  std::optional<v1::Measurement> baseline;
  std::string baseline_name;
  int baseline_threads = 0;                  // the winning route's threads (0: not reported)
  std::optional<double> speedup;             // baseline median / best median
  std::vector<v1::Finalist> finalists;       // the final rounds, winner first (empty: none)
  std::vector<v1::Finalist> step_finalists;  // the same timed inside the step, fastest first
  std::vector<RefusedTrial> refused;         // in trial order (the composed step's is the job's)
  std::map<std::string, int> refused_by_status;
  // What came from earlier jobs: TUNE trials answered from their tuning records, the best known
  // configurations timed again first, and the job that first measured the best ("" if this one).
  int answered_from_records = 0;
  int seeded_from_best_known = 0;
  std::string best_from_job;
  // Model jobs after the probe step: its kernel's time inside the step over its time alone (0:
  // not measured); the task scheduler weighs the task by it.
  double in_step_factor = 0;
};

std::vector<TaskSummary> SummarizeTasks(const v1::GetResultsResponse& results);

// A task's figures as the results table shows them (the report's summary table shows the same):
// best median, GFLOP/s, GB/s, the baseline ("onednn-packed/2t 551.0") and the speedup; "-" where
// there is none.
struct TaskCells {
  std::string best_us, gflops, gbytes_per_s, baseline, speedup;
};
TaskCells CellsOf(const TaskSummary& t);

// Job line (id, state, chip type), message, one row per task, then each task's best config.
std::string FormatResultsTable(const v1::GetResultsResponse& results);

// One JSON object: job_id, state, chip_type, message, tasks[...], and chip when given.
std::string ResultsJson(const v1::GetResultsResponse& results,
                        const v1::ChipFingerprint* chip = nullptr);

}  // namespace kiln::cli
