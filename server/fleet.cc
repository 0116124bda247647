// Coordinator core, fleet half: worker registration, heartbeats, lease expiry, recovery after a
// restart, time budgets and gauges.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/knob_space.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/coordinator.h"
#include "server/validate.h"

namespace kiln::server {

bool Coordinator::WorkerAliveLocked(const v1::WorkerInfo& w) const {
  return clock_->NowMs() - w.last_heartbeat_unix_ms() <=
         std::max(options_.lease_ttl_ms, 3 * options_.heartbeat_interval_ms);
}

absl::StatusOr<v1::RegisterResponse> Coordinator::Register(const v1::RegisterRequest& request,
                                                           const std::string& caller) {
  RETURN_IF_ERROR(ValidateRegisterRequest(request));
  const auto& chip = request.chip();
  if (chip.chip_type().empty())
    return absl::InvalidArgumentError("chip.chip_type: the worker's chip-type label is required");
  if (chip.kind().empty()) return absl::InvalidArgumentError("chip.kind: required (e.g. cpu)");
  if (request.slots() < 0 || request.slots() > 1024)
    return absl::InvalidArgumentError("slots: must be in 1..1024");
  if (!request.worker_id().empty()) RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  std::lock_guard<std::mutex> lock(mu_);
  std::string id = request.worker_id();
  if (auto it = workers_.find(id); !id.empty() && it != workers_.end()) {
    const v1::WorkerInfo& known = it->second.info;
    // A worker id belongs to the credential that registered it: another one taking it over
    // would be handed that worker's leases and could report for them.
    if (known.owner() != caller) {
      RefusedLocked("not_worker_owner");
      return absl::PermissionDeniedError(
          absl::StrCat("worker_id: ", id,
                       " was registered with another credential; register without a worker_id"));
    }
    // Re-registering takes the id back only as it was: the same chip (its trials were leased
    // for that fingerprint, and jobs are bound to it) and a worker gone silent (a live one is
    // still using the id). Anything else registers as a new worker; the old id's leases expire
    // and are requeued as for any lost worker, so no trial is lost or counted twice.
    if (!google::protobuf::util::MessageDifferencer::Equals(known.chip(), chip) ||
        WorkerAliveLocked(known))
      id.clear();
  }
  if (id.empty()) {
    do id = NewId('w', Entropy());
    while (workers_.count(id));
  }
  auto existing = workers_.find(id);
  v1::WorkerInfo info = existing == workers_.end() ? v1::WorkerInfo() : existing->second.info;
  info.set_id(id);
  info.set_name(request.name().empty() ? id : request.name());
  *info.mutable_chip() = chip;
  info.set_slots(std::max(1, request.slots()));
  info.set_state("alive");
  info.set_last_heartbeat_unix_ms(clock_->NowMs());
  info.set_owner(caller);
  WriteBatch batch;
  batch.workers.push_back(info);
  RETURN_IF_ERROR(WriteLocked(batch));
  workers_[id].info = info;
  if (metrics_) metrics_->WorkerRegistered(chip.chip_type(), info.name());
  UpdateWaitingLocked();
  UpdateGaugesLocked();
  v1::RegisterResponse out;
  out.set_worker_id(id);
  out.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  return out;
}

absl::StatusOr<Coordinator::WorkerEntry*> Coordinator::OwnWorkerLocked(const std::string& worker_id,
                                                                       const std::string& caller) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end())
    return absl::NotFoundError(
        absl::StrCat("worker_id: unknown worker ", worker_id, "; register first"));
  if (it->second.info.owner() != caller) {
    RefusedLocked("not_worker_owner");
    return absl::PermissionDeniedError(
        absl::StrCat("worker_id: ", worker_id, " was registered with another credential"));
  }
  return &it->second;
}

void Coordinator::RefusedLocked(const char* reason) {
  if (metrics_) metrics_->Refused(reason);
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& request,
                                                             const std::string& caller) {
  RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  std::lock_guard<std::mutex> lock(mu_);
  v1::HeartbeatResponse out;
  if (!workers_.count(request.worker_id())) return out;  // known=false: the worker registers again
  // Another credential's heartbeat would keep a dead worker's leases from expiring.
  ASSIGN_OR_RETURN(WorkerEntry * worker, OwnWorkerLocked(request.worker_id(), caller));
  int64_t now = clock_->NowMs();
  worker->info.set_last_heartbeat_unix_ms(now);
  for (auto& [jid, job] : jobs_)
    for (auto& [seq, t] : job->leased)
      if (t->worker_id() == request.worker_id())
        t->set_lease_expires_unix_ms(now + options_.lease_ttl_ms);
  out.set_known(true);
  return out;
}

absl::Status Coordinator::ReleaseTrials(const v1::ReleaseTrialsRequest& request,
                                        const std::string& caller) {
  RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  std::lock_guard<std::mutex> lock(mu_);
  // An unknown worker holds no lease: nothing to release.
  if (!workers_.count(request.worker_id())) return absl::OkStatus();
  RETURN_IF_ERROR(OwnWorkerLocked(request.worker_id(), caller).status());
  WriteBatch batch;
  for (const auto& id : request.trial_ids()) {
    auto jit = trial_job_.find(id);
    if (jit == trial_job_.end()) continue;
    JobEntry* job = FindJobLocked(jit->second);
    auto tit = job->trials.find(id);
    if (tit == job->trials.end()) continue;
    v1::Trial& t = tit->second;
    if (t.state() != v1::LEASED || t.worker_id() != request.worker_id()) continue;
    job->Requeue(t);
    batch.trials.push_back(t);
  }
  RETURN_IF_ERROR(WriteLocked(batch));
  WakeLeasesLocked();
  return absl::OkStatus();
}

void Coordinator::ExpireLeasesLocked(WriteBatch& batch) {
  int64_t now = clock_->NowMs();
  // Every lease pass comes here: the scan of every leased trial runs only once one may be due.
  if (now < earliest_lease_expiry_ms_) return;
  earliest_lease_expiry_ms_ = std::numeric_limits<int64_t>::max();
  bool any = false;
  for (auto& [jid, job] : jobs_) {
    if (job->terminal()) continue;
    std::vector<v1::Trial*> expired;
    for (auto& [seq, t] : job->leased) {
      if (t->lease_expires_unix_ms() <= now)
        expired.push_back(t);
      else
        earliest_lease_expiry_ms_ = std::min(earliest_lease_expiry_ms_, t->lease_expires_unix_ms());
    }
    for (v1::Trial* t : expired) {
      job->Requeue(*t);
      batch.trials.push_back(*t);
      any = true;
    }
  }
  if (any) WakeLeasesLocked();
}

void Coordinator::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  RecoverFailedWritesLocked();  // a failed write that no caller has come back for
  WriteBatch batch;
  ExpireLeasesLocked(batch);
  int64_t now = clock_->NowMs();
  for (auto& [id, job] : jobs_) {
    double limit = job->job.spec().max_seconds();
    if (job->job.state() == v1::RUNNING && limit > 0 &&
        now - job->job.started_unix_ms() >= limit * 1000) {
      AdoptUnconfirmedBestsLocked(*job);
      bool any = false;
      for (const auto& t : job->job.tasks()) any = any || t.has_best();
      FinishLocked(*job, any ? v1::SUCCEEDED : v1::FAILED,
                   absl::StrCat("time budget of ", limit, " s reached",
                                any ? "" : " before any configuration passed verification"),
                   batch);
    }
  }
  WriteLocked(batch).IgnoreError();
  ShedFinishedTrialsLocked();
  EvictFinishedJobsLocked();
  RetryReloadsLocked();
  PurgeLostWorkersLocked();
  UpdateWaitingLocked();  // workers fall silent without any call to notice it
  UpdateGaugesLocked();
}

void Coordinator::ShedFinishedTrialsLocked() {
  for (auto& [id, job] : jobs_) {
    if (!job->terminal() || job->trials.empty()) continue;
    for (const auto& [tid, t] : job->trials) trial_job_.erase(tid);
    job->trials.clear();
    job->pending.clear();
    job->leased.clear();
    for (TaskState& task : job->tasks) task = TaskState();  // strategies, proposals made ahead
    while (job->events.size() > kFinishedJobEvents) job->events.pop_front();
  }
}

void Coordinator::EvictFinishedJobsLocked() {
  const int64_t now = clock_->NowMs();
  std::vector<std::pair<int64_t, std::string>> finished;  // (finish time, id)
  for (const auto& [id, job] : jobs_)
    if (job->terminal()) finished.push_back({job->job.finished_unix_ms(), id});
  std::sort(finished.begin(), finished.end(), std::greater<>());  // most recent first
  bool waited = false;
  for (size_t i = 0; i < finished.size(); ++i) {
    const std::string& id = finished[i].second;
    if (static_cast<int>(i) < options_.finished_jobs_in_memory &&
        !ArchivedLocked(jobs_.at(id)->job, now))
      continue;
    // Every write queued for it has landed before it leaves: readers fall back to the store.
    if (!waited) commits_.WaitForAll(), waited = true;
    if (metrics_) metrics_->DropJob(id);
    DropJobLocked(id);
    jobs_outside_memory_ = true;
  }
}

void Coordinator::AdoptUnconfirmedBestsLocked(JobEntry& job) {
  // A configuration whose re-measurement came back was judged then (confirmed or demoted).
  std::set<std::pair<int, std::string>> judged;
  for (const auto& [tid, t] : job.trials)
    if (t.kind() == v1::REMEASURE && t.state() == v1::DONE)
      judged.insert({t.task_index(), codegen::ConfigKey(codegen::FromProto(t.config()))});
  for (const auto& [tid, t] : job.trials) {
    v1::TaskResult* task = job.job.mutable_tasks(t.task_index());
    if (t.kind() == v1::TUNE && t.state() == v1::DONE && t.measurement().status() == v1::OK &&
        !judged.count({t.task_index(), codegen::ConfigKey(codegen::FromProto(t.config()))}) &&
        (!task->has_best() || t.measurement().median_us() < task->best().median_us())) {
      *task->mutable_best() = t.measurement();
      *task->mutable_best_config() = t.config();
    }
  }
}

std::string Coordinator::WaitingForLocked(const v1::Job& job) const {
  if (job.state() != v1::QUEUED && job.state() != v1::RUNNING) return "";
  const std::string& prefix = job.spec().chip();
  std::set<std::string> live;
  for (const auto& [id, w] : workers_) {
    if (!WorkerAliveLocked(w.info)) continue;
    const std::string& label = w.info.chip().chip_type();
    // The same match LeaseTrials makes: the spec's prefix, then the type the job is bound to.
    if (absl::StartsWith(label, prefix) && (job.chip_type().empty() || job.chip_type() == label))
      return "";
    live.insert(label);
  }
  std::string out = job.chip_type().empty()
                        ? absl::StrCat("no live worker matches chip '", prefix, "'")
                        : absl::StrCat("no live worker of chip type '", job.chip_type(),
                                       "' (the job is bound to it)");
  if (live.empty()) return out + "; no worker is live";
  return absl::StrCat(out, "; live: ", absl::StrJoin(live, ", "));
}

void Coordinator::UpdateWaitingLocked() {
  for (auto& [id, job] : jobs_) {
    if (job->terminal() && job->job.waiting().empty()) continue;
    std::string waiting = WaitingForLocked(job->job);
    if (waiting == job->job.waiting()) continue;
    job->job.set_waiting(waiting);
    PushEventLocked(*job, v1::JobEvent::STATE);
  }
}

absl::Status Coordinator::Deregister(const v1::DeregisterRequest& request,
                                     const std::string& caller) {
  RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  std::lock_guard<std::mutex> lock(mu_);
  if (!workers_.count(request.worker_id())) return absl::OkStatus();  // already forgotten
  // Another credential must not make a live worker vanish (its leases would be requeued).
  RETURN_IF_ERROR(OwnWorkerLocked(request.worker_id(), caller).status());
  WriteBatch batch;
  for (auto& [jid, job] : jobs_) {
    if (job->terminal()) continue;
    std::vector<v1::Trial*> held;
    for (auto& [seq, t] : job->leased)
      if (t->worker_id() == request.worker_id()) held.push_back(t);
    for (v1::Trial* t : held) {
      job->Requeue(*t);  // as ReleaseTrials: the next attempt goes to another worker
      batch.trials.push_back(*t);
    }
  }
  batch.removed_workers.push_back(request.worker_id());
  RETURN_IF_ERROR(WriteLocked(batch));
  workers_.erase(request.worker_id());
  UpdateWaitingLocked();
  UpdateGaugesLocked();
  WakeLeasesLocked();
  return absl::OkStatus();
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerInfo> out;
  for (auto& [id, w] : workers_) {
    w.info.set_state(WorkerAliveLocked(w.info) ? "alive" : "lost");
    out.push_back(w.info);
  }
  return out;
}

void Coordinator::UpdateJobGaugesLocked() {
  if (!metrics_) return;
  std::map<std::string, double> jobs_by_state;
  for (int s = v1::QUEUED; s <= v1::CANCELLED; ++s)
    jobs_by_state[v1::JobState_Name(static_cast<v1::JobState>(s))] = 0;
  std::map<std::string, double> queue;
  for (const auto& [id, job] : jobs_) {
    jobs_by_state[v1::JobState_Name(job->job.state())]++;
    metrics_->SetJob(job->job, clock_->NowMs());
    const std::string& label =
        job->job.chip_type().empty() ? job->job.spec().chip() : job->job.chip_type();
    double waiting = 0;
    if (!job->terminal()) {
      for (size_t i = 0; i < job->tasks.size(); ++i)
        if (!job->tasks[i].exhausted)
          waiting += std::max(0, job->Budget(i) - job->tasks[i].proposed);
      waiting += job->pending.size();
    }
    queue[label] += waiting;
  }
  for (const auto& [state, n] : jobs_by_state) metrics_->SetJobs(state, n);
  for (const auto& [label, n] : queue) metrics_->SetQueueDepth(label, n);
}

void Coordinator::UpdateGaugesLocked() {
  if (!metrics_) return;
  UpdateJobGaugesLocked();
  std::map<std::pair<std::string, std::string>, double> workers;
  // A chip type whose last worker deregistered (or was purged) reads 0, not its last count.
  for (const std::string& type : worker_gauge_types_) {
    workers[{type, "alive"}] = 0;
    workers[{type, "lost"}] = 0;
  }
  for (const auto& [id, w] : workers_) {
    worker_gauge_types_.insert(w.info.chip().chip_type());
    workers[{w.info.chip().chip_type(), "alive"}] += 0;
    workers[{w.info.chip().chip_type(), "lost"}] += 0;
    workers[{w.info.chip().chip_type(), WorkerAliveLocked(w.info) ? "alive" : "lost"}]++;
  }
  for (const auto& [key, n] : workers) metrics_->SetWorkers(key.first, key.second, n);
}

absl::Status Coordinator::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t now = clock_->NowMs();
  ASSIGN_OR_RETURN(std::vector<v1::WorkerInfo> workers, store_->LoadWorkers());
  for (auto& w : workers) {
    w.set_last_heartbeat_unix_ms(now);  // a grace period to reconnect
    workers_[w.id()].info = std::move(w);
  }
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->LoadJobs());
  for (auto& stored : jobs) {
    // Finished jobs past the retention period stay in the store only (server/persistence.cc).
    if (ArchivedLocked(stored, now)) {
      jobs_outside_memory_ = true;
      continue;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<JobEntry> entry,
                     LoadJobEntryLocked(std::move(stored), now, nullptr));
    AdoptJobLocked(std::move(entry));
  }
  UpdateWaitingLocked();
  UpdateGaugesLocked();
  return absl::OkStatus();
}

}  // namespace kiln::server
