#include "hardware/opencl/cl_runtime.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

std::string PlatformString(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetPlatformInfo(p, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string DeviceString(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

template <typename T>
T DeviceValue(cl_device_id d, cl_device_info what) {
  T v{};
  clGetDeviceInfo(d, what, sizeof(v), &v, nullptr);
  return v;
}

// PoCL keeps its compiled-kernel cache under Kiln's cache unless told otherwise, so the
// sandboxed trial children reuse what the worker compiled.
void DefaultPoclCache() {
  static const bool once = [] {
    setenv("POCL_CACHE_DIR", (CacheDir() + "/pocl").c_str(), /*overwrite=*/0);
    return true;
  }();
  (void)once;
}

}  // namespace

std::vector<ClDeviceInfo> ListClDevices() {
  DefaultPoclCache();
  std::vector<ClDeviceInfo> out;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) return out;
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> devices(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devices.data(), nullptr);
    for (cl_device_id d : devices) {
      ClDeviceInfo i;
      i.platform = p;
      i.device = d;
      i.platform_name = PlatformString(p, CL_PLATFORM_NAME);
      i.platform_version = PlatformString(p, CL_PLATFORM_VERSION);
      i.name = DeviceString(d, CL_DEVICE_NAME);
      i.vendor = DeviceString(d, CL_DEVICE_VENDOR);
      i.version = DeviceString(d, CL_DEVICE_VERSION);
      i.driver = DeviceString(d, CL_DRIVER_VERSION);
      i.c_version = DeviceString(d, CL_DEVICE_OPENCL_C_VERSION);
      i.extensions = DeviceString(d, CL_DEVICE_EXTENSIONS);
      i.type = DeviceValue<cl_device_type>(d, CL_DEVICE_TYPE);
      i.compute_units = DeviceValue<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS);
      i.max_work_group_size = DeviceValue<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE);
      i.local_mem_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE);
      i.global_mem_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE);
      i.max_alloc_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      i.cache_bytes = DeviceValue<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE);
      out.push_back(std::move(i));
    }
  }
  return out;
}

std::string ClErrorName(cl_int err) {
  switch (err) {
#define KILN_CL_ERR(e) \
  case e:              \
    return #e;
    KILN_CL_ERR(CL_SUCCESS)
    KILN_CL_ERR(CL_DEVICE_NOT_FOUND)
    KILN_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
    KILN_CL_ERR(CL_COMPILER_NOT_AVAILABLE)
    KILN_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    KILN_CL_ERR(CL_OUT_OF_RESOURCES)
    KILN_CL_ERR(CL_OUT_OF_HOST_MEMORY)
    KILN_CL_ERR(CL_BUILD_PROGRAM_FAILURE)
    KILN_CL_ERR(CL_INVALID_VALUE)
    KILN_CL_ERR(CL_INVALID_DEVICE)
    KILN_CL_ERR(CL_INVALID_CONTEXT)
    KILN_CL_ERR(CL_INVALID_COMMAND_QUEUE)
    KILN_CL_ERR(CL_INVALID_MEM_OBJECT)
    KILN_CL_ERR(CL_INVALID_BUILD_OPTIONS)
    KILN_CL_ERR(CL_INVALID_PROGRAM)
    KILN_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE)
    KILN_CL_ERR(CL_INVALID_KERNEL_NAME)
    KILN_CL_ERR(CL_INVALID_KERNEL)
    KILN_CL_ERR(CL_INVALID_ARG_INDEX)
    KILN_CL_ERR(CL_INVALID_ARG_VALUE)
    KILN_CL_ERR(CL_INVALID_ARG_SIZE)
    KILN_CL_ERR(CL_INVALID_KERNEL_ARGS)
    KILN_CL_ERR(CL_INVALID_WORK_DIMENSION)
    KILN_CL_ERR(CL_INVALID_WORK_GROUP_SIZE)
    KILN_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
    KILN_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE)
    KILN_CL_ERR(CL_INVALID_BUFFER_SIZE)
#undef KILN_CL_ERR
    default:
      return absl::StrCat("OpenCL error ", err);
  }
}

absl::Status ClStatus(cl_int err, absl::string_view what) {
  if (err == CL_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(what, ": ", ClErrorName(err));
  switch (err) {
    case CL_OUT_OF_RESOURCES:
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_HOST_MEMORY:
    case CL_INVALID_WORK_GROUP_SIZE:
    case CL_INVALID_BUFFER_SIZE:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<ClRuntime>> ClRuntime::Open(int index) {
  std::vector<ClDeviceInfo> devices = ListClDevices();
  if (index < 0 || index >= static_cast<int>(devices.size()))
    return absl::NotFoundError(absl::StrCat("no OpenCL device ", index, " (", devices.size(),
                                            " found; install an ICD such as pocl-opencl-icd)"));
  std::unique_ptr<ClRuntime> rt(new ClRuntime);
  rt->info_ = devices[index];
  cl_int err = CL_SUCCESS;
  const cl_context_properties props[] = {
      CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(rt->info_.platform), 0};
  rt->context_ = clCreateContext(props, 1, &rt->info_.device, nullptr, nullptr, &err);
  if (err != CL_SUCCESS) return ClStatus(err, "clCreateContext");
  rt->queue_ = clCreateCommandQueue(rt->context_, rt->info_.device, 0, &err);
  if (err != CL_SUCCESS) return ClStatus(err, "clCreateCommandQueue");
  return rt;
}

ClRuntime::~ClRuntime() {
  if (queue_) clReleaseCommandQueue(queue_);
  if (context_) clReleaseContext(context_);
}

absl::StatusOr<ClProgram> ClRuntime::Build(const std::string& source, const std::string& options) {
  const char* text = source.c_str();
  const size_t length = source.size();
  cl_int err = CL_SUCCESS;
  ClProgram program(clCreateProgramWithSource(context_, 1, &text, &length, &err));
  if (err != CL_SUCCESS) return ClStatus(err, "clCreateProgramWithSource");
  err = clBuildProgram(program.get(), 1, &info_.device, options.c_str(), nullptr, nullptr);
  if (err == CL_SUCCESS) return program;
  size_t n = 0;
  clGetProgramBuildInfo(program.get(), info_.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n)
    clGetProgramBuildInfo(program.get(), info_.device, CL_PROGRAM_BUILD_LOG, n, log.data(),
                          nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return absl::InvalidArgumentError(
      absl::StrCat("OpenCL build failed (", ClErrorName(err), "): ", Tail(log, 4000)));
}

absl::StatusOr<ClKernel> ClRuntime::Kernel(cl_program program, const std::string& entry) {
  cl_int err = CL_SUCCESS;
  ClKernel k(clCreateKernel(program, entry.c_str(), &err));
  if (err != CL_SUCCESS) return ClStatus(err, absl::StrCat("clCreateKernel(", entry, ")"));
  return k;
}

absl::StatusOr<ClMem> ClRuntime::Alloc(size_t bytes) {
  cl_int err = CL_SUCCESS;
  ClMem m(clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, 4), nullptr, &err));
  if (err != CL_SUCCESS) return ClStatus(err, absl::StrCat("clCreateBuffer(", bytes, " bytes)"));
  return m;
}

absl::Status ClRuntime::Write(cl_mem buffer, const void* data, size_t bytes) {
  return ClStatus(
      clEnqueueWriteBuffer(queue_, buffer, CL_TRUE, 0, bytes, data, 0, nullptr, nullptr),
      "clEnqueueWriteBuffer");
}

absl::Status ClRuntime::Read(cl_mem buffer, void* data, size_t bytes) {
  return ClStatus(clEnqueueReadBuffer(queue_, buffer, CL_TRUE, 0, bytes, data, 0, nullptr, nullptr),
                  "clEnqueueReadBuffer");
}

absl::Status ClRuntime::Run(cl_kernel kernel, int dims, const size_t* global, const size_t* local) {
  cl_int err =
      clEnqueueNDRangeKernel(queue_, kernel, dims, nullptr, global, local, 0, nullptr, nullptr);
  if (err != CL_SUCCESS) return ClStatus(err, "clEnqueueNDRangeKernel");
  return ClStatus(clFinish(queue_), "clFinish");
}

}  // namespace kiln::hardware
