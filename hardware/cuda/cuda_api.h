// The CUDA driver API, NVRTC and cuBLAS loaded with dlopen at run time: every binary starts on
// machines without an NVIDIA driver, where the cuda device reports itself unavailable.
#pragma once

#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::hardware {

// The driver entry points Kiln uses (the versioned symbols cuda.h maps its names to).
struct CudaDriver {
  decltype(&::cuInit) Init;
  decltype(&::cuDriverGetVersion) DriverGetVersion;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetName) DeviceGetName;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDeviceTotalMem) DeviceTotalMem;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxSynchronize) CtxSynchronize;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleUnload) ModuleUnload;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuMemAlloc) MemAlloc;
  decltype(&::cuMemFree) MemFree;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH;
  decltype(&::cuEventCreate) EventCreate;
  decltype(&::cuEventDestroy) EventDestroy;
  decltype(&::cuEventRecord) EventRecord;
  decltype(&::cuEventSynchronize) EventSynchronize;
  decltype(&::cuEventElapsedTime) EventElapsedTime;
  decltype(&::cuGetErrorName) GetErrorName;
};

// libcuda.so.1, loaded and cuInit'ed once. UNAVAILABLE (saying why) without a driver or GPU.
absl::StatusOr<const CudaDriver*> LoadCudaDriver();

// OK for CUDA_SUCCESS, else "<what>: CUDA_ERROR_..." (RESOURCE_EXHAUSTED for launches the
// device refuses: too many threads or registers, too much shared memory, out of memory).
absl::Status CuStatus(const CudaDriver& cu, CUresult r, const std::string& what);

// NVRTC: compiles CUDA C++ to a cubin for sm_<arch> (e.g. 90) without needing a GPU.
// INVALID_ARGUMENT carries the compile log; UNAVAILABLE when libnvrtc cannot be loaded.
absl::StatusOr<std::string> NvrtcCompile(
    const std::string& source, const std::string& name,
    const std::vector<std::pair<std::string, int64_t>>& defines, int arch);
// "nvrtc 13.0", or UNAVAILABLE.
absl::StatusOr<std::string> NvrtcVersion();

// cuBLAS's row-major SGEMM C[M,N] = A[M,K] * B[K,N] on device pointers, on the legacy default
// stream of the current context (libcublas loaded on first use).
absl::Status CublasSgemm(int M, int N, int K, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C);

}  // namespace kiln::hardware
