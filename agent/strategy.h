// The search-strategy extension point: Propose(n) configurations, Observe(results), seeded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_metrics.h"
#include "agent/space_index.h"
#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"

namespace kiln::agent {

struct Observation {
  codegen::Config config;
  v1::MeasurementStatus status = v1::STATUS_UNSPECIFIED;
  double median_us = 0;  // valid when status == OK
};

struct StrategyContext {
  codegen::KnobSpace space;
  v1::Workload workload;
  v1::ChipFingerprint chip;
  uint64_t seed = 0;
  // Optional: the valid configurations indexed ahead of time (a replay set's, shared by runs).
  std::shared_ptr<const SpaceIndex> index;
  // Optional: where learning strategies report metrics (default: DefaultAgentMetrics()).
  std::shared_ptr<AgentMetrics> metrics;
  // Optional, learning strategies: warm-start from this checkpoint, save to `save_checkpoint`.
  std::string init_checkpoint;
  std::string save_checkpoint;  // default: a file per task under the model directory, if set
  bool persist = true;          // false: never save (benchmarks, tests)
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Up to n valid configurations never proposed before; fewer when the space is exhausted.
  virtual std::vector<codegen::Config> Propose(int n) = 0;
  virtual void Observe(const std::vector<Observation>& results) = 0;
  // Marks a configuration as already proposed (used when a job is recovered after a restart).
  virtual void Exclude(const codegen::Config& config) = 0;
};

// Names accepted in JobSpec.strategy; "" and "default" mean kDefaultStrategy. A learning
// strategy also accepts "NAME:CHECKPOINT" to start from a pre-trained model: CHECKPOINT names a
// file (CHECKPOINT or CHECKPOINT.pt) in the checkpoint directory, never a path, because jobs
// come from the network and must not make the coordinator open (or reveal) its other files.
// Trusted local tools that load a file by path set StrategyContext.init_checkpoint instead.
std::vector<std::string> StrategyNames();
// The default is the winner of the search benchmark (docs/benchmarks.md, "Search strategies").
inline constexpr char kDefaultStrategy[] = "policy";
absl::Status CheckStrategyName(const std::string& name);

absl::StatusOr<std::unique_ptr<Strategy>> NewStrategy(const std::string& name,
                                                      StrategyContext context);

// Where learning strategies keep checkpoints (per task under tasks/, pre-trained models by
// name): $KILN_MODEL_DIR if set, else what the coordinator set (DATA_DIR/models); empty:
// nothing is saved.
void SetModelDirectory(std::string dir);
std::string ModelDirectory();
// Where "policy:NAME" finds NAME: what was set (the coordinator's --checkpoint-dir, default
// DATA_DIR/checkpoints), else $KILN_CHECKPOINT_DIR; empty: no name resolves.
void SetCheckpointDirectory(std::string dir);
std::string CheckpointDirectory();

// The index of the context's space: the given one, or built (enumerated when small enough).
std::shared_ptr<const SpaceIndex> IndexFor(const StrategyContext& context);

}  // namespace kiln::agent
