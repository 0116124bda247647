// Pre-training the policy network and cost model from recorded measurements (transfer).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"

namespace kiln::agent {

// One recorded landscape: a space, its context, and what each recorded configuration gave.
struct TrainingSet {
  std::string name;
  codegen::KnobSpace space;  // knobs; the recorded configurations are taken as the valid set
  v1::Workload workload;
  v1::ChipFingerprint chip;
  std::vector<codegen::Config> configs;
  std::vector<double> median_us;  // 0 where the configuration failed
};

struct PretrainOptions {
  int cost_steps = 300;        // cost-model steps per set
  int policy_steps = 120;      // behaviour-cloning steps per set
  double top_fraction = 0.03;  // the policy imitates this fastest share of each set
  uint64_t seed = 1;
};

// Trains one cost model on every set (ranking within each set) and the policy's shared network
// to put mass on each set's fastest configurations, then writes a checkpoint any job can start
// from ("policy:PATH"). Progress and per-set rank accuracy go to `log` when given, and for each
// of `held_out` (sets not trained on) how well the trained cost model ranks it: whether the
// checkpoint will help a job on that space.
absl::Status Pretrain(const std::vector<TrainingSet>& sets, const PretrainOptions& options,
                      const std::string& out_path, std::ostream* log = nullptr,
                      const std::vector<TrainingSet>& held_out = {});

}  // namespace kiln::agent
