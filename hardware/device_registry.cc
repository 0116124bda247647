#include "hardware/device_registry.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kiln::hardware {

namespace {

// "KIND" or "KIND:N" -> N (0 for a bare KIND); nullopt when `spec` is not of KIND at all.
std::optional<absl::StatusOr<int>> ParseIndexedSpec(absl::string_view spec,
                                                    absl::string_view kind) {
  absl::string_view rest = spec;
  if (!absl::ConsumePrefix(&rest, kind)) return std::nullopt;
  if (rest.empty()) return 0;
  if (rest[0] != ':') return std::nullopt;  // another kind's name ("openclx")
  int index = 0;
  if (!absl::SimpleAtoi(rest.substr(1), &index) || index < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("device '", spec, "': expected ", kind, " or ", kind, ":N"));
  return index;
}

}  // namespace

Backend IndexedBackend(std::string kind, IndexedOpen open) {
  Backend b;
  b.name = kind;
  b.usage = kind + "[:N]";
  b.open = [kind, open = std::move(open)](const std::string& spec, const v1::ChipFingerprint* known)
      -> std::optional<absl::StatusOr<std::unique_ptr<Device>>> {
    auto index = ParseIndexedSpec(spec, kind);
    if (!index) return std::nullopt;
    if (!index->ok()) return index->status();
    return open(**index, known);
  };
  return b;
}

}  // namespace kiln::hardware
