#include "agent/random/random_strategy.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace kiln::agent {
namespace {

// Random search without replacement: a shuffled order of the enumerated valid configurations,
// or rejection sampling when the space is too large to enumerate.
class RandomStrategy final : public Strategy {
 public:
  explicit RandomStrategy(StrategyContext c) : index_(IndexFor(c)), ledger_(index_), rng_(c.seed) {
    if (index_->enumerated()) {
      order_.resize(index_->rows().size());
      std::iota(order_.begin(), order_.end(), 0);
      std::shuffle(order_.begin(), order_.end(), rng_);
    }
  }

  std::string name() const override { return "random"; }

  std::vector<codegen::Config> Propose(int n) override {
    std::vector<codegen::Config> out;
    if (index_->enumerated()) {
      while (static_cast<int>(out.size()) < n && next_ < order_.size()) {
        const Row& r = index_->rows()[order_[next_++]];
        if (ledger_.Seen(r)) continue;
        ledger_.MarkSeen(r);
        out.push_back(index_->ToConfig(r));
      }
      return out;
    }
    Row r;
    for (int tries = 0; static_cast<int>(out.size()) < n && tries < 100; ++tries) {
      if (!index_->SampleUniform(rng_, &r)) break;
      if (ledger_.Seen(r)) continue;
      ledger_.MarkSeen(r);
      out.push_back(index_->ToConfig(r));
    }
    return out;
  }

  void Observe(const std::vector<Observation>&) override {}

  void Exclude(const codegen::Config& config) override {
    Row r;
    if (index_->FromConfig(config, &r)) ledger_.MarkSeen(r);
  }

 private:
  std::shared_ptr<const SpaceIndex> index_;
  Ledger ledger_;
  std::mt19937_64 rng_;
  std::vector<size_t> order_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> NewRandomStrategy(StrategyContext context) {
  return std::make_unique<RandomStrategy>(std::move(context));
}

}  // namespace kiln::agent
