// The cost model: an ensemble of small MLPs predicting (standardised) log latency and the chance
// of failing from (workload, chip, config) features, trained online with a pairwise ranking loss.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace kiln::agent {

struct CostModelImpl;  // LibTorch state, agent/policy/torch_modules.h

class CostModel {
 public:
  explicit CostModel(uint64_t seed, int members = 4, int hidden = 32);
  ~CostModel();
  CostModel(const CostModel&) = delete;
  CostModel& operator=(const CostModel&) = delete;

  // `x`: n rows of kConfigFeatures; `y`: standardised log latency (lower is better), read only
  // where ok[i]; failures train the failure head. `member_mask` (n x members, or empty for
  // all) says which rows each member trains on: a bootstrap, so members disagree where data is
  // thin. Returns the last step's loss.
  double Train(const std::vector<float>& x, const std::vector<float>& y,
               const std::vector<uint8_t>& ok, const std::vector<uint8_t>& member_mask, int steps,
               std::mt19937_64& rng);
  // Mean and spread over the members of the predicted log latency, and the mean probability
  // of failing, for n rows of features. `spread` and `fail` may be null.
  void Predict(const float* x, int n, std::vector<float>* mean, std::vector<float>* spread,
               std::vector<float>* fail = nullptr) const;
  int members() const { return members_; }

  CostModelImpl& impl() { return *impl_; }

 private:
  int members_;
  std::unique_ptr<CostModelImpl> impl_;
};

}  // namespace kiln::agent
