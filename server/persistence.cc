// Coordinator core, persistence half: jobs rebuilt from the store (at start and after a refused
// write), finished jobs past retention read on demand, silent workers purged.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "server/coordinator.h"

namespace kiln::server {

absl::StatusOr<std::unique_ptr<JobEntry>> Coordinator::LoadJobEntryLocked(v1::Job stored,
                                                                          int64_t now,
                                                                          JobEntry* previous) {
  auto entry = std::make_unique<JobEntry>();
  entry->job = std::move(stored);
  entry->tasks.resize(entry->job.tasks_size());
  entry->next_event_seq = now * 1000;
  if (previous) {  // watchers go on from where they are
    entry->events = std::move(previous->events);
    entry->next_event_seq = std::max(entry->next_event_seq, previous->next_event_seq);
  }
  // A finished job's trials stay in the store (GetResults reads them on demand).
  std::vector<v1::Trial> trials;
  if (!entry->terminal()) {
    ASSIGN_OR_RETURN(trials, store_->LoadTrials(entry->job.id()));
  }
  // After a refused write the job's strategies are kept rather than built again (binding a
  // space costs up to seconds, under the lock, on every refused write of a full disk). They may
  // have seen a proposal or a result that was not stored: a result is observed again when it is
  // reported again, and a proposal lost costs only that configuration; the counts that make
  // budgets exact are rebuilt from the stored trials below either way.
  const bool reuse = previous && !entry->terminal() && !entry->job.chip_type().empty() &&
                     previous->job.chip_type() == entry->job.chip_type() &&
                     previous->tasks.size() == entry->tasks.size();
  if (reuse) {
    for (size_t i = 0; i < entry->tasks.size(); ++i) {
      // A lease may still be proposing with the previous entry's strategy: it holds its own
      // reference and the strategy's lock, and its proposals are dropped (this entry's task did
      // not ask for them); only the pointer moves here, no call into the strategy.
      entry->tasks[i].strategy = std::move(previous->tasks[i].strategy);
      entry->tasks[i].exhausted = previous->tasks[i].exhausted;
      // Results and starts it was not yet told of: it is not fed the stored trials again.
      entry->tasks[i].unseen = std::move(previous->tasks[i].unseen);
      entry->tasks[i].unexcluded = std::move(previous->tasks[i].unexcluded);
    }
  } else if (!entry->terminal() && !entry->job.chip_type().empty()) {
    absl::Status bound = BindLocked(*entry, entry->job.chip());
    if (!bound.ok())
      return absl::Status(bound.code(),
                          absl::StrCat("recovering job ", entry->job.id(), ": ", bound.message()));
  }
  for (auto& t : trials) {
    entry->next_trial_seq = std::max(entry->next_trial_seq, t.seq() + 1);
    if (t.task_index() < 0 || t.task_index() >= entry->job.tasks_size())
      return absl::DataLossError(absl::StrCat("recovering job ", entry->job.id(), ": trial ",
                                              t.id(), " names task ", t.task_index()));
    TaskState& task = entry->tasks[t.task_index()];
    if (t.kind() == v1::BASELINE) task.baseline_created = true;
    if (t.kind() == v1::FINAL) task.finals_started = true;
    if (t.kind() == v1::TUNE) {
      task.proposed++;
      if (task.strategy && !reuse) {  // just bound: no lease holds it yet, the lock is free
        std::lock_guard<std::mutex> own(task.strategy->mu);
        task.strategy->impl->Exclude(codegen::FromProto(t.config()));
        if (t.state() == v1::DONE)
          task.strategy->impl->Observe({{codegen::FromProto(t.config()), t.measurement().status(),
                                         t.measurement().median_us()}});
      }
    }
    if (t.state() == v1::LEASED) {
      // The store does not keep lease extensions (heartbeats): the same lease keeps its
      // deadline in memory; any other gets a fresh period, as after a restart.
      int64_t expires = now + options_.lease_ttl_ms;
      if (previous) {
        auto it = previous->trials.find(t.id());
        if (it != previous->trials.end() && it->second.state() == v1::LEASED &&
            it->second.attempt() == t.attempt() && it->second.worker_id() == t.worker_id())
          expires = it->second.lease_expires_unix_ms();
      }
      t.set_lease_expires_unix_ms(expires);
    }
    entry->AddTrial(std::move(t));
  }
  return entry;
}

void Coordinator::AdoptJobLocked(std::unique_ptr<JobEntry> entry) {
  for (const auto& [id, t] : entry->trials) trial_job_[id] = entry->job.id();
  const std::string id = entry->job.id();
  jobs_[id] = std::move(entry);
  earliest_lease_expiry_ms_ = 0;  // its leases are not counted in the bound yet
}

void Coordinator::DropJobLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  for (auto t = trial_job_.begin(); t != trial_job_.end();)
    t = t->second == job_id ? trial_job_.erase(t) : std::next(t);
  jobs_.erase(it);
}

void Coordinator::RestoreFromStoreLocked(const WriteBatch& batch) {
  const int64_t now = clock_->NowMs();
  std::set<std::string> job_ids;
  for (const auto& j : batch.jobs) job_ids.insert(j.id());
  for (const auto& t : batch.trials) job_ids.insert(t.job_id());
  for (const std::string& id : job_ids) {
    JobEntry* previous = FindJobLocked(id);
    if (!previous) continue;  // a job not yet adopted (SubmitJob writes first)
    absl::StatusOr<std::optional<v1::Job>> stored = store_->LoadJob(id);
    absl::StatusOr<std::unique_ptr<JobEntry>> entry =
        !stored.ok()           ? absl::StatusOr<std::unique_ptr<JobEntry>>(stored.status())
        : !stored->has_value() ? absl::StatusOr<std::unique_ptr<JobEntry>>(absl::NotFoundError(
                                     absl::StrCat("job ", id, " is gone from the store")))
                               : LoadJobEntryLocked(**stored, now, previous);
    if (!entry.ok()) {
      // Memory cannot be made the store's now: the job leaves memory (it is not scheduled, its
      // reports are answered as stale) until Tick can load it again.
      std::fprintf(stderr, "kiln-coordinator: job %s: %s; it is reloaded when the store answers\n",
                   id.c_str(), std::string(entry.status().message()).c_str());
      DropJobLocked(id);
      if (stored.ok() && !stored->has_value()) continue;
      reload_pending_.insert(id);
      continue;
    }
    DropJobLocked(id);
    JobEntry& restored = **entry;
    AdoptJobLocked(std::move(*entry));
    PushEventLocked(restored, v1::JobEvent::STATE);  // watchers see the job as it stands again
  }
  if (batch.workers.empty() && batch.removed_workers.empty()) return;
  absl::StatusOr<std::vector<v1::WorkerInfo>> stored = store_->LoadWorkers();
  if (!stored.ok()) return;  // kept as they are; a later write or purge tries again
  std::map<std::string, v1::WorkerInfo> by_id;
  for (auto& w : *stored) by_id[w.id()] = std::move(w);
  for (const auto& w : batch.workers) {
    auto it = by_id.find(w.id());
    if (it == by_id.end()) {
      workers_.erase(w.id());  // a registration that was not stored did not happen
      continue;
    }
    auto mem = workers_.find(w.id());
    if (mem == workers_.end()) continue;
    const int64_t heard = mem->second.info.last_heartbeat_unix_ms();
    mem->second.info = it->second;  // heartbeats are not stored: keep the last one
    mem->second.info.set_last_heartbeat_unix_ms(
        std::max(heard, it->second.last_heartbeat_unix_ms()));
  }
  UpdateGaugesLocked();
}

void Coordinator::RetryReloadsLocked() {
  const int64_t now = clock_->NowMs();
  for (auto it = reload_pending_.begin(); it != reload_pending_.end();) {
    absl::StatusOr<std::optional<v1::Job>> stored = store_->LoadJob(*it);
    if (stored.ok() && !stored->has_value()) {
      it = reload_pending_.erase(it);
      continue;
    }
    if (!stored.ok()) break;  // the store is still away
    absl::StatusOr<std::unique_ptr<JobEntry>> entry = LoadJobEntryLocked(**stored, now, nullptr);
    if (!entry.ok()) {
      ++it;
      continue;
    }
    if (!FindJobLocked(*it)) {
      JobEntry& job = **entry;
      AdoptJobLocked(std::move(*entry));
      PushEventLocked(job, v1::JobEvent::STATE);
      WakeLeasesLocked();
    }
    it = reload_pending_.erase(it);
  }
}

bool Coordinator::ArchivedLocked(const v1::Job& job, int64_t now) const {
  const auto s = job.state();
  if (options_.job_retention_ms <= 0 ||
      (s != v1::SUCCEEDED && s != v1::FAILED && s != v1::CANCELLED))
    return false;
  const int64_t finished =
      job.finished_unix_ms() > 0 ? job.finished_unix_ms() : job.created_unix_ms();
  return now - finished > options_.job_retention_ms;
}

absl::StatusOr<v1::Job> Coordinator::StoredJobLocked(const std::string& job_id) {
  ASSIGN_OR_RETURN(std::optional<v1::Job> stored, store_->LoadJob(job_id));
  if (!stored) return absl::NotFoundError(absl::StrCat("job_id: no job ", job_id));
  return *std::move(stored);
}

void Coordinator::PurgeLostWorkersLocked() {
  if (options_.worker_purge_after_ms <= 0) return;
  const int64_t now = clock_->NowMs();
  WriteBatch batch;
  for (const auto& [id, w] : workers_)
    if (now - w.info.last_heartbeat_unix_ms() > options_.worker_purge_after_ms)
      batch.removed_workers.push_back(id);
  if (batch.empty() || !WriteLocked(batch).ok()) return;  // kept until the store forgets them
  for (const auto& id : batch.removed_workers) workers_.erase(id);
  UpdateGaugesLocked();
}

}  // namespace kiln::server
