#include "codegen/knob_space.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::codegen {

void KnobSpace::AddKnob(std::string name, std::vector<int64_t> values, std::string help,
                        std::optional<int64_t> absent_means) {
  knobs_.push_back({std::move(name), std::move(values), std::move(help), absent_means});
}

Config KnobSpace::WithAbsentKnobs(const Config& config) const {
  Config out = config;
  for (const auto& k : knobs_)
    if (k.absent_means) out.emplace(k.name, *k.absent_means);
  return out;
}

void KnobSpace::AddConstraint(std::string rule, std::function<bool(const Config&)> holds) {
  constraints_.push_back({std::move(rule), std::move(holds)});
}

const Knob* KnobSpace::FindKnob(const std::string& name) const {
  for (const auto& k : knobs_)
    if (k.name == name) return &k;
  return nullptr;
}

absl::Status KnobSpace::Check(const Config& config) const {
  for (const auto& [name, value] : config)
    if (!FindKnob(name)) return absl::InvalidArgumentError(absl::StrCat("unknown knob ", name));
  for (const auto& k : knobs_) {
    auto it = config.find(k.name);
    if (it == config.end())
      return absl::InvalidArgumentError(absl::StrCat("knob ", k.name, " has no value"));
    if (std::find(k.values.begin(), k.values.end(), it->second) == k.values.end())
      return absl::InvalidArgumentError(absl::StrCat("knob ", k.name, "=", it->second,
                                                     " is not in its domain {",
                                                     absl::StrJoin(k.values, ","), "}"));
  }
  for (const auto& c : constraints_)
    if (!c.holds(config))
      return absl::InvalidArgumentError(absl::StrCat("constraint violated: ", c.rule));
  return absl::OkStatus();
}

bool KnobSpace::SatisfiesConstraints(const Config& config) const {
  for (const auto& c : constraints_)
    if (!c.holds(config)) return false;
  return true;
}

uint64_t KnobSpace::CartesianSize() const {
  uint64_t n = 1;
  for (const auto& k : knobs_) n *= k.values.size();
  return n;
}

Config KnobSpace::Decode(uint64_t index) const {
  Config c;
  for (const auto& k : knobs_) {
    c[k.name] = k.values[index % k.values.size()];
    index /= k.values.size();
  }
  return c;
}

std::vector<Config> KnobSpace::EnumerateValid(size_t limit) const {
  std::vector<Config> out;
  const uint64_t n = CartesianSize();
  if (n == 0) return out;
  // Every decoded point holds one in-domain value per knob, so only the constraints need
  // checking; one config is rewritten in place (no allocation per point) and copied when valid.
  Config c = Decode(0);
  std::vector<int64_t*> slot;
  for (const auto& k : knobs_) slot.push_back(&c[k.name]);
  for (uint64_t i = 0; i < n && out.size() < limit; ++i) {
    uint64_t index = i;
    for (size_t j = 0; j < knobs_.size(); ++j) {
      const std::vector<int64_t>& values = knobs_[j].values;
      *slot[j] = values[index % values.size()];
      index /= values.size();
    }
    if (SatisfiesConstraints(c)) out.push_back(c);
  }
  return out;
}

absl::Status KnobSpace::Pin(const std::string& name, int64_t value) {
  for (auto& k : knobs_) {
    if (k.name != name) continue;
    if (std::find(k.values.begin(), k.values.end(), value) == k.values.end())
      return absl::InvalidArgumentError(absl::StrCat(
          "pin: ", name, "=", value, " is not in its domain {", absl::StrJoin(k.values, ","), "}"));
    k.values = {value};
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("pin: unknown knob ", name));
}

std::string ConfigKey(const Config& config) {
  return absl::StrJoin(config, ",", absl::PairFormatter("="));
}

Config FromProto(const v1::Config& config) {
  return Config(config.knobs().begin(), config.knobs().end());
}

v1::Config ToProto(const Config& config) {
  v1::Config out;
  for (const auto& [k, v] : config) (*out.mutable_knobs())[k] = v;
  return out;
}

ChipTraits TraitsFromFingerprint(const v1::ChipFingerprint& chip) {
  ChipTraits t;
  bool avx512 = false, avx2 = false;
  for (const auto& f : chip.isa_features()) {
    if (f == "avx512f") avx512 = true;
    if (f == "avx2") avx2 = true;
  }
  if (avx512) {
    t.vector_floats = 16;
    t.vector_registers = 32;
  } else if (avx2) {
    t.vector_floats = 8;
    t.vector_registers = 16;
  } else {
    t.vector_floats = 4;
    t.vector_registers = 16;
  }
  t.cores = std::max(1, chip.cores());
  if (chip.l1d_bytes() > 0) t.l1d_bytes = chip.l1d_bytes();
  if (chip.l2_bytes() > 0) t.l2_bytes = chip.l2_bytes();
  if (chip.l3_bytes() > 0) t.l3_bytes = chip.l3_bytes();
  if (chip.local_mem_bytes() > 0) t.local_mem_bytes = chip.local_mem_bytes();
  if (chip.max_work_group_size() > 0) t.max_work_group_size = chip.max_work_group_size();
  return t;
}

Config SafeDefaultConfig(const KnobSpace& space) {
  // Knob domains list their safe value first; walk the Cartesian order from there.
  std::vector<Config> valid = space.EnumerateValid(1);
  return valid.empty() ? Config{} : valid.front();
}

int64_t SaneL3Bytes(int64_t reported, int cores) {
  const int64_t cap = std::max<int64_t>(32LL << 20, (16LL << 20) * std::max(1, cores));
  return std::min(reported, cap);
}

}  // namespace kiln::codegen
