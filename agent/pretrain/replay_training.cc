#include "agent/pretrain/replay_training.h"

namespace kiln::agent {

TrainingSet TrainingSetOf(const hardware::ReplaySet& set) {
  TrainingSet t;
  t.name = set.name;
  for (const auto& k : set.knobs) t.space.AddKnob(k.name, k.values);
  t.workload = set.Workload();
  t.chip = set.Chip();
  for (const auto& e : set.entries) {
    t.configs.push_back(set.ConfigOf(e));
    t.median_us.push_back(e.status == v1::OK ? e.median_us : 0);
  }
  return t;
}

}  // namespace kiln::agent
