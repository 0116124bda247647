// Search-benchmark arithmetic: runs a strategy on a replay set, trials-to-95%, random baselines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

}  // namespace kiln::bench
