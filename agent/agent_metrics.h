// Where learning strategies report their figures (policy loss, entropy, reward, rank accuracy).
#pragma once

#include <memory>
#include <string>

namespace kiln::agent {

// Metric names reported through AgentMetrics::Report.
inline constexpr char kPolicyLoss[] = "kiln_policy_loss";
inline constexpr char kPolicyEntropy[] = "kiln_policy_entropy";
inline constexpr char kPolicyReward[] = "kiln_policy_reward";
inline constexpr char kCostModelRankAccuracy[] = "kiln_cost_model_rank_accuracy";
// A warm start's trust check: the checkpoint's rank accuracy on the first results (reported
// once; the coordinator has no gauge for it yet, tests and benchmarks read it).
inline constexpr char kPriorRankAccuracy[] = "kiln_policy_prior_rank_accuracy";
// A warm start's prior mean: the weight fitted to the checkpoint's predictions at each learning
// update (0: the prior does not rank this task's results).
inline constexpr char kPriorWeight[] = "kiln_policy_prior_weight";

// A sink the coordinator implements (server/ forwards to Prometheus gauges). Called from the
// thread that drives the strategy; implementations must be cheap and thread-safe.
class AgentMetrics {
 public:
  virtual ~AgentMetrics() = default;
  virtual void Report(const std::string& name, double value) = 0;
};

// The process-wide sink used when a StrategyContext names none (null: not reported).
void SetDefaultAgentMetrics(std::shared_ptr<AgentMetrics> sink);
std::shared_ptr<AgentMetrics> DefaultAgentMetrics();

}  // namespace kiln::agent
