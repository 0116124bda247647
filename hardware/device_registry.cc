#include "hardware/device_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kiln::hardware {

std::optional<absl::StatusOr<int>> ParseIndexedSpec(absl::string_view spec,
                                                    absl::string_view kind) {
  absl::string_view rest = spec;
  if (!absl::ConsumePrefix(&rest, kind)) return std::nullopt;
  if (rest.empty()) return 0;
  int index = 0;
  if (!absl::ConsumePrefix(&rest, ":") || !absl::SimpleAtoi(rest, &index) || index < 0) {
    if (!rest.empty() && rest[0] != ':') return std::nullopt;  // another kind's name
    return absl::InvalidArgumentError(
        absl::StrCat("device '", spec, "': expected ", kind, " or ", kind, ":N"));
  }
  return index;
}

}  // namespace kiln::hardware
