#include "hardware/device.h"

#include "absl/strings/str_cat.h"
#include "hardware/cpu/cpu_device.h"

namespace kiln::hardware {

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& spec,
                                                   const v1::ChipFingerprint* known) {
  if (spec == "cpu") return NewCpuDevice(known);
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", spec, "' (known: cpu)"));
}

}  // namespace kiln::hardware
