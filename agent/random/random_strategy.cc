#include "agent/random/random_strategy.h"

#include <algorithm>
#include <random>
#include <set>

namespace kiln::agent {
namespace {

// Spaces up to this many Cartesian points are enumerated and shuffled; larger ones are
// sampled by rejection.
constexpr uint64_t kEnumerateLimit = 1 << 16;

class RandomStrategy final : public Strategy {
 public:
  explicit RandomStrategy(StrategyContext c) : ctx_(std::move(c)), rng_(ctx_.seed) {
    if (ctx_.space.CartesianSize() <= kEnumerateLimit) {
      order_ = ctx_.space.EnumerateValid();
      std::shuffle(order_.begin(), order_.end(), rng_);
      enumerated_ = true;
    }
  }

  std::string name() const override { return "random"; }

  std::vector<codegen::Config> Propose(int n) override {
    std::vector<codegen::Config> out;
    if (enumerated_) {
      while (static_cast<int>(out.size()) < n && next_ < order_.size()) {
        codegen::Config& c = order_[next_++];
        if (seen_.insert(codegen::ConfigKey(c)).second) out.push_back(c);
      }
      return out;
    }
    const uint64_t size = ctx_.space.CartesianSize();
    std::uniform_int_distribution<uint64_t> pick(0, size - 1);
    for (int tries = 0; static_cast<int>(out.size()) < n && tries < 100000; ++tries) {
      codegen::Config c = ctx_.space.Decode(pick(rng_));
      if (!ctx_.space.IsValid(c)) continue;
      if (seen_.insert(codegen::ConfigKey(c)).second) out.push_back(std::move(c));
    }
    return out;
  }

  void Observe(const std::vector<Observation>&) override {}

  void Exclude(const codegen::Config& config) override { seen_.insert(codegen::ConfigKey(config)); }

 private:
  StrategyContext ctx_;
  std::mt19937_64 rng_;
  bool enumerated_ = false;
  std::vector<codegen::Config> order_;
  size_t next_ = 0;
  std::set<std::string> seen_;
};

}  // namespace

std::unique_ptr<Strategy> NewRandomStrategy(StrategyContext context) {
  return std::make_unique<RandomStrategy>(std::move(context));
}

}  // namespace kiln::agent
