// The simulated systolic-array accelerator backend ("sim:NAME"): deterministic GEMM latencies
// from an analytic model, labelled as simulated wherever they appear.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hardware/device.h"

namespace kiln::hardware {

// NAME as ParseSystolicName takes it ("systolic-128x128"); the chip type is "sim-" + the
// canonical name, the vendor "simulated". With `known`, checks that it names the same chip.
// Measurements carry one deterministic sample and a message starting "simulated:"; the
// baseline is the template's default mapping ("sim-default-mapping").
absl::StatusOr<std::unique_ptr<Device>> NewSimDevice(const std::string& name,
                                                     const v1::ChipFingerprint* known = nullptr);

}  // namespace kiln::hardware
