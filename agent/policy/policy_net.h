// The policy network: a distribution over configurations conditioned on workload and chip
// features, factorised knob by knob, masked to the valid configurations; trained with PPO.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "agent/policy/features.h"
#include "agent/space_index.h"

namespace kiln::agent {

struct PolicyNetImpl;  // LibTorch state, agent/policy/torch_modules.h

struct PpoSample {
  Row row;
  float old_logp = 0;  // log-probability when it was proposed
  float reward = 0;    // normalised log speedup
};

struct PpoStats {
  double loss = 0, entropy = 0, value_loss = 0, mean_reward = 0;
};

class PolicyNet {
 public:
  // With an enumerated index the distribution is normalised over the valid configurations
  // (exactly up to kMaskedRows of them, else over a fixed uniform sample of kMaskedRows);
  // otherwise sampling rejects invalid ones and log-probabilities are the factorised product.
  PolicyNet(const SpaceFeatures& features, std::shared_ptr<const SpaceIndex> index, uint64_t seed);
  ~PolicyNet();
  PolicyNet(const PolicyNet&) = delete;
  PolicyNet& operator=(const PolicyNet&) = delete;

  static constexpr size_t kMaskedRows = 4096;

  // Unnormalised per-token logits (knob by knob, SpaceFeatures order).
  std::vector<float> Logits() const;
  std::vector<float> LogProb(const std::vector<Row>& rows) const;
  // log of the masked distribution's normaliser over the valid configurations (0 when the
  // distribution is the factorised product).
  double LogNormalizer() const;
  // Clipped-ratio PPO with a value baseline and an entropy bonus, `epochs` passes over `batch`.
  PpoStats Update(const std::vector<PpoSample>& batch, int epochs);
  // The PPO loss of `batch` under the current parameters, without updating (for tests).
  double Loss(const std::vector<PpoSample>& batch) const;
  // Behaviour cloning (pre-training): raises the log-probability of `rows`. Returns the loss.
  double Imitate(const std::vector<Row>& rows, int steps);

  PolicyNetImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<PolicyNetImpl> impl_;
};

}  // namespace kiln::agent
