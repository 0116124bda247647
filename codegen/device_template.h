// Kernel templates for accelerator dialects (OpenCL C, CUDA C++): a template file whose knobs,
// the workload's dims and the launch geometry become compile-time constants.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel_template.h"

namespace kiln::codegen {

using Defines = std::vector<std::pair<std::string, int64_t>>;

// Launch geometry, rendered as the defines KILN_GLOBAL_{X,Y,Z} (total work-items per dimension:
// OpenCL's global size, CUDA's grid * block) and KILN_LOCAL_{X,Y,Z} (work-group / block size).
// Global sizes are whole multiples of local ones.
struct Launch {
  int64_t global[3] = {1, 1, 1};
  int64_t local[3] = {1, 1, 1};
};
void AppendLaunchDefines(const Launch& launch, Defines* defines);
absl::StatusOr<Launch> LaunchFromDefines(const Defines& defines);

// Every workload dimension is rendered as DIM_<name> (DIM_M, DIM_KVH, ...); knobs keep their
// names. A template file documents the constants it reads.
struct DeviceTemplateSpec {
  std::string name;     // "opencl-gemm"
  std::string dialect;  // "opencl" or "cuda"
  std::string entry;    // the kernel function's name
  std::string_view source;
  v1::OpKind op;
  std::function<KnobSpace(const v1::Workload&, const ChipTraits&)> space;
  // What a user gets without tuning; also the baseline where no vendor library exists.
  std::function<Config(const v1::Workload&, const ChipTraits&)> default_config;
  std::function<Launch(const v1::Workload&, const Config&)> launch;
  // Derived constants (e.g. per-work-item array sizes); optional.
  std::function<void(const v1::Workload&, const Config&, Defines*)> derived;
};

class DeviceTemplate final : public KernelTemplate {
 public:
  explicit DeviceTemplate(DeviceTemplateSpec spec) : spec_(std::move(spec)) {}
  std::string name() const override { return spec_.name; }
  // The template's operator in fp32 without an epilogue, with valid dims.
  bool Supports(const v1::Workload& w) const override;
  KnobSpace Space(const v1::Workload& w, const ChipTraits& chip) const override {
    return spec_.space(w, chip);
  }
  absl::StatusOr<Kernel> Render(const v1::Workload& w, const Config& config,
                                const ChipTraits& chip) const override;
  Config DefaultConfig(const v1::Workload& w, const ChipTraits& chip) const {
    return spec_.default_config(w, chip);
  }

 private:
  DeviceTemplateSpec spec_;
};

// The DeviceTemplate registered for a workload on a chip kind ("opencl", "cuda").
absl::StatusOr<const DeviceTemplate*> FindDeviceTemplate(const v1::Workload& w,
                                                         const std::string& chip_kind);

// Helpers for knob spaces.
int64_t DimOf(const v1::Workload& w, const char* name);  // 1 when absent
int64_t CeilDiv(int64_t a, int64_t b);
// v <= extent, or v is the smallest domain value >= extent (larger only adds padding).
bool NotOversized(const std::vector<int64_t>& domain, int64_t v, int64_t extent);
// The smallest power of two >= x.
int64_t Pow2Ceil(int64_t x);
// Powers of two from lo to hi inclusive.
std::vector<int64_t> PowersOfTwo(int64_t lo, int64_t hi);

}  // namespace kiln::codegen
