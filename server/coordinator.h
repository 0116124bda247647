// The coordinator core: jobs, tasks, trial leasing, results and events. Plain C++ over a Store;
// the gRPC services are thin adapters over it (server/services.cc). Its members are defined in
// coordinator.cc (jobs, events), trial_scheduler.cc (leasing trials, applying results; see
// trial_scheduler.h), fleet.cc (workers, lease expiry, Tick, Recover) and persistence.cc (jobs
// rebuilt from the store); final rounds are server/final_rounds.h, tuning records
// server/tuning_record.h.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/strategy.h"
#include "common/clock.h"
#include "kiln/v1/tuning_service.pb.h"
#include "kiln/v1/worker_service.pb.h"
#include "server/final_rounds.h"
#include "server/group_commit.h"
#include "server/job_state.h"
#include "server/long_poll.h"
#include "server/metrics.h"
#include "server/store/store.h"

namespace kiln::server {

struct CoreOptions {
  int lease_ttl_ms = 20000;          // a lease whose worker is silent this long is requeued
  int heartbeat_interval_ms = 2000;  // told to workers at registration
  int max_lease_wait_ms = 30000;     // cap on LeaseTrials long-poll
  // Threads that run parked long-polls again (LeaseTrials, WaitEvents; server/long_poll.h) and
  // the callback RPCs' work: they may wait on a store commit or a strategy's proposals.
  int poll_threads = 8;
  uint64_t seed = 0;   // ids and default job seeds; 0 = from the clock
  bool racing = true;  // tuning trials stop timing once surely slower than the best
  // Final rounds (TrialKind FINAL): once a task's budget is spent (a model job's: the job's
  // shared budget, before the composed step), its leading configurations (at most `finalists`,
  // within 1.5x of the fastest) are timed again in turns for `final_rounds` rounds, and the best
  // is the one fastest relative to the others.
  // 0 rounds: off (the best is the fastest single measurement, re-measured once).
  int final_rounds = 3;
  int finalists = 3;
  // A worker not heard from for this long is forgotten (memory, ListWorkers and the store); its
  // leases were requeued long before, when they expired. 0: never.
  int64_t worker_purge_after_ms = 3600 * 1000;
  // Finished jobs older than this (by finish time) are not loaded into memory at start; GetJob,
  // GetResults and WatchJob read them from the store on demand. 0: load every job.
  int64_t job_retention_ms = int64_t{7} * 24 * 3600 * 1000;
  // Finished jobs kept in memory (the most recently finished; their trials already left at the
  // tick after they finished): older ones, and those past job_retention_ms, leave memory too and
  // are read from the store on demand, so memory follows the active work, not the history.
  int finished_jobs_in_memory = 100;
  // A standby's reader (server/coordinator_server.h): no job is in memory and every read goes to
  // the store, which another coordinator leads.
  bool read_only = false;
  // Makes each task's strategy when a job is bound (tests: a strategy of their own); unset:
  // agent::NewStrategy.
  std::function<absl::StatusOr<std::unique_ptr<agent::Strategy>>(const std::string& name,
                                                                 agent::StrategyContext context)>
      new_strategy = nullptr;
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
  // Newest first. Reads the store too once some finished job has left memory (an error then is
  // the store's).
  absl::StatusOr<std::vector<v1::Job>> ListJobs(int limit);
  absl::StatusOr<v1::JobState> CancelJob(const std::string& job_id);
  absl::StatusOr<v1::GetResultsResponse> GetResults(const std::string& job_id);
  std::vector<v1::WorkerInfo> ListWorkers();
  absl::StatusOr<std::vector<v1::TuningRecord>> LookupBest(const v1::LookupBestRequest& request);
  // Events with seq > after_seq (the first call, after_seq 0, gets a snapshot). Waits up to
  // wait_ms for one; returns at once for a finished job.
  absl::StatusOr<std::vector<v1::JobEvent>> WaitEvents(const std::string& job_id, int64_t after_seq,
                                                       int wait_ms);
  // The same without a thread waiting: `done` is called once, on this thread or (after a wait)
  // on one of the poll threads.
  using EventsDone = std::function<void(absl::StatusOr<std::vector<v1::JobEvent>>)>;
  void WaitEventsAsync(const std::string& job_id, int64_t after_seq, int wait_ms, EventsDone done);

  // WorkerService. `caller` is the name of the credential the request came with (CallerOf: token
  // name or certificate subject; "" for an anonymous caller of a coordinator without auth). A
  // worker id belongs to the credential that registered it: another caller's requests for it are
  // PERMISSION_DENIED.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request,
                                                const std::string& caller);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                                  const std::string& caller);
  absl::StatusOr<v1::LeaseTrialsResponse> LeaseTrials(const v1::LeaseTrialsRequest& request,
                                                      const std::string& caller);
  // The same as a long-poll that holds no thread while it waits: `done` is called once, on this
  // thread or on one of the poll threads.
  using LeaseDone = std::function<void(absl::StatusOr<v1::LeaseTrialsResponse>)>;
  void LeaseTrialsAsync(const v1::LeaseTrialsRequest& request, const std::string& caller,
                        LeaseDone done);
  // Runs `fn` on a poll thread: the callback RPCs' work, off gRPC's own threads.
  void Post(std::function<void()> fn) { executor_->Post(std::move(fn)); }
  // Only the worker holding a trial's lease at the reported attempt may report it, with
  // plausible figures; anything else is counted in `refused` and not applied.
  absl::StatusOr<v1::ReportResultsResponse> ReportResults(const v1::ReportResultsRequest& request,
                                                          const std::string& caller);
  // The same, answered once stored from the commit's thread (or this one): no thread waits.
  using ReportDone = std::function<void(absl::StatusOr<v1::ReportResultsResponse>)>;
  void ReportResultsAsync(const v1::ReportResultsRequest& request, const std::string& caller,
                          ReportDone done);
  absl::Status ReleaseTrials(const v1::ReleaseTrialsRequest& request, const std::string& caller);
  // A stopping worker: forgotten at once (memory, ListWorkers and the store) rather than counted
  // alive until its heartbeats time out; any lease it still holds is requeued. Unknown: OK.
  absl::Status Deregister(const v1::DeregisterRequest& request, const std::string& caller);

  // Periodic housekeeping: lease expiry, time budgets, gauges. Called by a background thread.
  void Tick();
  // Wakes every long-poll so the server can stop.
  void Shutdown();

  // Jobs held in memory (finished jobs past the retention period are not), and their trials
  // (a finished job's leave memory at the next Tick).
  size_t JobsInMemory();
  size_t TrialsInMemory();

 private:
  struct WorkerEntry {
    v1::WorkerInfo info;
  };
  // A LeaseTrials call between its runs (RunLease): parked while it waits for work.
  struct LeasePoll {
    v1::LeaseTrialsRequest request;
    std::string caller;
    int max = 1;
    std::chrono::steady_clock::time_point deadline;
    std::vector<uint64_t> tickets;    // every write it queued, awaited before it answers
    std::vector<std::string> demand;  // jobs whose proposal_demand_ it adds to while parked
    bool answered = false;
    bool parked = false;  // its next pass is a wake-up (or its deadline)
    LeaseDone done;
  };
  // One pass of a lease: it answers, or parks itself to run again when woken or timed out.
  void RunLease(const std::shared_ptr<LeasePoll>& poll, bool timed_out);
  // A report applied in memory, its answer and the ticket of its write.
  absl::StatusOr<std::pair<v1::ReportResultsResponse, uint64_t>> ApplyReport(
      const v1::ReportResultsRequest& request, const std::string& caller);
  void RunLeaseOnce(const std::shared_ptr<LeasePoll>& poll, bool timed_out);
  void RunWaitEvents(const std::string& job_id, int64_t after_seq,
                     std::chrono::steady_clock::time_point deadline, bool timed_out,
                     const std::shared_ptr<EventsDone>& done);

  uint64_t Entropy();
  JobEntry* FindJobLocked(const std::string& job_id);
  absl::StatusOr<JobEntry*> GetJobLocked(const std::string& job_id);
  // A job rebuilt from the store (server/persistence.cc) bound again, under the mutex.
  absl::Status BindLocked(JobEntry& job, const v1::ChipFingerprint& chip);
  // A queued job's binding to a lease's chip: what building its strategies needs, gathered under
  // the mutex (job.binding names it), the strategies built without it (a policy's network and
  // the knob spaces of a large job take long), then installed by BindLandedLocked.
  struct BindRequest {
    std::string job_id;
    uint64_t id = 0;
    v1::JobSpec spec;
    std::vector<v1::Workload> workloads;
    v1::ChipFingerprint chip;
    std::shared_ptr<agent::AgentMetrics> metrics;
    absl::StatusOr<std::vector<std::shared_ptr<TaskStrategy>>> built;
  };
  // Each task's strategy for `chip`, or why the job cannot be tuned on it (no valid configuration
  // left after the job's knob constraints). Needs no lock.
  absl::StatusOr<std::vector<std::shared_ptr<TaskStrategy>>> BuildStrategies(
      const v1::JobSpec& spec, const std::vector<v1::Workload>& workloads,
      const v1::ChipFingerprint& chip, std::shared_ptr<agent::AgentMetrics> metrics) const;
  // Installs what each request built on its job (bound and RUNNING), or fails the job with the
  // reason; dropped when the job finished, left memory, was rebuilt or bound meanwhile. True when
  // some job changed.
  bool BindLandedLocked(std::vector<BindRequest>& requests, WriteBatch& batch);
  // A task's next proposals, asked by the lease that found them run out (TaskState::proposing)
  // and made by that lease with the mutex released: the results and starts the strategy was not
  // yet told of, then Propose(n).
  struct ProposeRequest {
    std::string job_id;
    int task = 0;
    int n = 0;
    uint64_t id = 0;
    std::shared_ptr<TaskStrategy> strategy;
    std::vector<agent::Observation> unseen;
    std::vector<codegen::Config> unexcluded;
    std::vector<codegen::Config> made;
  };
  // The next trial of `job` for `worker`, or null when it has none now. A task whose proposals
  // ran out adds a request to `requests` and is passed over until the lease is back with them.
  v1::Trial* NextTrialLocked(JobEntry& job, const v1::WorkerInfo& worker, WriteBatch& batch,
                             std::vector<ProposeRequest>& requests);
  // Runs `requests` (without the mutex: only each strategy's own lock is held).
  void ProposeUnlocked(std::vector<ProposeRequest>& requests);
  // Adds each request's proposals to its task's ready queue, unless the job finished, left memory
  // or was rebuilt meanwhile (then they are dropped); a task that got none is exhausted. How
  // many were added, or -1 unless every request added some.
  int LandProposalsLocked(std::vector<ProposeRequest>& requests);
  // The last results of finished jobs (FinishLocked), told to their strategies without the mutex
  // by the next lease or report: a strategy that saves sees all. Returns those whose strategy is
  // busy proposing; TellFinishedUnlocked queues them again for a later call.
  std::vector<ProposeRequest> ObserveFinishedUnlocked(std::vector<ProposeRequest> finished);
  void TellFinishedUnlocked(std::vector<ProposeRequest> finished);
  // Whether `worker` may lease `trial`: a REMEASURE goes to another worker than the one that
  // measured the first figure while another live worker of the same chip type exists.
  bool MayLeaseLocked(const v1::Trial& trial, const v1::WorkerInfo& worker) const;
  // The worker `worker_id` when `caller` registered it: NOT_FOUND for an unknown id,
  // PERMISSION_DENIED (counted) for another credential's.
  absl::StatusOr<WorkerEntry*> OwnWorkerLocked(const std::string& worker_id,
                                               const std::string& caller);
  void RefusedLocked(const char* reason);  // kiln_rpc_refused_total{reason}
  v1::Trial& NewTrialLocked(JobEntry& job, int task, v1::TrialKind kind);
  void ApplyResultLocked(JobEntry& job, v1::Trial& trial, const v1::Measurement& m,
                         const std::string& implementation, WriteBatch& batch);
  // A new best's re-measurement (REMEASURE trial `again`, already marked DONE and queued in
  // `batch`): it confirms the first figure within 3% and becomes the task's best if it still
  // beats it, or it is demoted (its record takes the re-measured figure, the task keeps its
  // best confirmed one); a failed re-measurement's record becomes that failure.
  void ApplyRemeasureLocked(JobEntry& job, v1::Trial& again, WriteBatch& batch);
  void MaybeFinishLocked(JobEntry& job, WriteBatch& batch);
  // Model jobs: the estimated tokens/s after a task's best changed (and its gauge).
  void UpdateBestTokensLocked(JobEntry& job);
  void FinishLocked(JobEntry& job, v1::JobState state, const std::string& message,
                    WriteBatch& batch);
  void ExpireLeasesLocked(WriteBatch& batch);
  // Finished jobs keep their record in memory but not their trials, strategies or most events:
  // memory follows the active work, not the history (GetResults reads their trials from the
  // store; a late report of one of their trials is answered as stale).
  void ShedFinishedTrialsLocked();
  // Finished jobs beyond CoreOptions::finished_jobs_in_memory or past retention leave jobs_.
  void EvictFinishedJobsLocked();
  static constexpr size_t kFinishedJobEvents = 8;
  void PushEventLocked(JobEntry& job, v1::JobEvent::Kind kind, int task = -1,
                       const v1::Measurement* best = nullptr);
  // The job and queue gauges (every lease and report that changed something), and with them the
  // worker gauges (registrations, departures and each Tick: a loop over every worker, which a
  // lease or report does not change).
  void UpdateJobGaugesLocked();
  void UpdateGaugesLocked();
  bool WorkerAliveLocked(const v1::WorkerInfo& w) const;
  // Job.waiting for `job` given the live workers: why nothing can run it now, or "" when a live
  // worker matches (or the job has finished).
  std::string WaitingForLocked(const v1::Job& job) const;
  // Recomputes every unfinished job's Job.waiting, with an event for each one that changed.
  void UpdateWaitingLocked();
  // A stopped job (time budget, cancel): a best still waiting for its re-measurement is reported
  // as measured once, so the job's best, its results and its export agree.
  void AdoptUnconfirmedBestsLocked(JobEntry& job);
  // Writes go through commits_ (server/group_commit.h) in the order memory changed. Memory
  // changes first under mu_; what a caller is answered waits for the commit, so no one is told of
  // anything the store does not hold (reads such as GetJob may show a change a few milliseconds
  // before its commit). When the store refuses a write, every job and worker that it and the
  // writes queued after it touched is put back as the store holds it (RecoverFailedWritesLocked,
  // server/persistence.cc).
  //
  // WriteLocked: queued and committed before it returns, the mutex held throughout (a change the
  // caller must see stored before it goes on: a job adopted, a worker forgotten).
  absl::Status WriteLocked(const WriteBatch& batch);
  // Queued; the caller releases the mutex and answers once it is stored (GroupCommit::WhenDone:
  // leases and reports, so that neither the mutex nor a thread is held through the write).
  absl::StatusOr<uint64_t> QueueWriteLocked(WriteBatch batch);
  void RecoverFailedWritesLocked();
  // The same for a caller that was answered with a refused write: memory is the store's again
  // before it returns (the asynchronous calls leave that to the next call under the mutex).
  void RecoverIfWriteFailed() {
    if (!commits_.HasFailed()) return;
    std::lock_guard<std::mutex> lock(mu_);
    RecoverFailedWritesLocked();
  }
  // Calls `done` with `answer` once every one of `tickets` is stored, or with the store's error
  // (GroupCommit::WhenDone: from the commit's thread, no thread waiting meanwhile).
  template <typename Answer, typename Done>
  void AnswerWhenStored(const std::vector<uint64_t>& tickets, Answer answer, Done done) {
    commits_.WhenDone(
        tickets, [answer = std::move(answer), done = std::move(done)](absl::Status stored) mutable {
          if (!stored.ok()) return done(std::move(stored));
          done(std::move(answer));
        });
  }

  // server/persistence.cc.
  // A job's in-memory entry rebuilt from its stored record and trials (strategies re-bound and
  // re-fed). `previous`, the entry being replaced after a failed write, lends what the store does
  // not keep: lease deadlines extended by heartbeats, and the recent events.
  absl::StatusOr<std::unique_ptr<JobEntry>> LoadJobEntryLocked(v1::Job stored, int64_t now,
                                                               JobEntry* previous);
  void AdoptJobLocked(std::unique_ptr<JobEntry> entry);  // into jobs_ and trial_job_
  void DropJobLocked(const std::string& job_id);         // out of jobs_ and trial_job_
  // After a failed write: memory of the jobs and workers `batch` touched made the store's again.
  void RestoreFromStoreLocked(const WriteBatch& batch);
  void RetryReloadsLocked();  // jobs whose restore could not read the store
  bool ArchivedLocked(const v1::Job& job, int64_t now) const;
  // A job not in memory, read from the store (a finished job past the retention period).
  absl::StatusOr<v1::Job> StoredJobLocked(const std::string& job_id);
  void PurgeLostWorkersLocked();

  Store* store_;
  GroupCommit commits_;
  const Clock* clock_;
  CoordinatorMetrics* metrics_;
  CoreOptions options_;
  std::mutex mu_;
  // Runs parked long-polls again; declared before the lists that park on it, and stopped first
  // (the destructor), which answers every parked call.
  std::unique_ptr<PollExecutor> executor_;
  // Leases waiting for new work, by chip type. A report wakes as many of its jobs' chip type as
  // it returned trials, and a lease that fills its batch wakes one more: on a fleet whose job has
  // spent its budget (all waiting for the last results and the final rounds) waking every
  // parked lease on every report cost a lease pass per worker per report, for nothing.
  std::map<std::string, WaitList> work_waiters_;
  WaitList& WorkWaitersLocked(const std::string& chip_type) {
    return work_waiters_.try_emplace(chip_type, executor_.get()).first->second;
  }
  // Proposals landed (LandProposalsLocked), for the leases that passed their task over while a
  // lease proposed for it, each weighted by its batch size: a batch wakes as many as it serves.
  // A report wakes one of them: on a busy fleet it rarely makes a trial for them.
  WaitList proposal_waiters_;
  // New work of any other kind (a job submitted, leases requeued, final rounds): every lease.
  void WakeLeasesLocked() {
    for (auto& [chip_type, waiters] : work_waiters_) waiters.NotifyAll();
    proposal_waiters_.NotifyAll();
  }
  // New work of one job (its final rounds): the leases of its chip type, once it is bound.
  void WakeLeasesLocked(const JobEntry& job) {
    if (job.job.chip_type().empty()) return WakeLeasesLocked();
    WorkWaitersLocked(job.job.chip_type()).NotifyAll();
    proposal_waiters_.NotifyAll();
  }
  WaitList event_waiters_;  // WaitEvents calls waiting for new job events
  bool shutdown_ = false;
  std::mt19937_64 rng_;
  // Final rounds of the jobs' tasks (NextTrialLocked and MaybeFinishLocked start them,
  // ApplyResultLocked decides them), calling back into NewTrialLocked, PushEventLocked and
  // UpdateBestTokensLocked.
  FinalRounds finals_;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs_;
  uint64_t next_propose_id_ = 1;  // TaskState::proposing, JobEntry::binding
  // Job id -> the trials asked for by the leases waiting for its proposals (on proposal_cv_):
  // counted into the next batch's size as if in flight.
  std::map<std::string, int> proposal_demand_;
  // Finished jobs' results not yet told to their strategies (ObserveFinishedUnlocked).
  std::vector<ProposeRequest> finished_observations_;
  // Some job of the store is not in jobs_ (evicted, or not loaded at start): ListJobs reads the
  // store too.
  bool jobs_outside_memory_ = false;
  std::map<std::string, std::string> trial_job_;  // trial id -> job id
  std::map<std::string, WorkerEntry> workers_;
  // No lease expires before this (ExpireLeasesLocked scans only once it has come): a lower
  // bound, lowered by each lease given and reset by each job adopted into memory.
  int64_t earliest_lease_expiry_ms_ = 0;
  // Jobs taken out of memory after a failed write whose store could not be read either; Tick
  // loads them again.
  std::set<std::string> reload_pending_;
  std::set<std::string> worker_gauge_types_;  // chip types given a kiln_workers gauge
};

}  // namespace kiln::server
