// In-memory state of one job in the coordinator: its tasks, strategies, trials and events.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/strategy.h"
#include "codegen/knob_space.h"
#include "kiln/v1/tuning_service.pb.h"

namespace kiln::server {

// A task's strategy and the lock that serializes the calls into it. A lease that finds its task's
// proposals run out calls Observe and Propose with only this lock held, never the coordinator's
// mutex (Coordinator::LeaseTrials): a strategy that takes milliseconds must not stall the leases
// and reports of every job. Shared, so that a lease still proposing keeps it alive when its job is
// finished, evicted or rebuilt meanwhile.
struct TaskStrategy {
  explicit TaskStrategy(std::unique_ptr<agent::Strategy> s) : impl(std::move(s)) {}
  std::mutex mu;
  std::unique_ptr<agent::Strategy> impl;
};

struct TaskState {
  std::shared_ptr<TaskStrategy> strategy;  // set once the job is bound to a chip type
  int proposed = 0;                        // TUNE trials created so far
  bool exhausted = false;                  // the strategy has nothing new to propose
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
  // New bests awaiting their re-measurement: the REMEASURE trial's id -> the first figure, us.
  // (Not stored: after a restart a candidate may be re-measured that need not have been.)
  std::map<std::string, double> confirming;
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
  // Starts handed out that the strategy is not yet told of (Strategy::Exclude): told by the next
  // proposing lease, before it proposes, so that no strategy call waits under the mutex.
  std::vector<codegen::Config> unexcluded;
  // The id of the proposal request a lease runs for this task now (0: none). Its proposals join
  // `ready` only while this still names it: a task reset or rebuilt meanwhile drops them.
  uint64_t proposing = 0;
  // Nothing to hand out until the proposing lease is back: other leases pass the task over.
  bool AwaitingProposals() const { return proposing != 0 && ready.empty() && starts.empty(); }
};

inline constexpr int kMaxProposeAhead = 64;
// Added to a batch for the leases parked waiting for it (their workers are idle now): a fleet
// that starts at once is served by a few batches, not one batch of 64 after another.
inline constexpr int kMaxProposeForWaiting = 4096;

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
  // The id of the bind request a lease runs for this queued job now (0: none): its strategies are
  // built with the mutex released and installed only while this still names it. Meanwhile other
  // leases pass the job over, as a task awaiting proposals.
  uint64_t binding = 0;

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
