// The coordinator's trial scheduler: which trial a worker leases next, and what a reported result
// does to its job. Its code is these Coordinator members, declared in server/coordinator.h and
// defined in server/trial_scheduler.cc (the *Locked ones run with the coordinator mutex held):
//   LeaseTrials (RPC)     binds a queued job to the worker's chip type (its strategies built
//                         with the mutex released, BuildStrategies) and leases it trials,
//                         long-polling until there is one; a TUNE trial races its task's best so
//                         far.
//   NextTrialLocked       a job's next trial: a pending one, oldest first (MayLeaseLocked sends a
//                         re-measurement to another worker), then each task's baseline, then a
//                         new proposal (StartingConfigs, then the strategy's) for the task picked
//                         next, answered from the store when this exact kernel was measured here
//                         (but for the best known configurations, BestKnownConfigs, timed again);
//                         once budgets are spent, final rounds and a model job's composed step.
//   ReportResults (RPC)   accepts results from the lease holder only, with plausible figures.
//   ApplyResultLocked     a result's effect: counts, the strategy told, a new best re-measured.
//   ApplyRemeasureLocked  a new best confirmed, or demoted.
// Final rounds are in server/final_rounds.h, tuning records in server/tuning_record.h.
//
// Not to be confused with server/planner/task_scheduler.h, the *task* scheduler of model jobs
// (Ansor's): it picks which task of a model job gets the next trial, and NextTrialLocked asks it.
#pragma once

#include <vector>

#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"
#include "server/job_state.h"

namespace kiln::server {

// A new best's re-measurement confirms it when it is at most this much slower than the first
// figure (DESIGN.md §5): a larger gap means the first run was luckier than the configuration is.
// Faster is always a confirmation (timing noise on a host makes runs slower, not faster).
inline constexpr double kConfirmRatio = 1.03;

// A task's first proposals, measured before its strategy's: the configurations its template
// expects to do well at this shape on this chip, then for a model task its template's safe
// default (the first value of every knob). Those that break a pin or a rule of the space are left
// out, and so are repeats. `first` go ahead of them all (the best known configurations of earlier
// jobs, BestKnownConfigs), through the same checks.
std::vector<codegen::Config> StartingConfigs(const JobEntry& job, int task, bool model,
                                             std::vector<codegen::Config> first = {});

// How many of the best known configurations of a (workload, chip type) a new task measures again
// before anything else, at most half its budget: enough to find the best known one again on this
// machine (a record's figure may have been a lucky run, or the host busier), few enough to leave
// the budget to new configurations.
inline constexpr int kBestKnownConfigs = 3;

// A best known configuration of task `task`'s workload on the job's chip type, and the earlier job
// that measured it.
struct BestKnown {
  codegen::Config config;
  std::string job_id;
};

// The configurations a task starts from: first `extended`'s (the job that `kiln submit --extend`
// continues, or null) best and finalists for the same workload, then the fastest records in the
// store for the workload on the job's chip type (`top`, fastest first), without repeats.
std::vector<BestKnown> BestKnownConfigs(const JobEntry& job, int task, const v1::Job* extended,
                                        const std::vector<v1::TuningRecord>& top);

// Sets each task's best_from_job: the earlier job that measured its best configuration when it
// was one of the best known configurations the task started from or a proposal answered from the
// store ("" when this job found it).
void NoteBestFromEarlierJobs(JobEntry& job);

// The TUNE trial whose new best `again` (a REMEASURE trial) re-measures: the latest answered one
// of the same task and configuration before it, or null.
const v1::Trial* RemeasuredTrial(const JobEntry& job, const v1::Trial& again);

}  // namespace kiln::server
