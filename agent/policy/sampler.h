// Drawing configurations from the policy's knob-wise logits, with the validity mask applied.
#pragma once

#include <random>
#include <vector>

#include "agent/policy/features.h"
#include "agent/space_index.h"

namespace kiln::agent {

class Sampler {
 public:
  Sampler(const SpaceFeatures& features, const SpaceIndex& index)
      : features_(features), index_(index) {}

  // Takes the policy's current per-token logits and, for an enumerated space, the log of the
  // normaliser over the valid configurations (PolicyNet::LogNormalizer).
  void SetLogits(std::vector<float> logits, double log_z);
  // log-probability of a row under the current logits (masked when enumerated).
  float LogProb(const Row& r) const;
  // Up to m distinct valid rows not yet seen: Gumbel-top-m over the enumerated rows (sampling
  // without replacement from the masked distribution), else knob-by-knob sampling with
  // rejection of invalid rows.
  std::vector<Row> Draw(int m, const Ledger& ledger, std::mt19937_64& rng) const;

 private:
  float Score(const Row& r) const;
  const SpaceFeatures& features_;
  const SpaceIndex& index_;
  std::vector<float> logits_;
  std::vector<std::vector<float>> knob_log_softmax_;
  float log_z_ = 0;
};

// The unseen row, among `tries` uniform draws, furthest (Hamming distance) from `chosen`:
// a greedy space-filling design for the first trials.
bool SpaceFilling(const Ledger& ledger, const std::vector<Row>& chosen, int tries,
                  std::mt19937_64& rng, Row* out);

}  // namespace kiln::agent
