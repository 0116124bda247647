#include "server/trial_scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/kernel_template.h"
#include "codegen/knob_constraints.h"
#include "codegen/knob_space.h"  // SafeDefaultConfig
#include "common/status.h"
#include "server/coordinator.h"
#include "server/final_rounds.h"
#include "server/planner/task_scheduler.h"
#include "server/tuning_record.h"
#include "server/validate.h"

namespace kiln::server {
namespace {

// Bounds the proposals answered from the store in one call, so a lease never spins.
constexpr int kMaxCachedPerCall = 256;

}  // namespace

std::vector<codegen::Config> StartingConfigs(const JobEntry& job, int task, bool model,
                                             std::vector<codegen::Config> first) {
  const v1::Workload& w = job.job.tasks(task).workload();
  auto space = codegen::SpaceFor(w, job.job.chip());
  if (!space.ok()) return {};
  std::vector<codegen::Config> candidates = std::move(first);
  auto tmpl = codegen::FindTemplate(w, job.job.chip().kind());
  if (tmpl.ok()) {
    for (auto& c : (*tmpl)->StartingConfigs(w, codegen::TraitsFromFingerprint(job.job.chip())))
      candidates.push_back(std::move(c));
  }
  // After the template's guesses: a task that gets one trial (a small budget over many tasks)
  // measures the best guess, not the first value of every knob (for fp32 GEMM a 1 x 8 tile over
  // 16 x 64 blocks, 25-40x slower than the guess at prefill sizes).
  if (model) candidates.push_back(codegen::SafeDefaultConfig(*space));
  std::vector<codegen::Config> out;
  for (const auto& c : candidates) {
    bool ok = !c.empty() && space->IsValid(c) && std::find(out.begin(), out.end(), c) == out.end();
    ok = ok && codegen::MeetsKnobConstraints(job.job.spec(), c);  // pin, exclude, range
    if (ok) out.push_back(c);
  }
  return out;
}

std::vector<BestKnown> BestKnownConfigs(const JobEntry& job, int task, const v1::Job* extended,
                                        const std::vector<v1::TuningRecord>& top) {
  const std::string& key = job.job.tasks(task).workload_key();
  std::vector<BestKnown> out;
  auto add = [&](const v1::Config& proto, const std::string& from) {
    codegen::Config config = codegen::FromProto(proto);
    if (config.empty() || from == job.job.id()) return;
    for (const BestKnown& b : out)
      if (b.config == config) return;
    out.push_back({std::move(config), from});
  };
  if (extended)
    for (const v1::TaskResult& t : extended->tasks()) {
      if (t.workload_key() != key) continue;
      if (t.has_best())
        add(t.best_config(), t.best_from_job().empty() ? extended->id() : t.best_from_job());
      for (const v1::Finalist& f : t.finalists())
        if (!f.failed()) add(f.config(), extended->id());
    }
  for (const v1::TuningRecord& r : top)
    if (r.workload_key() == key && r.measurement().status() == v1::OK) add(r.config(), r.job_id());
  return out;
}

void NoteBestFromEarlierJobs(JobEntry& job) {
  for (size_t i = 0; i < job.tasks.size() && static_cast<int>(i) < job.job.tasks_size(); ++i) {
    v1::TaskResult* task = job.job.mutable_tasks(i);
    if (!task->has_best()) continue;
    const auto& earlier = job.tasks[i].earlier_job;
    auto it = earlier.find(codegen::ConfigKey(codegen::FromProto(task->best_config())));
    if (it != earlier.end()) task->set_best_from_job(it->second);
  }
}

const v1::Trial* RemeasuredTrial(const JobEntry& job, const v1::Trial& again) {
  // The knob maps compared as they are (no key built a trial: this runs for every new best).
  auto same = [&](const v1::Config& c) {
    if (c.knobs_size() != again.config().knobs_size()) return false;
    for (const auto& [name, value] : c.knobs()) {
      auto it = again.config().knobs().find(name);
      if (it == again.config().knobs().end() || it->second != value) return false;
    }
    return true;
  };
  const v1::Trial* first = nullptr;
  for (const auto& [id, t] : job.trials)
    if (t.kind() == v1::TUNE && t.task_index() == again.task_index() && t.state() == v1::DONE &&
        t.seq() < again.seq() && (!first || t.seq() > first->seq()) && same(t.config()))
      first = &t;
  return first;
}

absl::StatusOr<std::vector<std::shared_ptr<TaskStrategy>>> Coordinator::BuildStrategies(
    const v1::JobSpec& spec, const std::vector<v1::Workload>& workloads,
    const v1::ChipFingerprint& chip, std::shared_ptr<agent::AgentMetrics> metrics) const {
  std::vector<std::shared_ptr<TaskStrategy>> out;
  for (size_t i = 0; i < workloads.size(); ++i) {
    const v1::Workload& w = workloads[i];
    ASSIGN_OR_RETURN(codegen::KnobSpace space, codegen::SpaceFor(w, chip));
    // The human constraints (pin, exclude, range); a model job's name other operators' knobs too.
    RETURN_IF_ERROR(codegen::ApplyKnobConstraints(spec, IsModelJob(spec), &space));
    if (space.EnumerateValid(1).empty() && space.CartesianSize() < (1u << 22))
      return absl::InvalidArgumentError(
          "no valid configuration is left after the pins, exclusions and ranges");
    agent::StrategyContext ctx;
    ctx.space = std::move(space);
    ctx.workload = w;
    ctx.chip = chip;
    ctx.seed = spec.seed() + i;
    ctx.metrics = metrics;
    const std::string& name = spec.strategy();
    ASSIGN_OR_RETURN(std::unique_ptr<agent::Strategy> strategy,
                     options_.new_strategy ? options_.new_strategy(name, std::move(ctx))
                                           : agent::NewStrategy(name, std::move(ctx)));
    out.push_back(std::make_shared<TaskStrategy>(std::move(strategy)));
  }
  return out;
}

absl::Status Coordinator::BindLocked(JobEntry& job, const v1::ChipFingerprint& chip) {
  std::vector<v1::Workload> workloads;
  for (size_t i = 0; i < job.tasks.size(); ++i) workloads.push_back(job.job.tasks(i).workload());
  ASSIGN_OR_RETURN(auto built,
                   BuildStrategies(job.job.spec(), workloads, chip,
                                   metrics_ ? metrics_->AgentSink(job.job.id()) : nullptr));
  job.job.set_chip_type(chip.chip_type());
  *job.job.mutable_chip() = chip;
  for (size_t i = 0; i < job.tasks.size(); ++i) job.tasks[i].strategy = std::move(built[i]);
  return absl::OkStatus();
}

bool Coordinator::BindLandedLocked(std::vector<BindRequest>& requests, WriteBatch& batch) {
  bool changed = false;
  for (BindRequest& r : requests) {
    JobEntry* job = FindJobLocked(r.job_id);
    // Cancelled, evicted or rebuilt (a refused write) meanwhile: what was built goes unused.
    if (!job || job->binding != r.id) continue;
    job->binding = 0;
    if (job->terminal() || !job->job.chip_type().empty() || job->tasks.size() != r.workloads.size())
      continue;
    changed = true;
    const std::string& label = r.chip.chip_type();
    job->job.set_chip_type(label);
    *job->job.mutable_chip() = r.chip;
    if (!r.built.ok()) {
      FinishLocked(*job, v1::FAILED,
                   absl::StrCat("cannot tune on ", label, ": ", r.built.status().message()), batch);
      continue;
    }
    for (size_t i = 0; i < job->tasks.size(); ++i)
      job->tasks[i].strategy = std::move((*r.built)[i]);
    job->job.set_state(v1::RUNNING);
    job->job.set_started_unix_ms(clock_->NowMs());
    batch.jobs.push_back(job->job);
    PushEventLocked(*job, v1::JobEvent::STATE);
  }
  return changed;
}

void Coordinator::UpdateBestTokensLocked(JobEntry& job) {
  if (!IsModelJob(job.job.spec())) return;
  UpdateEstimate(job);
  const double tps = job.job.tokens_per_second().estimated();
  if (metrics_ && tps > 0 && job.job.tokens_per_second().measured() <= 0)
    metrics_->SetBestTokensPerSecond(job.job.id(), tps);
}

v1::Trial& Coordinator::NewTrialLocked(JobEntry& job, int task, v1::TrialKind kind) {
  v1::Trial t;
  char suffix[16];
  std::snprintf(suffix, sizeof(suffix), "-%06lld", static_cast<long long>(job.next_trial_seq));
  t.set_id(job.job.id() + suffix);
  t.set_seq(job.next_trial_seq++);
  t.set_job_id(job.job.id());
  t.set_task_index(task);
  t.set_attempt(1);
  t.set_kind(kind);
  t.set_state(v1::PENDING);
  *t.mutable_workload() = job.job.tasks(task).workload();
  trial_job_[t.id()] = job.job.id();
  return job.AddTrial(std::move(t));
}

bool Coordinator::MayLeaseLocked(const v1::Trial& trial, const v1::WorkerInfo& worker) const {
  const std::string& first_id = trial.exclude_worker_id();
  if (first_id.empty()) return true;
  auto first = workers_.find(first_id);
  const std::string* first_owner = first == workers_.end() ? nullptr : &first->second.info.owner();
  // Who else could confirm the first figure now: another live worker of the chip type, better
  // one registered with another credential than the first's (a credential running several
  // workers could otherwise confirm its own figures).
  bool other = false, other_owner = false;
  for (const auto& [id, w] : workers_) {
    if (id == first_id || w.info.chip().chip_type() != worker.chip().chip_type() ||
        !WorkerAliveLocked(w.info))
      continue;
    other = true;
    other_owner = other_owner || (first_owner && w.info.owner() != *first_owner);
  }
  if (other_owner) return worker.owner() != *first_owner;
  if (other) return worker.id() != first_id;
  return true;  // no one else: the first worker re-measures, as with a single worker
}

v1::Trial* Coordinator::NextTrialLocked(JobEntry& job, const v1::WorkerInfo& worker,
                                        WriteBatch& batch, std::vector<ProposeRequest>& requests) {
  const std::string& chip_type = worker.chip().chip_type();
  for (auto& [seq, t] : job.pending)  // oldest first
    if (MayLeaseLocked(*t, worker)) return t;
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    if (!job.tasks[i].baseline_created) {
      job.tasks[i].baseline_created = true;
      return &NewTrialLocked(job, i, v1::BASELINE);
    }
  }
  const bool model = IsModelJob(job.job.spec());
  // A model job whose shared budget is spent: each task's final rounds first, then the composed
  // step with their winners (also when the last proposals were answered from the store just now).
  auto finals_or_step = [&]() -> v1::Trial* {
    if (v1::Trial* final_trial = finals_.StartLocked(job, batch)) return final_trial;
    if (StepRoundsDue(job)) {  // each task's finalists timed inside the step, in turns
      v1::Trial* first = nullptr;
      for (v1::StepRequest& req : BuildStepRounds(job)) {
        v1::Trial& round = NewTrialLocked(job, 0, v1::STEP);
        *round.mutable_step() = std::move(req);
        batch.trials.push_back(round);
        if (!first) first = &round;  // goes out with this lease
      }
      return first;
    }
    if (!StepDue(job)) return nullptr;
    v1::Trial& step = NewTrialLocked(job, 0, v1::STEP);
    *step.mutable_step() = BuildStepRequest(job);
    return &step;
  };
  if (model && ProbeDue(job)) {  // midway: the tasks' kernels timed inside the step
    v1::Trial& probe = NewTrialLocked(job, 0, v1::STEP);
    *probe.mutable_step() = BuildStepRequest(job, /*probe=*/true);
    return &probe;
  }
  if (model && PickModelTask(job) < 0) return finals_or_step();
  for (int cached = 0; cached < kMaxCachedPerCall;) {
    // Model jobs: the task with the largest expected gain in tokens/s (Ansor's rule); single
    // operators: the task furthest behind its budget share. A task waiting for a lease to bring
    // its strategy's proposals is passed over; when only such tasks are left, the job has no
    // trial now (that lease takes them, or wakes the long-polls when it is back).
    int pick = -1;
    bool awaiting = false;
    double least = 2;
    for (size_t i = 0; i < job.tasks.size() && !model; ++i) {
      const TaskState& t = job.tasks[i];
      double used = static_cast<double>(t.proposed) / std::max(1, job.Budget(i));
      // (finals_started: its budget was spent; `exhausted` is not stored across a restart)
      if (job.BudgetSpent(i) || t.finals_started) continue;
      if (t.AwaitingProposals()) {
        awaiting = true;
      } else if (used < least) {
        least = used, pick = i;
      }
    }
    if (model) {
      pick = PickModelTask(job, /*skip_awaiting=*/true);
      awaiting = pick < 0 && PickModelTask(job) >= 0;
    }
    if (pick < 0 && awaiting) return nullptr;
    if (pick < 0) return model ? finals_or_step() : finals_.StartLocked(job, batch);
    TaskState& task = job.tasks[pick];
    if (!task.starts_loaded) {
      task.starts_loaded = true;
      if (task.proposed == 0) {
        // What earlier jobs know of this workload on this chip type goes first: the job this one
        // extends, then the store's fastest records (only as far as they pass the same checks).
        std::optional<v1::Job> extended;
        if (const std::string& from = job.job.spec().extend_job_id(); !from.empty()) {
          if (JobEntry* e = FindJobLocked(from)) {
            extended = e->job;
          } else if (auto stored = StoredJobLocked(from); stored.ok()) {
            extended = *std::move(stored);
          }
        }
        auto top = store_->TopRecords(job.job.tasks(pick).workload_key(), chip_type,
                                      4 * kBestKnownConfigs);
        const std::vector<BestKnown> known =
            BestKnownConfigs(job, pick, extended ? &*extended : nullptr,
                             top.ok() ? *top : std::vector<v1::TuningRecord>());
        std::vector<codegen::Config> all;
        for (const BestKnown& b : known) all.push_back(b.config);
        const std::vector<codegen::Config> valid = StartingConfigs(job, pick, model, all);
        // At most half the budget: the rest goes to configurations not measured before.
        const size_t cap = std::max(1, std::min(kBestKnownConfigs, job.Budget(pick) / 2));
        std::vector<codegen::Config> first;
        for (const BestKnown& b : known) {
          if (first.size() >= cap) break;
          if (std::find(valid.begin(), valid.end(), b.config) == valid.end()) continue;
          first.push_back(b.config);
          task.remeasure.insert(codegen::ConfigKey(b.config));
          task.earlier_job[codegen::ConfigKey(b.config)] = b.job_id;
        }
        task.starts = StartingConfigs(job, pick, model, std::move(first));
      }
      if (auto keys = store_->RecordKeyHashes(job.job.tasks(pick).workload_key(), chip_type);
          keys.ok())
        task.record_keys = std::move(*keys);
    }
    std::vector<codegen::Config> configs;
    // Earlier jobs' best known configurations, then the template's own suggestions go first;
    // `again`: one of the former, measured again.
    bool again = false;
    if (!task.starts.empty()) {
      configs = {task.starts.front()};
      task.starts.erase(task.starts.begin());
      task.unexcluded.push_back(configs[0]);  // told before the strategy next proposes
      again = task.remeasure.erase(codegen::ConfigKey(configs[0])) > 0;
    } else {
      if (task.ready.empty()) {
        if (!task.strategy) {  // never so for a bound job; the loop must not pick it again
          task.exhausted = true;
          continue;
        }
        // The next batch is made by this lease once it has released the mutex (LeaseTrials);
        // until it is back the task is passed over (AwaitingProposals). It is asked for once
        // the last batch has run out, not ahead of it, so that the strategy learns from every
        // result that came back first. Its size: as many as the task has in flight (up to
        // kMaxProposeAhead), as when proposals were made under the mutex, plus what the leases
        // waiting for this job's proposals ask for (their workers are idle: without them the
        // batches would shrink round after round while workers starve).
        int in_flight = 0;
        for (const auto& [seq, t] : job.leased) in_flight += t->task_index() == pick;
        auto waiting = proposal_demand_.find(job.job.id());
        const int parked = waiting == proposal_demand_.end() ? 0 : waiting->second;
        ProposeRequest r;
        r.job_id = job.job.id();
        r.task = pick;
        r.n = std::min({std::max(1, std::min(in_flight, kMaxProposeAhead) +
                                        std::min(parked, kMaxProposeForWaiting)),
                        std::max(1, job.Budget(pick) - task.proposed)});
        r.id = next_propose_id_++;
        r.strategy = task.strategy;
        r.unseen = std::move(task.unseen);
        task.unseen.clear();
        r.unexcluded = std::move(task.unexcluded);
        task.unexcluded.clear();
        task.proposing = r.id;
        requests.push_back(std::move(r));
        continue;
      }
      configs = {std::move(task.ready.front())};
      task.ready.pop_front();
    }
    task.proposed++;
    v1::Trial& trial = NewTrialLocked(job, pick, v1::TUNE);
    *trial.mutable_config() = codegen::ToProto(configs[0]);
    v1::TaskResult* result = job.job.mutable_tasks(pick);
    // Timed again on this machine, not answered from its record: a record's figure may have been
    // a lucky run, and the task's best must hold against the best known one timed here and now.
    if (again) {
      result->set_trials_from_earlier_jobs(result->trials_from_earlier_jobs() + 1);
      return &trial;
    }
    const std::string key = codegen::ConfigKey(configs[0]);
    if (task.record_keys &&
        !std::binary_search(task.record_keys->begin(), task.record_keys->end(), RecordKeyHash(key)))
      return &trial;  // never measured
    auto record = store_->FindRecord(job.job.tasks(pick).workload_key(), chip_type, key);
    // Only a record of the kernel the template renders today (see TuningRecord.kernel_digest).
    if (record.ok() && record->has_value() && ReusableStatus((*record)->measurement().status()) &&
        (*record)->kernel_digest() == KernelDigest(job, pick, configs[0])) {
      if ((*record)->job_id() != job.job.id()) {
        result->set_trials_from_earlier_jobs(result->trials_from_earlier_jobs() + 1);
        task.earlier_job.emplace(key, (*record)->job_id());
      }
      v1::Measurement m = (*record)->measurement();
      m.set_from_cache(true);
      ApplyResultLocked(job, trial, m, "kiln", batch);
      ++cached;
      continue;
    }
    return &trial;
  }
  return nullptr;
}

absl::StatusOr<v1::LeaseTrialsResponse> Coordinator::LeaseTrials(
    const v1::LeaseTrialsRequest& request, const std::string& caller) {
  auto answer = AwaitAnswer<absl::StatusOr<v1::LeaseTrialsResponse>>(
      [&](LeaseDone done) { LeaseTrialsAsync(request, caller, std::move(done)); });
  RecoverIfWriteFailed();
  return answer;
}

void Coordinator::LeaseTrialsAsync(const v1::LeaseTrialsRequest& request, const std::string& caller,
                                   LeaseDone done) {
  absl::Status valid = ValidateWorkerId(request.worker_id());
  if (valid.ok() && (request.max_trials() < 0 || request.max_trials() > 64))
    valid = absl::InvalidArgumentError("max_trials: must be in 1..64");
  if (valid.ok() && request.wait_ms() < 0)
    valid = absl::InvalidArgumentError("wait_ms: must be >= 0");
  if (!valid.ok()) return done(valid);
  auto poll = std::make_shared<LeasePoll>();
  poll->request = request;
  poll->caller = caller;
  poll->max = std::max(1, request.max_trials());
  poll->deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::min(request.wait_ms(), options_.max_lease_wait_ms));
  poll->done = std::move(done);
  RunLease(poll, false);
}

void Coordinator::RunLease(const std::shared_ptr<LeasePoll>& poll, bool timed_out) {
  try {
    RunLeaseOnce(poll, timed_out);
  } catch (const std::exception& e) {  // answered all the same: a call left open is never freed
    if (!poll->answered) {
      poll->answered = true;
      poll->done(absl::InternalError(std::string("LeaseTrials: ") + e.what()));
    }
  }
}

void Coordinator::RunLeaseOnce(const std::shared_ptr<LeasePoll>& poll, bool timed_out) {
  const v1::LeaseTrialsRequest& request = poll->request;
  const int max = poll->max;
  std::unique_lock<std::mutex> lock(mu_);
  // Back from a wait for proposals: what it asked for no longer counts into their batch size.
  for (const std::string& id : poll->demand)
    if ((proposal_demand_[id] -= max) <= 0) proposal_demand_.erase(id);
  poll->demand.clear();
  v1::LeaseTrialsResponse out;
  auto finish = [&](absl::StatusOr<v1::LeaseTrialsResponse> result) {
    if (lock.owns_lock()) lock.unlock();
    poll->answered = true;
    poll->done(std::move(result));
  };
  auto answer = [&] {
    std::vector<ProposeRequest> finished = std::move(finished_observations_);
    finished_observations_.clear();
    lock.unlock();
    TellFinishedUnlocked(std::move(finished));
    // Answered once every write this lease queued is stored, from the commit's thread: no
    // thread waits for it meanwhile (with a few poll threads each held through a commit, a
    // fleet's leases would be answered a few per transaction). A refused write is answered as
    // such; the next call under the mutex puts memory back as stored (RecoverFailedWritesLocked).
    poll->answered = true;
    AnswerWhenStored(poll->tickets, std::move(out), std::move(poll->done));
  };
  const bool woken = poll->parked && !timed_out;
  poll->parked = false;
  RecoverFailedWritesLocked();  // a write refused after its caller was answered
  if (timed_out) return answer();
  WriteBatch bound;  // jobs this lease bound: written with its next round's changes
  while (true) {
    absl::StatusOr<WorkerEntry*> entry = OwnWorkerLocked(request.worker_id(), poll->caller);
    if (!entry.ok()) {  // forgotten while it bound a job: the binding is stored all the same
      if (!bound.empty()) QueueWriteLocked(std::move(bound)).IgnoreError();
      return finish(entry.status());
    }
    v1::WorkerInfo& worker = (*entry)->info;
    worker.set_last_heartbeat_unix_ms(clock_->NowMs());
    const std::string label = worker.chip().chip_type();  // a copy: used after unlocking
    WriteBatch batch = std::move(bound);
    bound = WriteBatch();
    ExpireLeasesLocked(batch);
    std::vector<JobEntry*> order;
    for (auto& [id, job] : jobs_)
      if (!job->terminal() && absl::StartsWith(label, job->job.spec().chip()) &&
          (job->job.chip_type().empty() || job->job.chip_type() == label))
        order.push_back(job.get());
    std::stable_sort(order.begin(), order.end(), [](JobEntry* a, JobEntry* b) {
      return a->job.spec().priority() > b->job.spec().priority();
    });
    std::vector<ProposeRequest> requests;
    std::vector<BindRequest> binds;
    for (JobEntry* job : order) {
      if (job->job.chip_type().empty()) {
        // A queued job is bound to this worker's chip by this lease once it has released the
        // mutex (below); until then every lease passes it over, so that it is bound once.
        if (job->binding == 0) {
          BindRequest r;
          r.job_id = job->job.id();
          r.id = next_propose_id_++;
          r.spec = job->job.spec();
          for (const v1::TaskResult& t : job->job.tasks()) r.workloads.push_back(t.workload());
          r.chip = worker.chip();
          if (metrics_) r.metrics = metrics_->AgentSink(r.job_id);
          job->binding = r.id;
          binds.push_back(std::move(r));
        }
        continue;
      }
      while (out.trials_size() < max) {
        v1::Trial* t = NextTrialLocked(*job, worker, batch, requests);
        if (!t) break;
        job->SetState(*t, v1::LEASED);
        t->set_worker_id(worker.id());
        t->set_lease_expires_unix_ms(clock_->NowMs() + options_.lease_ttl_ms);
        earliest_lease_expiry_ms_ = std::min(earliest_lease_expiry_ms_, t->lease_expires_unix_ms());
        if (t->kind() == v1::TUNE && options_.racing) {  // race against the task's best so far
          // With no best yet, any result is one (+infinity): the trial is timed briefly, and its
          // re-measurement, as for every new best, in full.
          const v1::TaskResult& task = job->job.tasks(t->task_index());
          t->set_race_us(task.has_best() ? task.best().median_us()
                                         : std::numeric_limits<double>::infinity());
        }
        batch.trials.push_back(*t);
        *out.add_trials() = *t;
      }
      MaybeFinishLocked(*job, batch);
      if (!batch.trials.empty() || !batch.records.empty()) batch.jobs.push_back(job->job);
      if (out.trials_size() >= max) break;
    }
    // Trials left ready after this lease took its own: the next lease waiting for proposals may
    // take them (see below).
    bool more_ready = false;
    for (JobEntry* job : order)
      for (const TaskState& t : job->tasks) more_ready = more_ready || !t.ready.empty();
    const bool changed = !batch.empty();
    absl::StatusOr<uint64_t> ticket = QueueWriteLocked(std::move(batch));
    if (!ticket.ok()) {
      // Nothing is bound or proposed for this lease: the next lease does it. A job the refused
      // write did not touch is not rebuilt from the store, so its marks are taken back here (a
      // task left `proposing` would be passed over for good).
      for (const BindRequest& b : binds)
        if (JobEntry* job = FindJobLocked(b.job_id); job && job->binding == b.id) job->binding = 0;
      for (ProposeRequest& r : requests) {
        JobEntry* job = FindJobLocked(r.job_id);
        if (!job || r.task >= static_cast<int>(job->tasks.size())) continue;
        TaskState& task = job->tasks[r.task];
        if (task.proposing != r.id) continue;
        task.proposing = 0;
        task.unseen.insert(task.unseen.begin(), r.unseen.begin(), r.unseen.end());
        task.unexcluded.insert(task.unexcluded.begin(), r.unexcluded.begin(), r.unexcluded.end());
      }
      return finish(ticket.status());
    }
    poll->tickets.push_back(*ticket);
    if (changed) UpdateJobGaugesLocked();
    if (!requests.empty() || !binds.empty()) {
      // Jobs to bind and tasks whose proposals ran out: this lease builds the strategies and
      // makes the proposals with the mutex released (a slow strategy holds up no other job's
      // leases and reports), then takes its trials from them at once rather than long-polling.
      lock.unlock();
      for (BindRequest& b : binds)
        b.built = BuildStrategies(b.spec, b.workloads, b.chip, std::move(b.metrics));
      ProposeUnlocked(requests);
      lock.lock();
      if (!binds.empty()) {
        if (BindLandedLocked(binds, bound)) UpdateJobGaugesLocked();
        WakeLeasesLocked();  // those that passed the jobs over: new work, or a job failed
      }
      // The leases that passed these tasks over are woken as many as the batch serves beyond
      // this lease's own (by their batch sizes), at once: one waking the next (more_ready, the
      // fallback) costs a thread hand-off each, which at a fleet's start added up to a tenth of
      // a second. Waking all has dozens find nothing on a busy fleet. A batch dropped or empty
      // wakes all.
      if (!requests.empty()) {
        if (const int landed = LandProposalsLocked(requests); landed >= 0)
          proposal_waiters_.NotifyWeight(landed - (max - out.trials_size()));
        else
          proposal_waiters_.NotifyAll();
      }
      if (!shutdown_ && out.trials_size() < max) continue;
      if (!bound.empty()) {
        absl::StatusOr<uint64_t> bound_ticket = QueueWriteLocked(std::move(bound));
        if (!bound_ticket.ok()) return finish(bound_ticket.status());
        poll->tickets.push_back(*bound_ticket);
      }
      more_ready = false;  // `order` may be stale now; the wake above stands for it
    }
    if (out.trials_size() > 0 || shutdown_) {
      if (woken && metrics_) metrics_->LeaseWoken(out.trials_size() > 0);
      if (more_ready) proposal_waiters_.NotifyOne();
      // A full batch may have left more behind (final rounds, requeued trials): the next lease
      // waiting for work looks, and wakes the one after it if it fills its batch too.
      if (out.trials_size() >= max) WorkWaitersLocked(label).NotifyOne();
      return answer();
    }
    // The leases are answered once stored; an empty answer tells nothing, so a poll waits on,
    // parked (long_poll.h): it holds no thread, and runs again when woken or at its deadline.
    // One that passed over a task being proposed for (or a job being bound) waits for proposals
    // to land, not for every report: on a busy fleet each report would wake every such poll only
    // to find the task still proposing (new work that comes meanwhile waits at most one Propose).
    std::vector<std::string> passed_over;
    for (JobEntry* job : order)
      if (job->binding != 0 ||
          std::any_of(job->tasks.begin(), job->tasks.end(),
                      [](const TaskState& t) { return t.AwaitingProposals(); }))
        passed_over.push_back(job->job.id());
    if (std::chrono::steady_clock::now() >= poll->deadline) return answer();
    if (woken && metrics_) metrics_->LeaseWoken(false);
    poll->parked = true;
    auto resume = [this, poll](bool timed_out) { RunLease(poll, timed_out); };
    if (passed_over.empty())
      return WorkWaitersLocked(label).Park(poll->deadline, std::move(resume));
    for (const std::string& id : passed_over) proposal_demand_[id] += max;
    poll->demand = std::move(passed_over);  // taken back when it runs again
    return proposal_waiters_.Park(poll->deadline, std::move(resume), max);
  }
}

void Coordinator::ProposeUnlocked(std::vector<ProposeRequest>& requests) {
  for (ProposeRequest& r : requests) {
    std::lock_guard<std::mutex> own(r.strategy->mu);
    agent::Strategy& strategy = *r.strategy->impl;
    for (const codegen::Config& c : r.unexcluded) strategy.Exclude(c);
    if (!r.unseen.empty()) strategy.Observe(r.unseen);  // at most one model update a batch
    auto propose_start = std::chrono::steady_clock::now();
    r.made = strategy.Propose(r.n);
    if (metrics_) metrics_->Proposed(strategy.name(), r.made.size(), propose_start);
  }
}

int Coordinator::LandProposalsLocked(std::vector<ProposeRequest>& requests) {
  bool all = true;
  int landed = 0;
  for (ProposeRequest& r : requests) {
    all = all && !r.made.empty();
    auto it = jobs_.find(r.job_id);
    if (it == jobs_.end()) {  // evicted or dropped: its proposals go with it
      all = false;
      continue;
    }
    JobEntry& job = *it->second;
    TaskState* task = r.task < static_cast<int>(job.tasks.size()) ? &job.tasks[r.task] : nullptr;
    // Another request's task: the job was rebuilt (a refused write) or its tasks reset.
    if (!task || task->proposing != r.id) {
      all = false;
      continue;
    }
    task->proposing = 0;
    if (job.terminal()) {
      all = false;
      continue;
    }
    if (r.made.empty()) task->exhausted = true;  // nothing new: the task ends as it did before
    landed += r.made.size();
    for (auto& c : r.made) task->ready.push_back(std::move(c));
  }
  return all ? landed : -1;
}

std::vector<Coordinator::ProposeRequest> Coordinator::ObserveFinishedUnlocked(
    std::vector<ProposeRequest> finished) {
  std::vector<ProposeRequest> busy;
  for (ProposeRequest& r : finished) {
    // A strategy still proposing (its job cancelled meanwhile) is told by a later call, not
    // waited for: this lease or report has nothing to do with it.
    std::unique_lock<std::mutex> own(r.strategy->mu, std::try_to_lock);
    if (!own.owns_lock()) {
      busy.push_back(std::move(r));
      continue;
    }
    r.strategy->impl->Observe(r.unseen);
  }
  return busy;
}

void Coordinator::TellFinishedUnlocked(std::vector<ProposeRequest> finished) {
  if (finished.empty()) return;
  std::vector<ProposeRequest> busy = ObserveFinishedUnlocked(std::move(finished));
  if (busy.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (ProposeRequest& r : busy) finished_observations_.push_back(std::move(r));
}

void Coordinator::ApplyResultLocked(JobEntry& job, v1::Trial& trial, const v1::Measurement& m,
                                    const std::string& implementation, WriteBatch& batch) {
  job.SetState(trial, v1::DONE);
  *trial.mutable_measurement() = m;
  if (trial.kind() == v1::STEP)
    RefuseInexactStep(job.job.spec().dtype(), trial.mutable_measurement());
  batch.trials.push_back(trial);
  if (trial.kind() == v1::STEP) {  // the composed step's measured tokens/s
    const std::vector<int> changed = ApplyStepResult(job, trial);  // finalists faster in the step
    if (!changed.empty()) UpdateBestTokensLocked(job);
    for (int task : changed)
      PushEventLocked(job, v1::JobEvent::NEW_BEST, task, &job.job.tasks(task).best());
    if (metrics_ && job.job.tokens_per_second().measured() > 0)
      metrics_->SetBestTokensPerSecond(job.job.id(), job.job.tokens_per_second().measured());
    if (metrics_ && job.job.tokens_per_second().bound_fraction() > 0)
      metrics_->SetBoundFraction(job.job.id(), job.job.tokens_per_second().bound_fraction());
    PushEventLocked(job, v1::JobEvent::PROGRESS);
    return;
  }
  v1::TaskResult* task = job.job.mutable_tasks(trial.task_index());
  const std::string chip_type = job.job.chip_type();
  if (metrics_ && !m.from_cache()) metrics_->TrialFinished(chip_type, m);
  if (trial.kind() == v1::BASELINE && trial.final_round() == 0) {
    task->set_baseline_name(implementation.empty() ? "baseline" : implementation);
    *task->mutable_baseline() = m;
    PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
    return;
  }
  if (trial.kind() == v1::FINAL || trial.kind() == v1::BASELINE) {  // a final round's trial
    task->set_final_trials_done(task->final_trials_done() + 1);
    if (task->final_trials_done() >= task->final_trials())
      finals_.DecideLocked(job, trial.task_index(), batch);
    else
      PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
    return;
  }
  if (trial.kind() == v1::REMEASURE) {
    ApplyRemeasureLocked(job, trial, batch);
    return;
  }
  bool ok = m.status() == v1::OK;
  job.job.set_trials_done(job.job.trials_done() + 1);
  if (ok) {
    task->set_trials_ok(task->trials_ok() + 1);
  } else {
    task->set_trials_failed(task->trials_failed() + 1);
    job.job.set_trials_failed(job.job.trials_failed() + 1);
  }
  TaskState& state = job.tasks[trial.task_index()];
  if (state.strategy)  // told before its next proposals (TaskState::unseen)
    state.unseen.push_back({codegen::FromProto(trial.config()), m.status(), m.median_us()});
  bool better = ok && (!task->has_best() || m.median_us() < task->best().median_us());
  // A fresh result that does not beat a candidate still awaiting its re-measurement is no new
  // candidate: when a fleet starts, every result of the first wave would otherwise beat "no best
  // yet" and be measured twice. (One between the best and a candidate later demoted is timed
  // again in the final rounds, which take the leaders from every result.)
  if (better && !m.from_cache())
    for (const auto& [id, us] : state.confirming) better = better && m.median_us() < us;
  // A new best's record waits for its re-measurement (ApplyRemeasureLocked): until another
  // measurement confirms it, its figure must not answer later jobs from the store.
  if (!m.from_cache() && !better) batch.records.push_back(RecordOf(job, trial, m, clock_->NowMs()));
  if (better && !m.from_cache()) {
    // A new best is measured once more before it is reported (DESIGN.md §5), by another worker
    // of the chip type when there is one (MayLeaseLocked).
    v1::Trial& again = NewTrialLocked(job, trial.task_index(), v1::REMEASURE);
    *again.mutable_config() = trial.config();
    again.set_exclude_worker_id(trial.worker_id());
    state.confirming[again.id()] = m.median_us();
    batch.trials.push_back(again);
    PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
  } else if (better) {
    *task->mutable_best() = m;
    *task->mutable_best_config() = trial.config();
    UpdateBestTokensLocked(job);
    PushEventLocked(job, v1::JobEvent::NEW_BEST, trial.task_index(), &m);
  } else {
    PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
  }
}

void Coordinator::ApplyRemeasureLocked(JobEntry& job, v1::Trial& again, WriteBatch& batch) {
  v1::TaskResult* task = job.job.mutable_tasks(again.task_index());
  v1::Measurement& m = *again.mutable_measurement();
  const v1::Trial* first = RemeasuredTrial(job, again);
  job.tasks[again.task_index()].confirming.erase(again.id());
  if (m.status() != v1::OK) {
    // A kernel that verified (or ran) only once is no best, and its record says so: the store
    // must not answer it as sound to a later job.
    batch.records.push_back(RecordOf(job, again, m, clock_->NowMs()));
    PushEventLocked(job, v1::JobEvent::PROGRESS, again.task_index());
    return;
  }
  const bool beats = !task->has_best() || m.median_us() < task->best().median_us();
  bool demoted = false;
  if (first && first->measurement().raced_ahead()) {
    // Timed briefly: its claim was only "surely faster than the best it raced"; the full timing
    // is its figure, and it confirms by still beating the best.
    demoted = !beats;
    if (demoted)
      m.set_message(absl::StrFormat(
          "demoted: re-measured %.1f us in full, not faster than the best %.1f us it raced ahead "
          "of (%.1f us timed briefly)",
          m.median_us(), task->best().median_us(), first->measurement().median_us()));
  } else if (first && m.median_us() > kConfirmRatio * first->measurement().median_us()) {
    const double before = first->measurement().median_us();
    demoted = true;
    m.set_message(absl::StrFormat("demoted: re-measured %.1f us vs %.1f us first (+%.1f%%)",
                                  m.median_us(), before, 100 * (m.median_us() / before - 1)));
  }
  m.set_demoted(demoted);
  for (auto it = batch.trials.rbegin(); it != batch.trials.rend(); ++it)
    if (it->id() == again.id()) {  // queued by ApplyResultLocked before the verdict
      *it = again;
      break;
    }
  // The record keeps the figure that stands: the first, unless it was timed briefly or did not
  // confirm (its record was held back until now).
  if (demoted || !first || first->measurement().raced_ahead())
    batch.records.push_back(RecordOf(job, again, m, clock_->NowMs()));
  else
    batch.records.push_back(RecordOf(job, *first, first->measurement(), clock_->NowMs()));
  // A demoted configuration is not made the best: the task keeps its best confirmed one. Only a
  // task with none confirmed takes the re-measured (slower, honest) figure, marked demoted, so
  // that a noisy host does not leave a task without any best; final rounds, when they run, time
  // it again in turns with the others.
  if (beats && (!demoted || !task->has_best() || task->best().demoted())) {
    *task->mutable_best() = m;
    *task->mutable_best_config() = again.config();
    UpdateBestTokensLocked(job);
    PushEventLocked(job, v1::JobEvent::NEW_BEST, again.task_index(), &m);
  } else {
    PushEventLocked(job, v1::JobEvent::PROGRESS, again.task_index());
  }
}

absl::StatusOr<v1::ReportResultsResponse> Coordinator::ReportResults(
    const v1::ReportResultsRequest& request, const std::string& caller) {
  auto answer = AwaitAnswer<absl::StatusOr<v1::ReportResultsResponse>>(
      [&](ReportDone done) { ReportResultsAsync(request, caller, std::move(done)); });
  RecoverIfWriteFailed();
  return answer;
}

void Coordinator::ReportResultsAsync(const v1::ReportResultsRequest& request,
                                     const std::string& caller, ReportDone done) {
  absl::StatusOr<std::pair<v1::ReportResultsResponse, uint64_t>> applied =
      ApplyReport(request, caller);
  if (!applied.ok()) return done(applied.status());
  // Answered once stored; a refused write is answered as such, and the next call under the
  // mutex puts memory back as stored (RecoverFailedWritesLocked).
  AnswerWhenStored({applied->second}, std::move(applied->first), std::move(done));
}

absl::StatusOr<std::pair<v1::ReportResultsResponse, uint64_t>> Coordinator::ApplyReport(
    const v1::ReportResultsRequest& request, const std::string& caller) {
  RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  for (int i = 0; i < request.results_size(); ++i) {
    const auto& r = request.results(i);
    const auto& m = r.measurement();
    if (m.status() == v1::STATUS_UNSPECIFIED || !v1::MeasurementStatus_IsValid(m.status()))
      return absl::InvalidArgumentError(
          absl::StrCat("results[", i, "].measurement.status: required"));
    if (r.attempt() < 1)
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "].attempt: must be >= 1"));
    if (r.source_hash().size() > kMaxSourceHashChars || r.toolchain().size() > kMaxToolchainChars)
      return absl::InvalidArgumentError(
          absl::StrCat("results[", i, "]: source_hash at most ", kMaxSourceHashChars,
                       " characters, toolchain at most ", kMaxToolchainChars));
  }
  std::unique_lock<std::mutex> lock(mu_);
  RecoverFailedWritesLocked();  // a write refused after its caller was answered
  ASSIGN_OR_RETURN(WorkerEntry * worker, OwnWorkerLocked(request.worker_id(), caller));
  for (int i = 0; i < request.results_size(); ++i)
    if (!trial_job_.count(request.results(i).trial_id()) &&
        !FindJobLocked(request.results(i).trial_id().substr(0, 14)))
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "].trial_id: unknown trial '",
                                                     request.results(i).trial_id().substr(0, 40),
                                                     "'"));
  v1::ReportResultsResponse out;
  WriteBatch batch;
  std::vector<JobEntry*> touched;
  std::vector<int> returned;  // trials returned, for each job touched
  for (const auto& r : request.results()) {
    auto jit = trial_job_.find(r.trial_id());
    JobEntry* job = jit == trial_job_.end() ? nullptr : FindJobLocked(jit->second);
    v1::Trial* trial = nullptr;
    if (job) {
      auto tit = job->trials.find(r.trial_id());
      if (tit != job->trials.end()) trial = &tit->second;
    }
    // An earlier attempt: a lease that expired or was released, its trial requeued since. The
    // reporter may have held it then; nothing is applied either way.
    if (!trial || job->terminal() || r.attempt() < trial->attempt()) {
      out.set_stale(out.stale() + 1);
      continue;
    }
    // Only the lease holder, at the attempt it was leased at, answers a trial: not a pending
    // trial, another worker's, one answered by another worker, or an attempt never leased.
    if (r.attempt() != trial->attempt() || trial->state() == v1::PENDING ||
        trial->worker_id() != request.worker_id()) {
      out.set_refused(out.refused() + 1);
      RefusedLocked("not_lease_holder");
      continue;
    }
    if (trial->state() == v1::DONE) {  // the holder's retry: reports are idempotent per attempt
      out.set_duplicates(out.duplicates() + 1);
      continue;
    }
    v1::Measurement m = r.measurement();
    m.set_from_cache(false);
    const std::string implausible = ImplausibleFigures(m, trial->kind());
    if (!implausible.empty()) {
      // Not requeued: the same worker could lease it again and again. The trial is answered as a
      // failure (it counts once against the budget, as any failed trial) without its figures,
      // and its record is no OK figure to answer later jobs with.
      out.set_refused(out.refused() + 1);
      RefusedLocked("implausible");
      m = v1::Measurement();
      m.set_status(v1::SUSPECT);
      m.set_message(absl::StrCat("refused by the coordinator: ", implausible));
    } else {
      out.set_accepted(out.accepted() + 1);
      worker->info.set_trials_done(worker->info.trials_done() + 1);
    }
    trial->set_source_hash(r.source_hash());
    trial->set_toolchain(r.toolchain());
    ApplyResultLocked(*job, *trial, m, r.implementation(), batch);
    MaybeFinishLocked(*job, batch);
    auto seen = std::find(touched.begin(), touched.end(), job);
    if (seen == touched.end()) {
      touched.push_back(job);
      returned.push_back(1);
    } else {
      ++returned[seen - touched.begin()];
    }
  }
  for (JobEntry* job : touched) batch.jobs.push_back(job->job);  // once each, as it stands now
  // A write the store refuses (a full disk) puts every job it touched back as stored
  // (RecoverFailedWritesLocked): no count, best or budget moves, the trial stays leased, and the
  // worker's retry or the lease's expiry answers it later.
  ASSIGN_OR_RETURN(uint64_t ticket, QueueWriteLocked(std::move(batch)));
  UpdateJobGaugesLocked();
  // What a returned trial can make for the leases waiting on its chip type: a requeue or a
  // re-measurement, room under the budget for a proposal, the final rounds once the last is
  // back. A re-measurement may go to another worker only (MayLeaseLocked), which the oldest
  // waiters need not be: then all of them are woken.
  for (size_t i = 0; i < touched.size(); ++i) {
    WaitList& waiters = WorkWaitersLocked(touched[i]->job.chip_type());
    const bool remeasure =
        std::any_of(touched[i]->pending.begin(), touched[i]->pending.end(),
                    [](const auto& p) { return !p.second->exclude_worker_id().empty(); });
    if (remeasure)
      waiters.NotifyAll();
    else
      waiters.NotifyUpTo(returned[i]);
  }
  // One lease waiting for proposals, too: a task whose budget this spent proposes no more, and
  // the leases waiting for it go on to wait for other work, one by one.
  proposal_waiters_.NotifyOne();
  std::vector<ProposeRequest> finished = std::move(finished_observations_);
  finished_observations_.clear();
  lock.unlock();
  TellFinishedUnlocked(std::move(finished));
  return std::make_pair(std::move(out), ticket);
}

}  // namespace kiln::server
