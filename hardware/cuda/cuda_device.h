// The CUDA device backend: CUDA C++ templates compiled by NVRTC and run through the driver API
// (both loaded at run time); the GEMM baseline is cuBLAS.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "hardware/device.h"

namespace kiln::hardware {

// Opens CUDA device `index` ("cuda:N"). UNAVAILABLE on machines without an NVIDIA driver or
// GPU. With `known` (the sandboxed child) the fingerprint is reused after checking the name.
// Kernels compile for the device's sm_XY; baselines: cuBLAS SGEMM ("cublas-sgemm") for GEMM,
// the template's default configuration for the other operators.
absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice(int index,
                                                      const v1::ChipFingerprint* known = nullptr);

// The SM architecture a fingerprint names (its "sm_90" feature), or 0.
int CudaArch(const v1::ChipFingerprint& chip);

}  // namespace kiln::hardware
