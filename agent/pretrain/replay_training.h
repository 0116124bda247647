// A replay set (a Kernel Tuner cache or a Kiln record export) as pretraining data: what
// `kiln agent pretrain` and kiln-bench-search --holdout train checkpoints on.
#pragma once

#include "agent/pretrain/pretrain.h"
#include "hardware/replay/replay_set.h"

namespace kiln::agent {

// Every recorded configuration with its median (0 for one that failed), the set's knobs as the
// space, and its workload and chip.
TrainingSet TrainingSetOf(const hardware::ReplaySet& set);

}  // namespace kiln::agent
