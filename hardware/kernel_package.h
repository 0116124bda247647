// A rendered accelerator kernel on disk: dialect, entry, compile-time constants (launch
// geometry included) and a payload (OpenCL C source, a CUDA cubin, a simulator mapping).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::hardware {

struct KernelPackage {
  std::string dialect;
  std::string entry;
  std::vector<std::pair<std::string, int64_t>> defines;
  std::string payload;  // bytes, binary-safe
};

// Writes atomically (temporary file, then rename), so concurrent writers of one kernel and
// readers in sandboxed children never see half a file.
absl::Status WriteKernelPackage(const std::string& path, const KernelPackage& package);
absl::StatusOr<KernelPackage> ReadKernelPackage(const std::string& path);

// "<dir>/<stem>.<ext>" in the kernel cache (CacheDir()/kernels, created on demand).
std::string KernelCachePath(const std::string& stem, const std::string& ext);

}  // namespace kiln::hardware
