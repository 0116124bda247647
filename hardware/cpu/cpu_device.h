// The CPU device backend: the system C++ compiler -> shared object -> dlopen, on the host CPU.
#pragma once

#include <memory>

#include "hardware/device.h"

namespace kiln::hardware {

// Opens the host CPU. Probes its fingerprint (about a second, including the peak FLOP/s and
// bandwidth probe) unless `known` is given, which is then reused as is.
// Compiled kernels live in $KILN_CACHE_DIR (or $XDG_CACHE_HOME/kiln, ~/.cache/kiln)/kernels.
// The baseline is the fastest route a user could run instead (cpu/baselines/baselines.h).
std::unique_ptr<Device> NewCpuDevice(const v1::ChipFingerprint* known = nullptr);

}  // namespace kiln::hardware
