// A small RAII layer over the OpenCL C API: devices by flat index across platforms, a context
// with an in-order queue, program builds with their logs, buffers, error names.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::hardware {

struct ClDeviceInfo {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  std::string platform_name, platform_version;
  std::string name, vendor, version, driver, c_version, extensions;
  cl_device_type type = 0;
  cl_uint compute_units = 0;
  size_t max_work_group_size = 0;
  cl_ulong local_mem_bytes = 0, global_mem_bytes = 0, max_alloc_bytes = 0, cache_bytes = 0;
};

// Every OpenCL device of every platform, platforms in ICD order. An empty list (no ICD, no
// platform) is not an error.
std::vector<ClDeviceInfo> ListClDevices();

// "CL_OUT_OF_RESOURCES" etc.
std::string ClErrorName(cl_int err);
// OK for CL_SUCCESS; otherwise "<what>: <error name>" with a code that says who is at fault:
// RESOURCE_EXHAUSTED (out of resources / memory, work-group too large), INTERNAL otherwise.
absl::Status ClStatus(cl_int err, absl::string_view what);

template <typename T, cl_int (*Release)(T)>
struct ClReleaser {
  void operator()(T h) const {
    if (h) Release(h);
  }
};
using ClMem =
    std::unique_ptr<std::remove_pointer_t<cl_mem>, ClReleaser<cl_mem, clReleaseMemObject>>;
using ClProgram =
    std::unique_ptr<std::remove_pointer_t<cl_program>, ClReleaser<cl_program, clReleaseProgram>>;
using ClKernel =
    std::unique_ptr<std::remove_pointer_t<cl_kernel>, ClReleaser<cl_kernel, clReleaseKernel>>;

class ClRuntime {
 public:
  // The device at `index` of ListClDevices(), with a context and a queue. NOT_FOUND when
  // there is no such device.
  static absl::StatusOr<std::unique_ptr<ClRuntime>> Open(int index);
  ~ClRuntime();
  ClRuntime(const ClRuntime&) = delete;
  ClRuntime& operator=(const ClRuntime&) = delete;

  const ClDeviceInfo& info() const { return info_; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }

  // INVALID_ARGUMENT carrying the build log when the source does not compile.
  absl::StatusOr<ClProgram> Build(const std::string& source, const std::string& options);
  absl::StatusOr<ClKernel> Kernel(cl_program program, const std::string& entry);
  absl::StatusOr<ClMem> Alloc(size_t bytes);
  absl::Status Write(cl_mem buffer, const void* data, size_t bytes);
  absl::Status Read(cl_mem buffer, void* data, size_t bytes);
  // Enqueues an NDRange and waits for it.
  absl::Status Run(cl_kernel kernel, int dims, const size_t* global, const size_t* local);

 private:
  ClRuntime() = default;
  ClDeviceInfo info_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
};

}  // namespace kiln::hardware
