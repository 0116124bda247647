#include "server/coordinator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/planner/planner.h"
#include "server/planner/task_scheduler.h"
#include "server/trial_scheduler.h"
#include "server/validate.h"

namespace kiln::server {
namespace {

constexpr size_t kMaxEvents = 256;

// The spec of a job that continues the finished job `old` (JobSpec.extend_job_id): old's own
// workload, chip and constraints, so that its best configurations apply and the results compare;
// the request may change only the budget, time limit, priority, seed and strategy.
absl::StatusOr<v1::JobSpec> ExtendedSpec(const v1::Job& old, const v1::JobSpec& request) {
  const auto s = old.state();
  if (s != v1::SUCCEEDED && s != v1::FAILED && s != v1::CANCELLED)
    return absl::FailedPreconditionError(
        absl::StrCat("extend_job_id: job ", old.id(), " is ", v1::JobState_Name(s),
                     "; a job is extended once it has finished (wait for it, or cancel it)"));
  auto same_work = [](v1::JobSpec spec) {  // what the request may not change
    for (auto clear :
         {&v1::JobSpec::clear_budget_trials, &v1::JobSpec::clear_max_seconds,
          &v1::JobSpec::clear_priority, &v1::JobSpec::clear_seed, &v1::JobSpec::clear_strategy,
          &v1::JobSpec::clear_owner, &v1::JobSpec::clear_extend_job_id, &v1::JobSpec::clear_arch})
      (spec.*clear)();
    return spec;
  };
  v1::JobSpec asked = same_work(request);
  if (asked.ByteSizeLong() > 0) NormalizeJobSpec(&asked, 1);  // defaults as old's were filled
  if (asked.ByteSizeLong() > 0 && !google::protobuf::util::MessageDifferencer::Equivalent(
                                      same_work(asked), same_work(old.spec())))
    return absl::InvalidArgumentError(absl::StrCat(
        "extend_job_id: the job continues ", old.id(),
        "'s own workload, chip and constraints; leave them out (only the budget, max_seconds, "
        "priority, seed and strategy may change)"));
  v1::JobSpec spec = old.spec();
  spec.clear_arch();  // resolved again at submit
  spec.set_owner(request.owner());
  spec.set_extend_job_id(old.id());
  if (request.budget_trials() > 0) spec.set_budget_trials(request.budget_trials());
  spec.set_max_seconds(request.max_seconds());
  spec.set_priority(request.priority());
  spec.set_seed(request.seed());  // 0: a new one, so that the strategy proposes anew
  if (!request.strategy().empty()) spec.set_strategy(request.strategy());
  return spec;
}

}  // namespace

Coordinator::Coordinator(Store* store, const Clock* clock, CoordinatorMetrics* metrics,
                         CoreOptions options)
    : store_(store),
      commits_(store),
      clock_(clock),
      metrics_(metrics),
      options_(options),
      executor_(std::make_unique<PollExecutor>(options.poll_threads)),
      proposal_waiters_(executor_.get()),
      event_waiters_(executor_.get()),
      rng_(options.seed ? options.seed
                        : static_cast<uint64_t>(clock->NowMs()) ^
                              std::chrono::steady_clock::now().time_since_epoch().count()),
      finals_(options.final_rounds, options.finalists, clock,
              FinalRounds::Hooks{
                  [this](JobEntry& job, int task, v1::TrialKind kind) -> v1::Trial& {
                    return NewTrialLocked(job, task, kind);
                  },
                  [this](JobEntry& job, v1::JobEvent::Kind kind, int task,
                         const v1::Measurement* best) { PushEventLocked(job, kind, task, best); },
                  [this](JobEntry& job) { UpdateBestTokensLocked(job); }}),
      jobs_outside_memory_(options.read_only) {}

Coordinator::~Coordinator() {
  Shutdown();
  executor_.reset();  // answers every parked call while what they use is still here
}

uint64_t Coordinator::Entropy() { return rng_(); }

absl::Status Coordinator::WriteLocked(const WriteBatch& batch) {
  if (batch.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(uint64_t ticket, QueueWriteLocked(batch));
  absl::Status written = commits_.Wait(ticket);  // the writer never takes mu_
  if (!written.ok()) RecoverFailedWritesLocked();
  return written;
}

absl::StatusOr<uint64_t> Coordinator::QueueWriteLocked(WriteBatch batch) {
  absl::StatusOr<uint64_t> ticket = commits_.Enqueue(std::move(batch));
  if (!ticket.ok()) RecoverFailedWritesLocked();  // the batch joined the failed ones
  return ticket;
}

void Coordinator::RecoverFailedWritesLocked() {
  // Callers change memory first and write after; a refused write (disk full, database gone)
  // must not leave counts, budgets or bests that the store does not hold, or a restart would
  // count the same trial twice. The touched jobs are reloaded as stored; their trials are
  // answered again later. (Nothing failed: a flag read, so every call may come here first.)
  if (!commits_.HasFailed()) return;
  std::vector<WriteBatch> failed = commits_.TakeFailed();
  if (failed.empty()) return;
  WriteBatch touched;  // what RestoreFromStoreLocked reads: the ids of jobs, trials and workers
  for (WriteBatch& b : failed) {
    for (auto& j : b.jobs) touched.jobs.push_back(std::move(j));
    for (auto& t : b.trials) touched.trials.push_back(std::move(t));
    for (auto& w : b.workers) touched.workers.push_back(std::move(w));
    for (auto& id : b.removed_workers) touched.removed_workers.push_back(std::move(id));
  }
  RestoreFromStoreLocked(touched);
}

JobEntry* Coordinator::FindJobLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

absl::StatusOr<JobEntry*> Coordinator::GetJobLocked(const std::string& job_id) {
  RETURN_IF_ERROR(ValidateJobId(job_id));
  JobEntry* job = FindJobLocked(job_id);
  if (!job) return absl::NotFoundError(absl::StrCat("job_id: no job ", job_id));
  return job;
}

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::JobSpec& request) {
  v1::JobSpec spec = request;
  if (!request.extend_job_id().empty()) {  // the finished job's own spec, with the new budget
    const std::string& from = request.extend_job_id();
    RETURN_IF_ERROR(ValidateJobId(from, "extend_job_id"));
    std::lock_guard<std::mutex> lock(mu_);
    v1::Job old;
    if (JobEntry* e = FindJobLocked(from)) {
      old = e->job;
    } else if (auto stored = StoredJobLocked(from); stored.ok()) {
      old = *std::move(stored);
    } else {
      return absl::Status(stored.status().code(),
                          stored.status().code() == absl::StatusCode::kNotFound
                              ? absl::StrCat("extend_job_id: no job ", from, " to extend")
                              : absl::StrCat("extend_job_id: ", stored.status().message()));
    }
    ASSIGN_OR_RETURN(spec, ExtendedSpec(old, request));
  }
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  std::lock_guard<std::mutex> lock(mu_);
  NormalizeJobSpec(&spec, Entropy());
  std::string id;
  do id = NewId('j', Entropy());
  while (jobs_.count(id));
  auto entry = std::make_unique<JobEntry>();
  v1::Job& job = entry->job;
  job.set_id(id);
  *job.mutable_spec() = spec;
  job.set_state(v1::QUEUED);
  job.set_created_unix_ms(clock_->NowMs());
  if (IsModelJob(spec)) {  // one task per distinct workload of the model's step
    ASSIGN_OR_RETURN(ModelPlan plan, PlanModelJob(spec));
    *job.mutable_spec()->mutable_arch() = plan.arch;
    for (const PlannedTask& t : plan.tasks) {
      v1::TaskResult* task = job.add_tasks();
      *task->mutable_workload() = t.workload;
      task->set_workload_key(t.key);
      task->set_count(t.count);
      task->set_trials_budget(spec.budget_trials());  // a cap; the job's budget is shared
    }
  } else {
    v1::TaskResult* task = job.add_tasks();
    *task->mutable_workload() = spec.workload();
    task->set_workload_key(codegen::WorkloadKey(spec.workload()));
    task->set_count(1);
    task->set_trials_budget(spec.budget_trials());
  }
  entry->tasks.resize(job.tasks_size());
  entry->next_event_seq = clock_->NowMs() * 1000;
  job.set_waiting(WaitingForLocked(job));  // said at once: the first event and GetJob carry it
  WriteBatch batch;
  batch.jobs.push_back(job);
  RETURN_IF_ERROR(WriteLocked(batch));  // nothing is kept in memory unless it was stored
  PushEventLocked(*entry, v1::JobEvent::STATE);
  jobs_[id] = std::move(entry);
  UpdateJobGaugesLocked();
  // The first lease of a matching chip type binds the job (and wakes the rest once it is bound):
  // one parked lease of each such type is woken, not all of them only to find it being bound.
  // With none parked, every lease is (one waiting for another job's proposals may take it).
  int woken = 0;
  for (auto& [chip_type, waiters] : work_waiters_)
    if (absl::StartsWith(chip_type, job.spec().chip())) woken += waiters.NotifyUpTo(1);
  if (woken == 0) WakeLeasesLocked();
  return id;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(ValidateJobId(job_id));
  if (JobEntry* job = FindJobLocked(job_id)) return job->job;
  return StoredJobLocked(job_id);
}

absl::StatusOr<std::vector<v1::Job>> Coordinator::ListJobs(int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::Job> out;
  for (const auto& [id, entry] : jobs_) out.push_back(entry->job);
  if (jobs_outside_memory_) {  // finished jobs that left memory, except those past retention
    commits_.WaitForAll();
    ASSIGN_OR_RETURN(std::vector<v1::Job> stored, store_->LoadJobs());
    const int64_t now = clock_->NowMs();
    for (v1::Job& j : stored)
      if (!jobs_.count(j.id()) && !ArchivedLocked(j, now)) out.push_back(std::move(j));
  }
  std::sort(out.begin(), out.end(), [](const v1::Job& a, const v1::Job& b) {
    return a.created_unix_ms() != b.created_unix_ms() ? a.created_unix_ms() > b.created_unix_ms()
                                                      : a.id() > b.id();
  });
  if (limit > 0 && static_cast<int>(out.size()) > limit) out.resize(limit);
  return out;
}

absl::StatusOr<v1::JobState> Coordinator::CancelJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(ValidateJobId(job_id));
  if (!FindJobLocked(job_id)) {  // an archived job has finished: nothing to cancel
    ASSIGN_OR_RETURN(v1::Job stored, StoredJobLocked(job_id));
    return stored.state();
  }
  ASSIGN_OR_RETURN(JobEntry * job, GetJobLocked(job_id));
  if (!job->terminal()) {
    WriteBatch batch;
    AdoptUnconfirmedBestsLocked(*job);
    UpdateBestTokensLocked(*job);
    FinishLocked(*job, v1::CANCELLED, "cancelled by request", batch);
    RETURN_IF_ERROR(WriteLocked(batch));
  }
  return job->job.state();
}

absl::StatusOr<v1::GetResultsResponse> Coordinator::GetResults(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(ValidateJobId(job_id));
  v1::GetResultsResponse out;
  JobEntry* entry = FindJobLocked(job_id);
  if (!entry || entry->terminal()) {
    // Archived, or finished (its trials left memory, ShedFinishedTrialsLocked): the trials as
    // stored, once every write queued so far has landed.
    commits_.WaitForAll();
    if (entry) {
      *out.mutable_job() = entry->job;
    } else {
      ASSIGN_OR_RETURN(*out.mutable_job(), StoredJobLocked(job_id));
    }
    ASSIGN_OR_RETURN(std::vector<v1::Trial> trials, store_->LoadTrials(job_id));
    for (auto& t : trials)
      if (t.state() != v1::PENDING) *out.add_trials() = std::move(t);
    return out;
  }
  ASSIGN_OR_RETURN(JobEntry * job, GetJobLocked(job_id));
  *out.mutable_job() = job->job;
  std::vector<const v1::Trial*> trials;
  for (const auto& [id, t] : job->trials) trials.push_back(&t);
  std::sort(trials.begin(), trials.end(),
            [](const v1::Trial* a, const v1::Trial* b) { return a->seq() < b->seq(); });
  for (const v1::Trial* t : trials) *out.add_trials() = *t;
  return out;
}

absl::StatusOr<std::vector<v1::TuningRecord>> Coordinator::LookupBest(
    const v1::LookupBestRequest& request) {
  RETURN_IF_ERROR(ValidateLookupBestRequest(request));
  RETURN_IF_ERROR(codegen::ValidateWorkload(request.workload(), "workload"));
  int k = request.k() == 0 ? 1 : request.k();
  if (k < 0 || k > 1000)
    return absl::InvalidArgumentError(absl::StrCat("k: must be in 1..1000, got ", k));
  return store_->TopRecords(codegen::WorkloadKey(request.workload()), request.chip_type(), k);
}

void Coordinator::PushEventLocked(JobEntry& job, v1::JobEvent::Kind kind, int task,
                                  const v1::Measurement* best) {
  v1::JobEvent& e = job.events.emplace_back();
  e.set_kind(kind);
  e.set_seq(job.next_event_seq++);
  *e.mutable_job() = job.job;
  if (task >= 0) e.set_task_index(task);
  if (best) *e.mutable_best() = *best;
  while (job.events.size() > kMaxEvents) job.events.pop_front();
  event_waiters_.NotifyAll();
}

absl::StatusOr<std::vector<v1::JobEvent>> Coordinator::WaitEvents(const std::string& job_id,
                                                                  int64_t after_seq, int wait_ms) {
  return AwaitAnswer<absl::StatusOr<std::vector<v1::JobEvent>>>(
      [&](EventsDone done) { WaitEventsAsync(job_id, after_seq, wait_ms, std::move(done)); });
}

void Coordinator::WaitEventsAsync(const std::string& job_id, int64_t after_seq, int wait_ms,
                                  EventsDone done) {
  RunWaitEvents(job_id, after_seq,
                std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, wait_ms)),
                false, std::make_shared<EventsDone>(std::move(done)));
}

void Coordinator::RunWaitEvents(const std::string& job_id, int64_t after_seq,
                                std::chrono::steady_clock::time_point deadline, bool timed_out,
                                const std::shared_ptr<EventsDone>& done) {
  std::vector<v1::JobEvent> out;
  bool parked = false;
  absl::Status status = [&]() -> absl::Status {
    std::unique_lock<std::mutex> lock(mu_);
    RETURN_IF_ERROR(ValidateJobId(job_id));
    if (!FindJobLocked(job_id)) {
      // Archived (finished: one snapshot and nothing more), or out of memory until the store
      // can be read again (a snapshot first, then nothing until it is back).
      ASSIGN_OR_RETURN(v1::Job stored, StoredJobLocked(job_id));
      const bool finished = stored.state() == v1::SUCCEEDED || stored.state() == v1::FAILED ||
                            stored.state() == v1::CANCELLED;
      if (finished || after_seq == 0) {
        v1::JobEvent& e = out.emplace_back();
        e.set_kind(v1::JobEvent::STATE);
        e.set_seq(after_seq + 1);
        *e.mutable_job() = std::move(stored);
      }
    } else {
      ASSIGN_OR_RETURN(JobEntry * job, GetJobLocked(job_id));
      for (const auto& e : job->events)
        if (e.seq() > after_seq) out.push_back(e);
      if (out.empty() && (after_seq == 0 || job->terminal())) {
        // A snapshot: the first call of a watch, or a finished job (nothing more will come).
        v1::JobEvent& e = out.emplace_back();
        e.set_kind(v1::JobEvent::STATE);
        e.set_seq(std::max(after_seq, job->next_event_seq - 1));
        *e.mutable_job() = job->job;
      }
    }
    if (!out.empty() || shutdown_ || timed_out || std::chrono::steady_clock::now() >= deadline)
      return absl::OkStatus();
    // Nothing yet: parked until an event (PushEventLocked) or the deadline, holding no thread.
    event_waiters_.Park(deadline, [this, job_id, after_seq, deadline, done](bool timed_out) {
      RunWaitEvents(job_id, after_seq, deadline, timed_out, done);
    });
    parked = true;  // not an answer: the wait's next run gives it
    return absl::OkStatus();
  }();
  if (parked) return;
  if (!status.ok()) return (*done)(status);
  (*done)(std::move(out));
}

void Coordinator::FinishLocked(JobEntry& job, v1::JobState state, const std::string& message,
                               WriteBatch& batch) {
  if (job.terminal()) return;
  job.job.set_state(state);
  job.job.set_message(message);
  job.job.clear_waiting();
  job.job.set_finished_unix_ms(clock_->NowMs());
  NoteBestFromEarlierJobs(job);
  // A strategy that saves sees all; told off the mutex by the next lease or report.
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    TaskState& task = job.tasks[i];
    if (!task.strategy || task.unseen.empty()) continue;
    ProposeRequest told;
    told.strategy = task.strategy;
    told.unseen = std::move(task.unseen);
    task.unseen.clear();
    finished_observations_.push_back(std::move(told));
  }
  // Trials not yet run are dropped; late reports for leased ones are answered as stale.
  for (const std::string& id : job.DropPending()) trial_job_.erase(id);
  batch.jobs.push_back(job.job);
  PushEventLocked(job, v1::JobEvent::STATE);
  UpdateJobGaugesLocked();
}

void Coordinator::MaybeFinishLocked(JobEntry& job, WriteBatch& batch) {
  if (job.terminal() || job.job.state() == v1::QUEUED) return;
  const bool model = IsModelJob(job.job.spec());
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    const TaskState& t = job.tasks[i];
    if (!t.baseline_created) return;
    if (!model && !job.BudgetSpent(i)) return;
  }
  if (model && (PickModelTask(job) >= 0 || StepRoundsDue(job) || StepDue(job) || StepPending(job)))
    return;
  if (!job.Settled()) return;
  if (finals_.StartLocked(job, batch)) {
    WakeLeasesLocked(job);
    return;
  }
  for (const auto& task : job.job.tasks()) {
    if (!task.has_best()) {
      FinishLocked(job, v1::FAILED,
                   task.finalists_size() > 0
                       ? absl::StrCat("every finalist of ", task.workload_key(),
                                      " failed a final round (a kernel that crashed or gave a "
                                      "wrong result when timed again; see the FINAL trials)")
                       : absl::StrCat("no configuration of ", task.workload_key(),
                                      " passed verification (", task.trials_failed(), " failed)"),
                   batch);
      return;
    }
  }
  for (const auto& [id, trial] : job.trials)
    if (trial.kind() == v1::STEP && !trial.step().probe() &&
        trial.measurement().status() == v1::WRONG_RESULT) {
      // The kernels composed do not compute the model's step: its tokens/s is not a result.
      FinishLocked(job, v1::FAILED,
                   absl::StrCat("the composed step was refused: ", trial.measurement().message(),
                                "; no measured tokens/s is reported (each operator's best "
                                "passed its own verification)"),
                   batch);
      return;
    }
  FinishLocked(job, v1::SUCCEEDED, "", batch);
}

size_t Coordinator::JobsInMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

size_t Coordinator::TrialsInMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->trials.size();
  return n;
}

void Coordinator::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  WakeLeasesLocked();
  event_waiters_.NotifyAll();
}

}  // namespace kiln::server
