// Checkpoints of the policy network and cost model: one file per job, or pre-trained for transfer.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/policy/cost_model.h"
#include "agent/policy/policy_net.h"

namespace kiln::agent {

// Writes both models (either may be null) to `path` atomically (a temporary file, renamed).
absl::Status SaveCheckpoint(const std::string& path, PolicyNet* policy, CostModel* cost);
// Loads what `path` holds into the given models. The shared networks load into any knob space;
// the policy's per-space offsets only into a space of the same shape.
absl::Status LoadCheckpoint(const std::string& path, PolicyNet* policy, CostModel* cost);
// Copies the shared weights (not the per-space offsets) between models of different spaces.
void CopySharedWeights(PolicyNet& from, PolicyNet& to);
void CopySharedWeights(CostModel& from, CostModel& to);

// The path of the checkpoint NAME: CheckpointDirectory()/NAME, or NAME.pt there, a regular
// file. NAME matches [A-Za-z0-9._-]{1,128} and does not start with '.'. Every refusal of a
// well-formed name reads the same whether or not anything exists under it elsewhere, and a
// malformed one is refused before the file system is asked, so a job learns nothing of the
// coordinator's files.
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& name);
inline constexpr size_t kMaxCheckpointNameChars = 128;

}  // namespace kiln::agent
