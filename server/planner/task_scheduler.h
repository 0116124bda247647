// Model jobs' task scheduler (Ansor's gradient rule): which task gets the next trial, when the
// composed-step (STEP) trial is due, and the job's tokens-per-second figures. It ranks tasks; the
// coordinator's trial scheduler (server/trial_scheduler.h) asks it, then leases trials to workers.
#pragma once

#include <vector>

#include "kiln/v1/types.pb.h"
#include "server/job_state.h"

namespace kiln::server {

// Tokens a step of the job's phase produces (decode: batch) or consumes (prefill).
int TokensPerStep(const v1::JobSpec& spec);

// TUNE trials proposed across all tasks.
int TotalProposed(const JobEntry& job);

// The task whose next trial promises the largest gain in whole-model tokens/s, or -1 when the
// job's budget is spent or every task is exhausted. Tasks with no trial yet go first. For task
// i with count w_i, in-step factor f_i (TaskResult.in_step_factor, 1 before the probe step), best
// latency g_i after t_i trials, the step time saved by its next trial is estimated as
// d_i = w_i * f_i * (a * (recent drop of g_i per trial) + (1 - a) * g_i / (t_i + 1)), i.e.
// Ansor's backward-looking improvement rate mixed with its optimistic forward-looking term
// (Zheng et al., OSDI'20, §6), and the gain is in tokens/s: tokens / (T - d_i) - tokens / T for
// the step time T = sum of w_j * f_j * g_j. `skip_awaiting`: passes over the tasks waiting for a
// lease to bring their strategy's next proposals (TaskState::AwaitingProposals), -1 when only
// those are left.
int PickModelTask(const JobEntry& job, bool skip_awaiting = false);

// The probe step (StepRequest.probe) is due: a model job that allows it, half its budget spent,
// a verified best for every task, enough budget left for the correction to act on, and no probe
// yet. Its operators' times inside the step set each task's in_step_factor (ApplyStepResult).
bool ProbeDue(const JobEntry& job);

// The step rounds are due: the probe step is allowed, every task's final rounds are decided (the
// budget spent, nothing pending), and some task has two or more finalists that passed them. Each
// task's finalists are then timed inside the composed step, in turns, and the one fastest there
// (beyond the noise margin) becomes its best before the final step (ApplyStepResult decides).
bool StepRoundsDue(const JobEntry& job);
// The step rounds' requests, in lease order: per round, each variant (a probe whose kernels are
// each task's variant-th finalist), the variants' order reversed every other round.
std::vector<v1::StepRequest> BuildStepRounds(const JobEntry& job);

// True when every task's budget is spent, nothing is pending, every task has a verified best,
// the step rounds (if due) have run, and no (final) STEP trial exists yet.
bool StepDue(const JobEntry& job);
bool StepPending(const JobEntry& job);  // a STEP trial (final or probe) exists and is not DONE

// The STEP request: the model, phase and the best config of every task (with its median alone).
v1::StepRequest BuildStepRequest(const JobEntry& job, bool probe = false);

// Recomputes the estimated tokens/s from the tasks' bests (0 until every task has one).
void UpdateEstimate(JobEntry& job);

// Records a STEP trial's result in job.tokens_per_second (keeps the estimate); the midway
// probe's sets the tasks' in_step_factor instead (the step time is not a result yet), and the
// last step round's decides each task's step_finalists and best. Returns the tasks whose best
// changed.
std::vector<int> ApplyStepResult(JobEntry& job, const v1::Trial& trial);

}  // namespace kiln::server
