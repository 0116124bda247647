// Fixed-size features of (workload, chip, config) for any discrete knob space, so models
// trained on one space load on another: knobs are placed in slots hashed from their names.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/space_index.h"
#include "kiln/v1/types.pb.h"

namespace kiln::agent {

inline constexpr int kSlots = 16;         // knob slots (names hashed, collisions probed)
inline constexpr int kValueFeatures = 8;  // per knob value: position, magnitude, buckets
inline constexpr int kContextFeatures = 8;
inline constexpr int kConfigFeatures = kSlots * kValueFeatures + kContextFeatures;
// A policy token: one knob value, with its slot, its features and the context.
inline constexpr int kTokenFeatures = kSlots + kValueFeatures + kContextFeatures;

class SpaceFeatures {
 public:
  SpaceFeatures(const codegen::KnobSpace& space, const v1::Workload& workload,
                const v1::ChipFingerprint& chip);

  int num_knobs() const { return static_cast<int>(offset_.size()); }
  // Tokens are every (knob, value) pair, knob by knob; offset(k) is knob k's first token.
  int num_tokens() const { return num_tokens_; }
  int offset(int k) const { return offset_[k]; }
  int size(int k) const { return size_[k]; }
  const std::array<float, kContextFeatures>& context() const { return context_; }

  // kConfigFeatures floats for a configuration.
  void ConfigRow(const Row& r, float* out) const;
  // num_tokens() x kTokenFeatures floats.
  std::vector<float> Tokens() const;

 private:
  std::vector<int> slot_;    // per knob; -1 for a knob with a single value
  std::vector<int> offset_;  // per knob, first token
  std::vector<int> size_;
  int num_tokens_ = 0;
  std::vector<std::array<float, kValueFeatures>> value_;  // per token
  std::array<float, kContextFeatures> context_{};
};

// FNV-1a of a string, for slots and hashed context features.
uint64_t Fnv(const std::string& s);

}  // namespace kiln::agent
