// The replay device backend: answers trials from a recorded data set ("replay:PATH").
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hardware/device.h"
#include "hardware/replay/replay_set.h"

namespace kiln::hardware {

// Opens the data set at `path`. Its fingerprint is kind "replay", chip type
// "replay-<file stem>", and carries the knob space (codegen::ReplaySpaceFromFingerprint), so the
// coordinator proposes only recorded configurations. With `known` (the sandboxed trial child),
// the file is read only if a baseline is asked for: Compile looks the result up and hands it
// to Measure inside the artifact.
absl::StatusOr<std::unique_ptr<Device>> NewReplayDevice(const std::string& path,
                                                        const v1::ChipFingerprint* known = nullptr);
// The same over a set already in memory (tests, in-process use).
std::unique_ptr<Device> NewReplayDevice(std::shared_ptr<const ReplaySet> set);

// Puts the set's knob space into a fingerprint (bitmap of recorded combinations when the
// Cartesian product has at most 2^22 points; otherwise absent ones answer UNSUPPORTED).
void DescribeSpace(const ReplaySet& set, v1::ChipFingerprint* fp);

}  // namespace kiln::hardware
