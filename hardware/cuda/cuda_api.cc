#include "hardware/cuda/cuda_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace kiln::hardware {
namespace {

template <typename F>
bool Bind(void* lib, F* fn, std::initializer_list<const char*> symbols) {
  for (const char* s : symbols)
    if (void* p = dlsym(lib, s)) {
      *fn = reinterpret_cast<F>(p);
      return true;
    }
  return false;
}

absl::StatusOr<const CudaDriver*> Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return absl::UnavailableError(absl::StrCat("no NVIDIA driver: ", dlerror()));
  static CudaDriver cu;
  bool ok = true;
#define KILN_BIND(member, ...) ok = Bind(lib, &cu.member, {__VA_ARGS__}) && ok
  KILN_BIND(Init, "cuInit");
  KILN_BIND(DriverGetVersion, "cuDriverGetVersion");
  KILN_BIND(DeviceGetCount, "cuDeviceGetCount");
  KILN_BIND(DeviceGet, "cuDeviceGet");
  KILN_BIND(DeviceGetName, "cuDeviceGetName");
  KILN_BIND(DeviceGetAttribute, "cuDeviceGetAttribute");
  KILN_BIND(DeviceTotalMem, "cuDeviceTotalMem_v2");
  KILN_BIND(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  KILN_BIND(CtxSetCurrent, "cuCtxSetCurrent");
  KILN_BIND(CtxSynchronize, "cuCtxSynchronize");
  KILN_BIND(ModuleLoadData, "cuModuleLoadData");
  KILN_BIND(ModuleUnload, "cuModuleUnload");
  KILN_BIND(ModuleGetFunction, "cuModuleGetFunction");
  KILN_BIND(FuncGetAttribute, "cuFuncGetAttribute");
  KILN_BIND(LaunchKernel, "cuLaunchKernel");
  KILN_BIND(MemAlloc, "cuMemAlloc_v2");
  KILN_BIND(MemFree, "cuMemFree_v2");
  KILN_BIND(MemcpyHtoD, "cuMemcpyHtoD_v2");
  KILN_BIND(MemcpyDtoH, "cuMemcpyDtoH_v2");
  KILN_BIND(EventCreate, "cuEventCreate");
  KILN_BIND(EventDestroy, "cuEventDestroy_v2");
  KILN_BIND(EventRecord, "cuEventRecord");
  KILN_BIND(EventSynchronize, "cuEventSynchronize");
  KILN_BIND(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  KILN_BIND(GetErrorName, "cuGetErrorName");
#undef KILN_BIND
  if (!ok) return absl::UnavailableError("libcuda.so.1 lacks driver API entry points Kiln needs");
  CUresult r = cu.Init(0);
  if (r != CUDA_SUCCESS) return CuStatus(cu, r, "cuInit");
  int count = 0;
  if (cu.DeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    return absl::UnavailableError("the NVIDIA driver sees no GPU");
  return &cu;
}

}  // namespace

absl::StatusOr<const CudaDriver*> LoadCudaDriver() {
  static const absl::StatusOr<const CudaDriver*>* loaded =
      new absl::StatusOr<const CudaDriver*>(Load());
  return *loaded;
}

absl::Status CuStatus(const CudaDriver& cu, CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  const std::string msg =
      absl::StrCat(what, ": ", name ? name : "CUDA error ", name ? "" : std::to_string(r));
  switch (r) {
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_INVALID_VALUE:
      return absl::ResourceExhaustedError(msg);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_DEVICE:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace kiln::hardware
