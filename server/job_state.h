// In-memory state of one job in the coordinator: its tasks, strategies, trials and events.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/strategy.h"
#include "codegen/knob_space.h"
#include "kiln/v1/tuning_service.pb.h"

namespace kiln::server {

struct TaskState {
  std::unique_ptr<agent::Strategy> strategy;  // set once the job is bound to a chip type
  int proposed = 0;                           // TUNE trials created so far
  bool exhausted = false;                     // the strategy has nothing new to propose
  bool baseline_created = false;
  // The task's first proposals (StartingConfigs, server/trial_scheduler.h), loaded once when it
  // starts.
  std::vector<codegen::Config> starts;
  bool starts_loaded = false;
  // Config keys (codegen::ConfigKey) of the starts that are the best known configurations of
  // earlier jobs: measured again as fresh TUNE trials, never answered from their records.
  std::set<std::string> remeasure;
  // Config key -> the earlier job that measured it, for the starts above and the proposals
  // answered from the store: the job the final best came from (TaskResult.best_from_job).
  std::map<std::string, std::string> earlier_job;
  bool finals_started = false;  // its final rounds were created (or it had too few contenders)
  // The strategy's proposals made ahead, and the results not yet told to it. A task proposes in
  // batches of as many trials as it has in flight (up to kMaxProposeAhead), telling the strategy
  // every result that came back first: with one worker that is a result and a proposal at a time,
  // as a strategy is written for; with hundreds of fast workers one model update serves a batch,
  // where learning from every result would make the strategy the fleet's bottleneck.
  std::deque<codegen::Config> ready;
  // The config keys with a record in the store for this workload on the job's chip type, read
  // when the task starts (Store::RecordKeyHashes); only these are looked up. Unset: look up each.
  std::optional<std::vector<uint64_t>> record_keys;  // RecordKeyHash of each, sorted
  std::vector<agent::Observation> unseen;
  // Tells the strategy the results it has not seen (at most one model update).
  void FlushObservations() {
    if (strategy && !unseen.empty()) strategy->Observe(unseen);
    unseen.clear();
  }
};

inline constexpr int kMaxProposeAhead = 64;

struct JobEntry {
  v1::Job job;  // persisted: spec, state, per-task results and counts
  std::vector<TaskState> tasks;
  // By id. A trial enters through AddTrial and changes state only through SetState and Requeue,
  // which keep the two indexes below.
  std::map<std::string, v1::Trial> trials;
  // The trials not yet answered, by seq (oldest first): leasing, lease expiry, heartbeats and the
  // finish check walk these, not every trial of a long job (which made dispatch slow down as a
  // job grew).
  std::map<int64_t, v1::Trial*> pending;
  std::map<int64_t, v1::Trial*> leased;
  int64_t next_trial_seq = 1;
  std::deque<v1::JobEvent> events;  // the most recent, for WaitEvents
  int64_t next_event_seq = 1;

  v1::Trial& AddTrial(v1::Trial t);
  void SetState(v1::Trial& t, v1::TrialState state);
  // A lease handed back (released, expired, its worker gone): pending again at the next attempt,
  // so that a late report of the old attempt is answered as stale.
  void Requeue(v1::Trial& t);
  // The pending trials dropped (a finished job does not run them); returns their ids.
  std::vector<std::string> DropPending();
  // Every trial answered: none pending, none leased.
  bool Settled() const { return pending.empty() && leased.empty(); }

  bool terminal() const {
    auto s = job.state();
    return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
  }
  int Budget(int task) const { return job.tasks(task).trials_budget(); }
  // The task has proposed its whole budget, or its strategy has nothing new to propose.
  bool BudgetSpent(int task) const {
    return tasks[task].exhausted || tasks[task].proposed >= Budget(task);
  }
};

}  // namespace kiln::server
