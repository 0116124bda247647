// The coordinator core: jobs, tasks, trial leasing, results and events. Plain C++ over a Store;
// the gRPC services are thin adapters over it (server/*_service.cc).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "kiln/v1/tuning_service.pb.h"
#include "kiln/v1/worker_service.pb.h"
#include "server/job_state.h"
#include "server/metrics.h"
#include "server/store/store.h"

namespace kiln::server {

struct CoreOptions {
  int lease_ttl_ms = 20000;          // a lease whose worker is silent this long is requeued
  int heartbeat_interval_ms = 2000;  // told to workers at registration
  int max_lease_wait_ms = 30000;     // cap on LeaseTrials long-poll
  uint64_t seed = 0;                 // ids and default job seeds; 0 = from the clock
  bool racing = true;                // tuning trials stop timing once surely slower than the best
  // Final rounds (TrialKind FINAL): once a task's budget is spent (a model job's: the job's
  // shared budget, before the composed step), its leading configurations (at most `finalists`,
  // within 1.5x of the fastest) are timed again in turns for `final_rounds` rounds, and the best
  // is the one fastest relative to the others.
  // 0 rounds: off (the best is the fastest single measurement, re-measured once).
  int final_rounds = 3;
  int finalists = 3;
};

class Coordinator {
 public:
  // `metrics` may be null (tests).
  Coordinator(Store* store, const Clock* clock, CoordinatorMetrics* metrics, CoreOptions options);
  ~Coordinator();

  // Loads jobs, trials and workers from the store; leased trials get a fresh lease period.
  absl::Status Recover();

  // TuningService.
  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  std::vector<v1::Job> ListJobs(int limit);
  absl::StatusOr<v1::JobState> CancelJob(const std::string& job_id);
  absl::StatusOr<v1::GetResultsResponse> GetResults(const std::string& job_id);
  std::vector<v1::WorkerInfo> ListWorkers();
  absl::StatusOr<std::vector<v1::TuningRecord>> LookupBest(const v1::LookupBestRequest& request);
  // Events with seq > after_seq (the first call, after_seq 0, gets a snapshot). Waits up to
  // wait_ms for one; returns at once for a finished job.
  absl::StatusOr<std::vector<v1::JobEvent>> WaitEvents(const std::string& job_id, int64_t after_seq,
                                                       int wait_ms);

  // WorkerService.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);
  absl::StatusOr<v1::LeaseTrialsResponse> LeaseTrials(const v1::LeaseTrialsRequest& request);
  absl::StatusOr<v1::ReportResultsResponse> ReportResults(const v1::ReportResultsRequest& request);
  absl::Status ReleaseTrials(const v1::ReleaseTrialsRequest& request);

  // Periodic housekeeping: lease expiry, time budgets, gauges. Called by a background thread.
  void Tick();
  // Wakes every long-poll so the server can stop.
  void Shutdown();

 private:
  struct WorkerEntry {
    v1::WorkerInfo info;
  };

  uint64_t Entropy();
  JobEntry* FindJobLocked(const std::string& job_id);
  absl::StatusOr<JobEntry*> GetJobLocked(const std::string& job_id);
  absl::Status BindLocked(JobEntry& job, const v1::ChipFingerprint& chip);
  // The next trial of `job` for a worker of `chip_type`, or null when it has none now.
  v1::Trial* NextTrialLocked(JobEntry& job, const std::string& chip_type, WriteBatch& batch);
  v1::Trial& NewTrialLocked(JobEntry& job, int task, v1::TrialKind kind);
  void ApplyResultLocked(JobEntry& job, v1::Trial& trial, const v1::Measurement& m,
                         const std::string& implementation, WriteBatch& batch);
  // A new best's re-measurement (REMEASURE trial `again`, already marked DONE and queued in
  // `batch`): it confirms the first figure within 3% and becomes the task's best if it still
  // beats it, or it is demoted (its record takes the re-measured figure, the task keeps its
  // best confirmed one); a failed re-measurement's record becomes that failure.
  void ApplyRemeasureLocked(JobEntry& job, v1::Trial& again, WriteBatch& batch);
  void MaybeFinishLocked(JobEntry& job, WriteBatch& batch);
  // Creates the final rounds of every task of `job` that is due for them (budget spent, every
  // trial answered, two or more contenders); returns the first trial created, or null.
  v1::Trial* StartFinalsLocked(JobEntry& job, WriteBatch& batch);
  // Scores the finalists of `task` once all its FINAL trials are answered, sets its best, and
  // writes each finalist's record from its final rounds.
  void DecideFinalsLocked(JobEntry& job, int task, WriteBatch& batch);
  // Model jobs: the estimated tokens/s after a task's best changed (and its gauge).
  void UpdateBestTokensLocked(JobEntry& job);
  void FinishLocked(JobEntry& job, v1::JobState state, const std::string& message,
                    WriteBatch& batch);
  void ExpireLeasesLocked(WriteBatch& batch);
  void PushEventLocked(JobEntry& job, v1::JobEvent::Kind kind, int task = -1,
                       const v1::Measurement* best = nullptr);
  void UpdateGaugesLocked();
  bool WorkerAliveLocked(const v1::WorkerInfo& w) const;
  absl::Status WriteLocked(const WriteBatch& batch);

  Store* store_;
  const Clock* clock_;
  CoordinatorMetrics* metrics_;
  CoreOptions options_;
  std::mutex mu_;
  std::condition_variable work_cv_;   // new work for LeaseTrials
  std::condition_variable event_cv_;  // new job events for WaitEvents
  bool shutdown_ = false;
  std::mt19937_64 rng_;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  std::map<std::string, std::string> trial_job_;  // trial id -> job id
  std::map<std::string, WorkerEntry> workers_;
};

}  // namespace kiln::server
