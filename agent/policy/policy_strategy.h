// The policy agent: PPO policy proposes, the cost model screens, a share is kept for exploration.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "agent/strategy.h"

namespace kiln::agent {

// The screen's surrogate for mean and spread (the override `gp`, by name or old number).
enum class Surrogate {
  kEnsemble = 0,  // the cost model's ensemble alone
  kGp = 1,        // a Gaussian process over the knob rows (agent/policy/gp_model.h) alone
  kBlend = 2,     // the average of the two
};

// How a warm start uses its checkpoint (the override `prior_mean`, by name or old number).
enum class PriorMean {
  // Both networks loaded and fine-tuned, under the trust check (trust_after, trust_min).
  kNone = 0,
  // The checkpoint's cost model, frozen, is the GP's prior mean, scaled by a weight fitted to
  // this task's results (0 when it does not rank them); the search is otherwise the cold one
  // (needs a GP in the surrogate).
  kCostModel = 1,
  // The same, and the policy network loaded too.
  kCostModelAndPolicy = 2,
};

struct PolicyOptions {
  int initial = 10;           // space-filling trials before the models lead (cold start)
  int initial_warm = 2;       // the same when warm-started from a checkpoint
  int pool_policy = 384;      // policy samples screened per refresh
  int pool_uniform = 64;      // uniform samples screened per refresh
  int neighbours_of = 4;      // best results whose one-knob neighbourhoods are screened
  double explore = 0.2;       // share of proposals drawn from the policy unscreened
  double kappa = 2.0;         // screening by lower confidence bound: mean - kappa * spread
  double crowd = 0.3;         // screening adds this times log(1 + measured one-knob neighbours)
  int crowd_after = 30;       // ... once the best has not improved by 1% for this many results
  double fail_penalty = 1.0;  // screening adds this times the predicted chance of failing
  Surrogate surrogate = Surrogate::kBlend;  // the screen's mean and spread (override `gp`)
  double gp_kappa = 1.0;  // the LCB's kappa when the GP leads (its spread is calibrated)
  int gp_rows = 128;      // most results the GP conditions on
  int gp_tune_every = 8;  // results between refits of the GP's kernel weights
  double gp_prior = 1.0;  // exponential prior rate on the GP's kernel weights
  // Share of proposals from a local walk: annealing's Metropolis chain over one-knob moves,
  // moved to the best result whenever that is 1% better than where the walk stands, and stepping
  // for free through rows any part of the search measured. 0: off.
  double local = 0.35;
  // ... tilted toward the arm (walk or screen) whose results more often enter the fastest 8 so
  // far: the share is local * w / (local * w + (1 - local) * s), w and s the arms' hit rates
  // (decaying by 2% per result, each shrunk toward the pooled rate by this many pseudo-results),
  // kept in [0.1, 0.7]. 0: the share stays `local`.
  double local_adapt = 10;
  // When a result improves the best by 1%, its unmeasured one-knob neighbours along knobs with
  // at most this many values are measured next (a categorical flip of the new best). 0: off.
  int flip_max = 4;
  int flip_cap = 3;          // ... at most this many of them, the screen's favourites (0: all)
  int cost_steps = 6;        // cost-model gradient steps per learning update
  int cost_steps_early = 6;  // the same while under 64 results (cheap, and each one matters)
  int ppo_epochs = 2;        // PPO passes per learning update
  int ppo_window = 256;      // most recent observations in a PPO batch
  int save_every = 64;       // observations between per-job checkpoint saves
  // PriorMean::kNone's trust check: after trust_after successful results, the checkpoint's cost
  // model (as loaded) ranks them; below trust_min of pairs in the right order, the policy and
  // cost model start over cold from the measurements. 0 disables the check.
  int trust_after = 8;
  double trust_min = 0.6;
  int trust_refill = 10;  // space-filling trials after a distrusted prior is dropped
  PriorMean prior_mean = PriorMean::kCostModel;  // how a warm start uses its checkpoint
  double prior_ridge = 4;  // the weight's shrinkage, in units of the predictions' variance
  // Which results the weight trusts. The screen measures the prior's favourites, and among them
  // a prior can look right where it is wrong over the space; rows picked without the models
  // (space filling, uniform draws) are an unbiased sample. When set, the weight, fitted on every
  // result, counts only once the unbiased rows (at least prior_fit_min) correlate with the prior
  // by more than prior_fit_corr, else it is 0.
  bool prior_fit = true;
  int prior_fit_min = 6;
  double prior_fit_corr = 0.3;
  // The prior's predictions floored at this quantile of a uniform sample of the space (flat over
  // its predicted fastest share, where a prior from other spaces ranks at chance); 0: off.
  double prior_clip = 0.1;
};
// Reads overrides such as "kappa=1,explore=0.05,gp=ensemble" (for experiments; unknown keys and
// values out of range are errors naming the key).
absl::Status ParsePolicyOptions(const std::string& text, PolicyOptions* o);

absl::StatusOr<std::unique_ptr<Strategy>> NewPolicyStrategy(StrategyContext context,
                                                            PolicyOptions options = {});

}  // namespace kiln::agent
