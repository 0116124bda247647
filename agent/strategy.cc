#include "agent/strategy.h"

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/annealing/annealing_strategy.h"
#include "agent/evolution/evolution_strategy.h"
#include "agent/policy/checkpoint.h"
#include "agent/policy/policy_strategy.h"
#include "agent/random/random_strategy.h"
#include "common/text.h"

namespace kiln::agent {
namespace {

// Spaces with at most this many Cartesian points are enumerated up front.
constexpr uint64_t kEnumerateLimit = 1 << 18;

std::mutex metrics_mu;
std::shared_ptr<AgentMetrics>& MetricsSlot() {
  static auto* slot = new std::shared_ptr<AgentMetrics>();
  return *slot;
}

std::mutex dir_mu;
std::string& DirSlot() {
  static auto* dir = new std::string();
  return *dir;
}
std::string& CheckpointDirSlot() {
  static auto* dir = new std::string();
  return *dir;
}

// "policy:CHECKPOINT" -> {"policy", "CHECKPOINT"}.
std::pair<std::string, std::string> SplitName(const std::string& name) {
  size_t colon = name.find(':');
  if (colon == std::string::npos) return {name, ""};
  return {name.substr(0, colon), name.substr(colon + 1)};
}

}  // namespace

void SetDefaultAgentMetrics(std::shared_ptr<AgentMetrics> sink) {
  std::lock_guard<std::mutex> lock(metrics_mu);
  MetricsSlot() = std::move(sink);
}

std::shared_ptr<AgentMetrics> DefaultAgentMetrics() {
  std::lock_guard<std::mutex> lock(metrics_mu);
  return MetricsSlot();
}

void SetModelDirectory(std::string dir) {
  std::lock_guard<std::mutex> lock(dir_mu);
  DirSlot() = std::move(dir);
}

std::string ModelDirectory() {
  const char* env = std::getenv("KILN_MODEL_DIR");  // the operator's choice wins
  if (env && *env) return env;
  std::lock_guard<std::mutex> lock(dir_mu);
  return DirSlot();
}

void SetCheckpointDirectory(std::string dir) {
  std::lock_guard<std::mutex> lock(dir_mu);
  CheckpointDirSlot() = std::move(dir);
}

std::string CheckpointDirectory() {
  {
    std::lock_guard<std::mutex> lock(dir_mu);
    if (!CheckpointDirSlot().empty()) return CheckpointDirSlot();
  }
  const char* env = std::getenv("KILN_CHECKPOINT_DIR");
  return env ? env : "";
}

std::vector<std::string> StrategyNames() { return {"random", "annealing", "evolution", "policy"}; }

absl::Status CheckStrategyName(const std::string& name) {
  if (name.empty() || name == "default") return absl::OkStatus();
  auto [base, checkpoint] = SplitName(name);
  for (const auto& n : StrategyNames()) {
    if (n != base) continue;
    if (name.find(':') == std::string::npos) return absl::OkStatus();
    if (base != "policy")
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy: '", ShortQuote(base), "' learns nothing, so it takes no checkpoint"));
    auto path = ResolveCheckpoint(checkpoint);
    if (!path.ok())
      return absl::InvalidArgumentError(absl::StrCat("strategy: ", path.status().message()));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown strategy '", ShortQuote(name), "'; known: default, ",
                   absl::StrJoin(StrategyNames(), ", "), " (policy:CHECKPOINT to warm-start)"));
}

std::shared_ptr<const SpaceIndex> IndexFor(const StrategyContext& context) {
  if (context.index) return context.index;
  return SpaceIndex::Build(context.space, nullptr, kEnumerateLimit);
}

absl::StatusOr<std::unique_ptr<Strategy>> NewStrategy(const std::string& name,
                                                      StrategyContext context) {
  auto status = CheckStrategyName(name);
  if (!status.ok()) return status;
  std::string resolved = (name.empty() || name == "default") ? kDefaultStrategy : name;
  if (!context.metrics) context.metrics = DefaultAgentMetrics();
  if (resolved == "random") return NewRandomStrategy(std::move(context));
  if (resolved == "annealing") return NewAnnealingStrategy(std::move(context));
  if (resolved == "evolution") return NewEvolutionStrategy(std::move(context));
  auto [base, checkpoint] = SplitName(resolved);
  if (base == "policy") {
    if (!checkpoint.empty()) {
      auto path = ResolveCheckpoint(checkpoint);
      if (!path.ok()) return path.status();
      context.init_checkpoint = *path;
    }
    PolicyOptions options;
    if (const char* env = std::getenv("KILN_POLICY_OPTIONS")) {  // experiments only
      auto s = ParsePolicyOptions(env, &options);
      if (!s.ok()) return s;
    }
    return NewPolicyStrategy(std::move(context), options);
  }
  return absl::InternalError(absl::StrCat("strategy ", resolved, " has no factory"));
}

}  // namespace kiln::agent
