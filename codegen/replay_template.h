// The replay "template": the knob space of a recorded data set, carried by the replay device's
// fingerprint; rendering just names the configuration for the device to look up.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "codegen/kernel_template.h"

namespace kiln::codegen {

// Supports every workload: what is tuned is whatever the data set recorded.
std::unique_ptr<KernelTemplate> NewReplayTemplate();

// The space in a replay fingerprint: its knobs and, when present, only the recorded
// combinations (replay_present bitmap, first knob fastest).
absl::StatusOr<KnobSpace> ReplaySpaceFromFingerprint(const v1::ChipFingerprint& chip);

}  // namespace kiln::codegen
