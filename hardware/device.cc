#include "hardware/device.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "hardware/cpu/cpu_device.h"
#include "hardware/replay/replay_device.h"
#include "hardware/sim/sim_device.h"
#ifdef KILN_HAVE_OPENCL
#include "hardware/opencl/opencl_device.h"
#endif
#ifdef KILN_HAVE_CUDA
#include "hardware/cuda/cuda_device.h"
#endif

namespace kiln::hardware {
namespace {

// "opencl", "opencl:N", "cuda", "cuda:N", "sim:NAME"; nullopt for other specs.
// A backend this build lacks says so (FAILED_PRECONDITION) rather than "unknown device".
std::optional<absl::StatusOr<std::unique_ptr<Device>>> OpenAcceleratorDevice(
    const std::string& spec, const v1::ChipFingerprint* known) {
  absl::string_view rest = spec;
  int index = 0;
  auto parse_index = [&](absl::string_view kind) -> absl::Status {
    if (rest.empty()) return absl::OkStatus();
    if (!absl::ConsumePrefix(&rest, ":") || !absl::SimpleAtoi(rest, &index) || index < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("device '", spec, "': expected ", kind, " or ", kind, ":N"));
    return absl::OkStatus();
  };
  auto lacking = [&](absl::string_view what) {
    return absl::FailedPreconditionError(absl::StrCat("device '", spec, "': this build has no ",
                                                      what, " backend (see docs/backends.md)"));
  };
  (void)lacking;  // unused when every backend is built
  if (absl::ConsumePrefix(&rest, "sim:")) return NewSimDevice(std::string(rest), known);
  if (absl::ConsumePrefix(&rest, "opencl")) {
    if (auto s = parse_index("opencl"); !s.ok()) return s;
#ifdef KILN_HAVE_OPENCL
    return NewOpenClDevice(index, known);
#else
    return lacking("OpenCL");
#endif
  }
  if (absl::ConsumePrefix(&rest, "cuda")) {
    if (auto s = parse_index("cuda"); !s.ok()) return s;
#ifdef KILN_HAVE_CUDA
    return NewCudaDevice(index, known);
#else
    return lacking("CUDA");
#endif
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& spec,
                                                   const v1::ChipFingerprint* known) {
  if (spec == "cpu") return NewCpuDevice(known);
  if (spec.rfind("replay:", 0) == 0) return NewReplayDevice(spec.substr(7), known);
  if (auto accel = OpenAcceleratorDevice(spec, known)) return std::move(*accel);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device '", spec, "' (known: cpu, opencl[:N], cuda[:N], sim:NAME, replay:PATH)"));
}

}  // namespace kiln::hardware
