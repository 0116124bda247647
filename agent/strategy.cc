#include "agent/strategy.h"

#include <cstdlib>
#include <list>
#include <map>
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

namespace {

// What determines a task's space: the template (chip kind and workload), the chip traits it
// was sized for, and the domains and rules left after the job's pins, exclusions and ranges
// (every constraint's closure captures only values of the workload and the traits).
std::string SpaceSignature(const StrategyContext& context) {
  const codegen::ChipTraits t = codegen::TraitsFromFingerprint(context.chip);
  const v1::Workload& w = context.workload;
  std::string key =
      absl::StrCat(context.chip.kind(), "|", w.op(), ",", w.dtype(), ",", w.epilogue(), "|",
                   t.vector_floats, ",", t.vector_registers, ",", t.cores, ",", t.l1d_bytes, ",",
                   t.l2_bytes, ",", t.l3_bytes, ",", t.local_mem_bytes, ",", t.max_work_group_size);
  const std::map<std::string, int64_t> dims(w.dims().begin(), w.dims().end());
  for (const auto& [name, value] : dims) absl::StrAppend(&key, "|", name, "=", value);
  for (const codegen::Knob& k : context.space.knobs())
    absl::StrAppend(&key, "|", k.name, "=", absl::StrJoin(k.values, ","),
                    k.absent_means ? absl::StrCat("/", *k.absent_means) : "");
  for (const codegen::Constraint& c : context.space.constraints())
    absl::StrAppend(&key, "|", c.rule);
  return key;
}

// Indexes built lately, shared by the tasks of every job on the same space: enumerating a large
// sparse space (a GEMM's, up to 16M points) is seconds of the coordinator's CPU, and the next job
// on a model, an extension or a re-run, asks for the same spaces again. Each index is immutable.
// The most recent ones are kept while their rows stay under a budget; older ones live on only
// while a strategy still holds them.
class IndexCache {
 public:
  std::shared_ptr<const SpaceIndex> Get(const StrategyContext& context) {
    const std::string key = SpaceSignature(context);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = live_.find(key); it != live_.end())
        if (auto index = it->second.lock()) {
          Keep(key, index);
          return index;
        }
    }
    // Built outside the lock: two tasks on one new space may both build it (the same index).
    auto index = SpaceIndex::Build(context.space, nullptr, kEnumerateLimit);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = live_.begin(); it != live_.end();)
      it = it->second.expired() ? live_.erase(it) : std::next(it);
    live_[key] = index;
    Keep(key, index);
    return index;
  }

 private:
  static constexpr size_t kKeptRows = 1 << 18;
  static constexpr size_t kKeptIndexes = 32;
  void Keep(const std::string& key, const std::shared_ptr<const SpaceIndex>& index) {
    for (auto it = recent_.begin(); it != recent_.end(); ++it)
      if (it->first == key) {
        recent_.erase(it);
        break;
      }
    recent_.emplace_front(key, index);
    size_t rows = 0, n = 0;
    for (auto it = recent_.begin(); it != recent_.end(); ++it, ++n) {
      rows += it->second->rows().size();
      if (n > 0 && (rows > kKeptRows || n >= kKeptIndexes)) {
        recent_.erase(it, recent_.end());
        break;
      }
    }
  }
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<const SpaceIndex>> live_;
  std::list<std::pair<std::string, std::shared_ptr<const SpaceIndex>>> recent_;
};

}  // namespace

std::shared_ptr<const SpaceIndex> IndexFor(const StrategyContext& context) {
  if (context.index) return context.index;
  // Only a template's space is shared: a replay chip's travels in its fingerprint, and a space
  // built by hand (tests, benchmarks) has no chip or workload to tell it from another.
  if (context.chip.kind().empty() || context.chip.kind() == "replay" ||
      context.workload.op() == v1::OP_KIND_UNSPECIFIED)
    return SpaceIndex::Build(context.space, nullptr, kEnumerateLimit);
  static auto* cache = new IndexCache;
  return cache->Get(context);
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
