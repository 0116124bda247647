#include "agent/policy/features.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codegen/op_table.h"

namespace kiln::agent {
namespace {

float Magnitude(double v) {
  return static_cast<float>(std::copysign(std::log2(1 + std::abs(v)), v) / 8);
}

// A hash spread into [-1, 1].
float Spread(uint64_t h, int part) {
  return static_cast<float>(((h >> (16 * part)) & 0xffff) / 32767.5 - 1.0);
}

}  // namespace

uint64_t Fnv(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

SpaceFeatures::SpaceFeatures(const codegen::KnobSpace& space, const v1::Workload& workload,
                             const v1::ChipFingerprint& chip) {
  // Slots: knobs with more than one value, by name hash, probing past taken slots (in knob
  // name order, so the same knobs land in the same slots in every space that has them).
  const auto& knobs = space.knobs();
  std::vector<size_t> by_name(knobs.size());
  for (size_t i = 0; i < knobs.size(); ++i) by_name[i] = i;
  std::sort(by_name.begin(), by_name.end(),
            [&](size_t a, size_t b) { return knobs[a].name < knobs[b].name; });
  slot_.assign(knobs.size(), -1);
  std::vector<bool> taken(kSlots, false);
  int used = 0;
  for (size_t i : by_name) {
    if (knobs[i].values.size() < 2) continue;
    int s = static_cast<int>(Fnv(knobs[i].name) % kSlots);
    if (used < kSlots)
      while (taken[s]) s = (s + 1) % kSlots;
    taken[s] = true;
    ++used;
    slot_[i] = s;
  }
  for (size_t k = 0; k < knobs.size(); ++k) {
    const auto& vals = knobs[k].values;
    offset_.push_back(num_tokens_);
    size_.push_back(static_cast<int>(vals.size()));
    num_tokens_ += vals.size();
    const int d = static_cast<int>(vals.size());
    for (int i = 0; i < d; ++i) {
      std::array<float, kValueFeatures> f{};
      f[0] = d > 1 ? 2.0f * i / (d - 1) - 1 : 0;
      f[1] = Magnitude(vals[i]);
      f[2] = vals[i] > 0 && (vals[i] & (vals[i] - 1)) == 0;
      f[3] = vals[i] == 0;
      f[4 + std::min(3, i * 4 / std::max(1, d))] = 1;
      value_.push_back(f);
    }
  }
  double dims = 0;
  for (const auto& [name, v] : workload.dims()) dims += std::log2(1.0 + std::max<int64_t>(0, v));
  std::string names;
  for (const auto& k : knobs) names += k.name + ",";
  uint64_t kernel = Fnv(names), device = Fnv(chip.model() + "|" + chip.chip_type());
  // The operator as a fraction of the table's size: in [0, 1] however many operators there are
  // (adding one shifts this feature for checkpoints trained before it).
  static const float operators = static_cast<float>(codegen::Operators().size());
  context_ = {static_cast<float>(workload.op()) / operators,
              static_cast<float>(dims / 40),
              static_cast<float>(std::log2(1 + chip.peak_gflops()) / 20),
              static_cast<float>(std::log2(1 + chip.read_gbytes_per_s()) / 15),
              Spread(kernel, 0),
              Spread(kernel, 1),
              Spread(device, 0),
              Spread(device, 1)};
}

void SpaceFeatures::ConfigRow(const Row& r, float* out) const {
  std::fill(out, out + kConfigFeatures, 0.0f);
  for (size_t k = 0; k < slot_.size(); ++k) {
    if (slot_[k] < 0) continue;
    const auto& f = value_[offset_[k] + r[k]];
    float* dst = out + slot_[k] * kValueFeatures;
    for (int j = 0; j < kValueFeatures; ++j) dst[j] += f[j];
  }
  std::copy(context_.begin(), context_.end(), out + kSlots * kValueFeatures);
}

std::vector<float> SpaceFeatures::Tokens() const {
  std::vector<float> out(static_cast<size_t>(num_tokens_) * kTokenFeatures, 0.0f);
  for (size_t k = 0; k < slot_.size(); ++k) {
    for (int i = 0; i < size_[k]; ++i) {
      float* dst = out.data() + static_cast<size_t>(offset_[k] + i) * kTokenFeatures;
      if (slot_[k] >= 0) dst[slot_[k]] = 1;
      const auto& f = value_[offset_[k] + i];
      std::copy(f.begin(), f.end(), dst + kSlots);
      std::copy(context_.begin(), context_.end(), dst + kSlots + kValueFeatures);
    }
  }
  return out;
}

}  // namespace kiln::agent
