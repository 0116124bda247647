// Search-benchmark arithmetic: runs a strategy on a replay set, trials-to-95%, random baselines.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/pretrain/pretrain.h"
#include "agent/pretrain/replay_training.h"
#include "agent/space_index.h"
#include "hardware/replay/replay_set.h"

namespace kiln::bench {

// A replay set prepared once and shared by every run on it.
struct Space {
  std::string path;
  std::shared_ptr<const hardware::ReplaySet> set;
  std::shared_ptr<const agent::SpaceIndex> index;
  std::vector<double> sorted_us;  // per entry, ascending; failures as the slowest OK time
  double best_us = 0;
  double worst_us = 0;
  int good = 0;  // entries within 95% of the best performance
};
absl::StatusOr<Space> PrepareSpace(const std::string& path);

// One run: best-so-far latency after each trial (worst OK time before the first OK result).
struct Trace {
  std::vector<double> best_us;
  int trials_to_target = -1;  // first trial reaching 95% of the best performance; -1 if never
  double agent_seconds = 0;   // CPU time of the strategy: construction, Propose, Observe
  // A warm start's prior mean (agent::kPriorWeight): learning updates that fitted its weight, and
  // those that gave it weight above 0 (the prior ranked the task's first results).
  int prior_fits = 0, prior_weighted = 0;
};
// Runs `strategy` for at most `budget` trials, stopping early once the target is reached and
// `keep_going` trials have been made. `context_checkpoint` warm-starts learning strategies.
absl::StatusOr<Trace> RunOnce(const Space& space, const std::string& strategy, uint64_t seed,
                              int budget, int keep_going, const std::string& checkpoint = "");

// Random search without replacement, `good` of `n` configurations on target: its mean trials to
// draw a good one, (n+1)/(good+1), and its median, the smallest t with
// P(a good one among t draws) >= 1/2. With good = 0 both are n+1 (never found).
double RandomExpectedTrials(int n, int good);
int RandomMedianTrials(int n, int good);
// Expected best latency of k random trials without replacement.
double RandomExpectedBest(const Space& space, int k);

struct Summary {
  double median_trials = -1;  // -1: not reached by at least half the runs within the budget
  double mean_trials = 0;     // a run that did not reach the target within the budget counts as it
  double reached_share = 0;
  double score_10 = 0, score_25 = 0;
  double agent_ms_per_trial = 0;
};
Summary Summarize(const Space& space, const std::vector<Trace>& runs, int budget);

// The median of the runs' trials to target, a run that missed counting as +infinity (so the
// median is infinite when under half the runs reached it).
double MedianTrials(const std::vector<Trace>& runs);
// Random's median over the strategy's, the strategy's taken as `budget` when infinite.
double MedianRatio(int random_median, double median_trials, int budget);

// A percentile bootstrap over seeds: `resamples` times, as many runs drawn with replacement as
// there are, and the median trials to target of each draw (in the order drawn, +infinity where
// under half the drawn runs reached the target). The same seed gives the same draws: for two sets
// of as many runs, the same indices, so two strategies run on the same seeds are resampled in
// pairs by calling it on each with one seed (CompareTransfer).
std::vector<double> BootstrapMedians(const std::vector<Trace>& runs, int resamples, uint64_t seed);
struct Interval {
  double lo = 0, hi = 0;  // either may be +infinity (unreached)
};
// The central `level` share of `values`: the (1-level)/2 and (1+level)/2 order statistics.
Interval PercentileInterval(std::vector<double> values, double level = 0.95);

// --holdout. A row of the table: a strategy as given, or its leave-one-out rerun.
enum class Holdout {
  kNoLearnedState,   // learns nothing across spaces: the same figure with or without --holdout
  kGivenCheckpoint,  // starts from the checkpoint given (or the default's own), trained on anything
  kLeaveOneOut,      // starts, per space, from a checkpoint pretrained on the other spaces only
  kNoPrior,          // --transfer: a strategy given a checkpoint, rerun without one
};
// "no learned state", "given-checkpoint", "loo-checkpoint", "no-prior"
const char* HoldoutLabel(Holdout h);
struct Row {
  std::string strategy;    // as given on the command line
  std::string name;        // for agent::NewStrategy
  std::string checkpoint;  // a path for StrategyContext.init_checkpoint; "" for none (or per space)
  Holdout holdout = Holdout::kNoLearnedState;
};
// This local tool may load a checkpoint by path ("policy:/tmp/ck.pt"): the strategy's name then
// travels without it and the file goes in StrategyContext.init_checkpoint, since strategy names
// themselves take only checkpoint names (agent/strategy.h). {name, ""} for anything else.
std::pair<std::string, std::string> SplitCheckpointPath(const std::string& strategy);
// One row per strategy; under `holdout`, a strategy that starts from a checkpoint (a path or a
// name given with it, or the default strategy's own) is followed by its leave-one-out row. Under
// `transfer`, every strategy that can start from a checkpoint (the policy, so also the default)
// is followed by a leave-one-out row, and, when it was given a checkpoint, by a no-prior row
// before that: the as-given row is the no-prior run when no checkpoint was given.
std::vector<Row> PlanRows(const std::vector<std::string>& strategies, bool holdout,
                          bool transfer = false);
// What a leave-one-out checkpoint for `spaces[held_out]` trains on: every other space, less any
// copy of the held-out one (the same file or the same set name).
std::vector<agent::TrainingSet> LeaveOneOutSets(const std::vector<Space>& spaces, size_t held_out);

// --transfer: for one strategy, the places in PlanRows' rows of its run without a prior, its run
// from the leave-one-out checkpoint and, when a checkpoint was given, its run from that one.
struct TransferRows {
  std::string strategy;
  size_t no_prior = 0, loo = 0;
  int given = -1;  // -1: no checkpoint given
};
std::vector<TransferRows> PlanTransfers(const std::vector<Row>& rows);
// Whether a prior helped, from the interval of (trials without it) / (trials with it): "helped"
// when the interval lies above 1, "hurt" when below 1, else "no difference within noise".
const char* TransferVerdict(const Interval& ratio_ci);
struct TransferComparison {
  double no_prior_median = 0, prior_median = 0;  // MedianTrials: +infinity when unreached
  double ratio = 0;  // no_prior_median / prior_median, each taken as `budget` when unreached
  Interval ci;       // its 95% bootstrap interval, the runs resampled in pairs by seed
  const char* verdict = "";
};
// The same seeds run without a prior and with one (runs[i] of each from the same seed). Pairs are
// resampled together: with one seed both start alike (the same space-filling trials, and the same
// search throughout while the prior has no weight), and drawn apart, the luck they share would
// widen the interval of their ratio.
TransferComparison CompareTransfer(const std::vector<Trace>& no_prior,
                                   const std::vector<Trace>& with_prior, int budget, int resamples,
                                   uint64_t seed);

}  // namespace kiln::bench
