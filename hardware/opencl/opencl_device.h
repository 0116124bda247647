// The OpenCL device backend: OpenCL C templates built by the OpenCL runtime, on any OpenCL
// device (PoCL on the CPU in tests and CI).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "hardware/device.h"

namespace kiln::hardware {

// Opens OpenCL device `index` (a flat index over every platform's devices; "opencl:N"). Probes
// its fingerprint (about a second) unless `known` is given, which is then reused after checking
// that it names the same device. The GEMM baseline is CLBlast's SGEMM where the build has it
// ("clblast-sgemm"); the other operators' baseline is their template's default configuration.
absl::StatusOr<std::unique_ptr<Device>> NewOpenClDevice(int index,
                                                        const v1::ChipFingerprint* known = nullptr);

}  // namespace kiln::hardware
