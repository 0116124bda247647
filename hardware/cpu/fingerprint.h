// The host CPU's fingerprint: identity, ISA, caches, memory, and measured peak FLOP/s and
// read bandwidth.
#pragma once

#include <string>
#include <vector>

#include "hardware/toolchain.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// Probes the host. Peaks come from a probe program built with `toolchain` and run as a child
// process (about a second in all), once per boot: later calls read the figures kept beside the
// probe in CacheDir()/kernels, unless `fresh`: that measures again, and each figure kept is the
// higher of the two (a probe on a busy machine reads low, never high).
// Without a toolchain, or if the probe fails, they stay 0 (unknown) and the roofline guard is off.
v1::ChipFingerprint ProbeCpuFingerprint(const Toolchain* toolchain, bool fresh = false);

// Raises each measured figure of `into` (FMA, bf16 and int8 peaks, read bandwidth) to `from`'s
// where that is higher: a probe on a busy machine reads low, never high.
void KeepHigherPeaks(const v1::ChipFingerprint& from, v1::ChipFingerprint* into);

// The ISA flags that matter for kernels (sse4_2 avx avx2 fma avx512* amx_* sve ...), from a
// /proc/cpuinfo "flags"/"Features" line.
std::vector<std::string> RelevantIsaFeatures(const std::string& flags_line);

// "cpu-x86_64-avx512", "cpu-x86_64-avx2", otherwise "cpu-<machine>" (uname -m).
std::string CpuChipType(const std::string& machine, const std::vector<std::string>& features);

}  // namespace kiln::hardware
