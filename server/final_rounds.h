// Final rounds (TrialKind FINAL): once a task's budget is spent, its leading configurations are
// timed again in turns, round after round, with its fastest baseline route timed in each round
// beside them; the task's best is the finalist fastest relative to the others, not the luckiest
// single measurement, and its baseline figure the route's median over the same rounds.
//
// Locking: FinalRounds has no lock of its own. It works on the Coordinator's in-memory jobs, and
// the Coordinator calls its *Locked methods (from NextTrialLocked and ApplyResultLocked in
// server/trial_scheduler.cc, MaybeFinishLocked in server/coordinator.cc) with the coordinator
// mutex held; the Hooks it calls back run under that same lock.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/clock.h"
#include "kiln/v1/tuning_service.pb.h"
#include "kiln/v1/types.pb.h"
#include "server/job_state.h"
#include "server/store/store.h"

namespace kiln::server {

// The leading configurations of task `task`: each distinct configuration's fastest OK median over
// its TUNE and REMEASURE trials, fastest first, those within 1.5x of the first, at most k. A
// demoted configuration counts with its re-measured figure only (its first was the lucky one),
// and one whose re-measurement failed is no contender.
std::vector<v1::Config> FinalContenders(const JobEntry& job, int task, int k);

class FinalRounds {
 public:
  // What the final rounds need from the Coordinator that owns the job; all called with the
  // coordinator mutex held.
  struct Hooks {
    // A new PENDING trial of the job's task `task`, registered with the coordinator
    // (Coordinator::NewTrialLocked).
    std::function<v1::Trial&(JobEntry& job, int task, v1::TrialKind kind)> new_trial;
    // An event for the job's watchers (Coordinator::PushEventLocked).
    std::function<void(JobEntry& job, v1::JobEvent::Kind kind, int task,
                       const v1::Measurement* best)>
        push_event;
    // A task's best changed (Coordinator::UpdateBestTokensLocked: a model job's tokens/s).
    std::function<void(JobEntry& job)> best_changed;
  };

  // `rounds` and `finalists` as CoreOptions::final_rounds and ::finalists (no rounds, or fewer
  // than two finalists: off). `clock` dates the finalists' records.
  FinalRounds(int rounds, int finalists, const Clock* clock, Hooks hooks);

  // Creates the final rounds of every task of `job` that is due for them (budget spent, every
  // trial answered, two or more contenders), queued in `batch`; returns the first trial created,
  // or null.
  v1::Trial* StartLocked(JobEntry& job, WriteBatch& batch);

  // Scores the finalists of task `task` once all its FINAL trials are answered, sets its best
  // (none when every finalist failed a round) and its baseline figure, and queues each
  // finalist's record from its final rounds in `batch`.
  void DecideLocked(JobEntry& job, int task, WriteBatch& batch);

 private:
  const int rounds_;
  const int finalists_;
  const Clock* clock_;
  const Hooks hooks_;
};

}  // namespace kiln::server
