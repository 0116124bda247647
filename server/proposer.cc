// Coordinator core, the proposers: the strategies' Propose and Observe calls, made on threads of
// their own (CoreOptions::proposer_threads) rather than on the dispatch path. NextTrialLocked
// (server/trial_scheduler.cc) asks for a task's next batch when its ready queue runs out and hands
// out other work meanwhile; a proposer tells the strategy what it has not seen, lets it propose
// with only the task's own strategy lock held, and then, under mu_, adds the batch to the task's
// ready queue and wakes the long-polling leases.
#include <algorithm>
#include <chrono>
#include <utility>

#include "server/coordinator.h"

namespace kiln::server {

void Coordinator::RequestProposalsLocked(JobEntry& job, int task, int n) {
  TaskState& state = job.tasks[task];
  if (!state.strategy) return;
  ProposalRequest r;
  r.id = n > 0 ? next_proposal_id_++ : 0;
  r.job_id = job.job.id();
  r.task = task;
  r.n = n;
  r.strategy = state.strategy;
  r.exclude = std::exchange(state.unexcluded, {});
  r.observations = std::exchange(state.unseen, {});
  if (n == 0 && r.exclude.empty() && r.observations.empty()) return;
  if (n > 0) state.proposing = r.id;
  proposals_.push_back(std::move(r));
  proposer_cv_.notify_one();
}

void Coordinator::DeliverProposalsLocked(const ProposalRequest& request,
                                         std::vector<codegen::Config> made, WriteBatch& batch) {
  JobEntry* job = FindJobLocked(request.job_id);
  if (!job || job->terminal() || request.task >= static_cast<int>(job->tasks.size())) return;
  TaskState& task = job->tasks[request.task];
  // Reset (a finished job's tasks), or rebuilt from the store after a refused write: another
  // request, or none, is the task's now, and these proposals are not its to use.
  if (task.proposing != request.id) return;
  task.proposing = 0;
  if (made.empty()) {  // nothing new to propose: the task is done, and maybe its job
    task.exhausted = true;
    MaybeFinishLocked(*job, batch);
    if (!batch.trials.empty() || !batch.records.empty()) batch.jobs.push_back(job->job);
    UpdateGaugesLocked();
  } else {
    for (auto& c : made) task.ready.push_back(std::move(c));
  }
  work_cv_.notify_all();
}

void Coordinator::RunProposer() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto next = proposals_.end();
    proposer_cv_.wait(lock, [&] {
      next = std::find_if(proposals_.begin(), proposals_.end(),
                          [](const ProposalRequest& r) { return !r.strategy->busy; });
      return next != proposals_.end() || (shutdown_ && proposals_.empty());
    });
    if (next == proposals_.end()) break;  // shut down, and every request told
    ProposalRequest request = std::move(*next);
    proposals_.erase(next);
    request.strategy->busy = true;
    proposers_busy_++;
    // After Shutdown the strategies are still told what is queued for them (a strategy that
    // saves its model sees every result), but nothing is proposed for a coordinator that stops.
    const bool propose = request.n > 0 && !shutdown_;
    lock.unlock();
    std::vector<codegen::Config> made;
    {
      std::lock_guard<std::mutex> own(request.strategy->mu);
      agent::Strategy& strategy = *request.strategy->impl;
      for (const codegen::Config& c : request.exclude) strategy.Exclude(c);
      if (!request.observations.empty()) strategy.Observe(request.observations);
      if (propose) {
        const auto start = std::chrono::steady_clock::now();
        made = strategy.Propose(request.n);
        if (metrics_) metrics_->Proposed(strategy.name(), made.size(), start);
      }
    }
    lock.lock();
    WriteBatch batch;
    if (propose) DeliverProposalsLocked(request, std::move(made), batch);
    absl::StatusOr<uint64_t> ticket = uint64_t{0};
    if (!batch.empty()) ticket = QueueWriteLocked(std::move(batch));
    request.strategy->busy = false;
    proposer_cv_.notify_all();  // the strategy's next request may run now
    lock.unlock();
    // A job that finished here is answered to no one, but a refused write is taken back now
    // (AwaitWrite), not at the next tick. The request may hold the last reference to a finished
    // job's strategy: it is destroyed here, without mu_.
    if (ticket.ok()) AwaitWrite(*ticket).IgnoreError();
    const bool asked = request.n > 0;
    request = ProposalRequest();
    lock.lock();
    proposers_busy_--;
    if (asked) proposals_answered_++;
    if (proposals_.empty() && proposers_busy_ == 0) proposed_cv_.notify_all();
  }
  if (--proposers_running_ == 0) proposed_cv_.notify_all();
}

uint64_t Coordinator::WaitForProposals() {
  std::unique_lock<std::mutex> lock(mu_);
  proposed_cv_.wait(lock, [&] {
    return proposers_running_ == 0 || (proposals_.empty() && proposers_busy_ == 0);
  });
  return proposals_answered_;
}

}  // namespace kiln::server
