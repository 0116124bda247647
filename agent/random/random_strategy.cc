#include "agent/random/random_strategy.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "agent/indexed_strategy.h"

namespace kiln::agent {
namespace {

// Random search without replacement: a shuffled order of the enumerated valid configurations,
// or rejection sampling when the space is too large to enumerate.
class RandomStrategy final : public IndexedStrategy {
 public:
  explicit RandomStrategy(StrategyContext c) : IndexedStrategy(c) {
    if (index_->enumerated()) {
      order_.resize(index_->rows().size());
      std::iota(order_.begin(), order_.end(), 0);
      std::shuffle(order_.begin(), order_.end(), rng_);
    }
  }

  std::string name() const override { return "random"; }

  void Observe(const std::vector<Observation>&) override {}

 protected:
  bool NextRow(Row* r) override {
    if (index_->enumerated()) {
      while (next_ < order_.size()) {
        *r = index_->rows()[order_[next_++]];
        if (!ledger_.Seen(*r)) return true;
      }
      return false;
    }
    for (int tries = 0; tries < 100; ++tries) {
      if (!index_->SampleUniform(rng_, r)) return false;
      if (!ledger_.Seen(*r)) return true;
    }
    return false;
  }

 private:
  std::vector<size_t> order_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> NewRandomStrategy(StrategyContext context) {
  return std::make_unique<RandomStrategy>(std::move(context));
}

}  // namespace kiln::agent
