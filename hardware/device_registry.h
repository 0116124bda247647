// The device backends a build has. Each backend describes itself with a Backend (which specs it
// serves and how it opens a device for one); the build lists the backends it compiled in
// (hardware/CMakeLists.txt generates hardware/backends.inc), and OpenDevice asks each in turn.
// Adding a backend: a library in its own folder, a `Backend NameBackend()` function in it, and
// one kiln_backend() line in hardware/CMakeLists.txt (docs/contributing.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "hardware/device.h"

namespace kiln::hardware {

struct Backend {
  std::string name;   // "cpu", "opencl", ...
  std::string usage;  // the specs it serves, for help and errors: "opencl[:N]"
  // The device for `spec`, or nullopt when the spec is not this backend's.
  std::function<std::optional<absl::StatusOr<std::unique_ptr<Device>>>(
      const std::string& spec, const v1::ChipFingerprint* known)>
      open;
};

// Every backend this build has, in the order OpenDevice asks them; backends the build left out
// (their dependency missing) are listed too and refuse their specs saying so.
const std::vector<Backend>& Backends();

// A backend whose specs are KIND or KIND:N (the N-th device of the kind, 0 for a bare KIND).
using IndexedOpen = std::function<absl::StatusOr<std::unique_ptr<Device>>(
    int index, const v1::ChipFingerprint* known)>;
Backend IndexedBackend(std::string kind, IndexedOpen open);

}  // namespace kiln::hardware
