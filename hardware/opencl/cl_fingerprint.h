// The fingerprint of an OpenCL device: identity, limits (local memory, work-group size),
// caches, and measured peak FLOP/s and read bandwidth.
#pragma once

#include <string>

#include "hardware/opencl/cl_runtime.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// "opencl-pocl-cpu", "opencl-nvidia-gpu": the platform's short name and the device type.
std::string ClChipType(const ClDeviceInfo& info);

// Probes the device (about a second). A CPU device (PoCL) takes its caches and peaks from the
// host CPU's fingerprint probe, which bounds what any OpenCL kernel on it can reach; other
// devices run two OpenCL probe kernels (FMA chains, a streaming sum). Peaks stay 0 (roofline
// guard off) when probing fails.
v1::ChipFingerprint ProbeClFingerprint(ClRuntime& rt);

}  // namespace kiln::hardware
