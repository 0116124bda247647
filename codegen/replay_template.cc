#include "codegen/replay_template.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kiln::codegen {
namespace {

class ReplayTemplate final : public KernelTemplate {
 public:
  std::string name() const override { return "replay"; }
  bool Supports(const v1::Workload&) const override { return true; }
  // The space lives in the fingerprint (ReplaySpaceFromFingerprint); traits cannot carry it.
  KnobSpace Space(const v1::Workload&, const ChipTraits&) const override { return {}; }
  absl::StatusOr<Kernel> Render(const v1::Workload&, const Config& config,
                                const ChipTraits&) const override {
    Kernel k;
    k.dialect = "replay";
    k.entry = "replay";
    k.source = ConfigKey(config);
    for (const auto& [name, value] : config) k.defines.emplace_back(name, value);
    return k;
  }
};

}  // namespace

std::unique_ptr<KernelTemplate> NewReplayTemplate() { return std::make_unique<ReplayTemplate>(); }

absl::StatusOr<KnobSpace> ReplaySpaceFromFingerprint(const v1::ChipFingerprint& chip) {
  if (chip.replay_knobs().empty())
    return absl::InvalidArgumentError("replay fingerprint carries no knob space");
  KnobSpace space;
  uint64_t cartesian = 1;
  std::vector<std::pair<std::string, std::vector<int64_t>>> domains;
  for (const auto& k : chip.replay_knobs()) {
    if (k.values().empty())
      return absl::InvalidArgumentError(absl::StrCat("replay knob ", k.name(), " has no values"));
    std::vector<int64_t> values(k.values().begin(), k.values().end());
    space.AddKnob(k.name(), values, "recorded values");
    domains.emplace_back(k.name(), std::move(values));
    cartesian *= domains.back().second.size();
  }
  const std::string& bits = chip.replay_present();
  if (bits.empty()) return space;
  if (bits.size() * 8 < cartesian)
    return absl::InvalidArgumentError("replay fingerprint: bitmap shorter than the space");
  space.AddConstraint("recorded in the replay data set", [domains, bits](const Config& c) {
    uint64_t index = 0, stride = 1;
    for (const auto& [name, values] : domains) {
      auto it = c.find(name);
      if (it == c.end()) return false;
      auto pos = std::find(values.begin(), values.end(), it->second);
      if (pos == values.end()) return false;
      index += stride * (pos - values.begin());
      stride *= values.size();
    }
    return ((static_cast<unsigned char>(bits[index / 8]) >> (index % 8)) & 1) != 0;
  });
  return space;
}

}  // namespace kiln::codegen
