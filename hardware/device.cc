#include "hardware/device.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "hardware/device_registry.h"

namespace kiln::hardware {

// Each backend's descriptor, defined in its own folder; the list is the build's (backends.inc).
#define KILN_BACKEND(Name) Backend Name##Backend();
#define KILN_ABSENT_BACKEND(kind, what)
#include "hardware/backends.inc"
#undef KILN_BACKEND
#undef KILN_ABSENT_BACKEND

namespace {

// A backend this build lacks: its specs are refused with the reason, not "unknown device".
// Unused in a build that has every backend.
[[maybe_unused]] Backend Absent(std::string kind, std::string what) {
  return IndexedBackend(
      kind,
      [kind, what](int, const v1::ChipFingerprint*) -> absl::StatusOr<std::unique_ptr<Device>> {
        return absl::FailedPreconditionError(absl::StrCat("device '", kind, "': this build has no ",
                                                          what, " backend (see docs/backends.md)"));
      });
}

}  // namespace

const std::vector<Backend>& Backends() {
  static const std::vector<Backend>* all = new std::vector<Backend>{
#define KILN_BACKEND(Name) Name##Backend(),
#define KILN_ABSENT_BACKEND(kind, what) Absent(kind, what),
#include "hardware/backends.inc"
#undef KILN_BACKEND
#undef KILN_ABSENT_BACKEND
  };
  return *all;
}

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& spec,
                                                   const v1::ChipFingerprint* known) {
  std::vector<std::string> usage;
  for (const Backend& b : Backends()) {
    if (auto device = b.open(spec, known)) return std::move(*device);
    usage.push_back(b.usage);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", spec, "' (known: ", absl::StrJoin(usage, ", "), ")"));
}

}  // namespace kiln::hardware
