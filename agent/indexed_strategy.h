// A strategy over a SpaceIndex with a Ledger: proposing takes unseen valid rows one at a time
// from NextRow(), and Exclude marks a config as proposed. The classic strategies share it.
#pragma once

#include <random>
#include <vector>

#include "agent/space_index.h"
#include "agent/strategy.h"

namespace kiln::agent {

class IndexedStrategy : public Strategy {
 public:
  explicit IndexedStrategy(const StrategyContext& c)
      : index_(IndexFor(c)), ledger_(index_), rng_(c.seed) {}

  std::vector<codegen::Config> Propose(int n) override {
    std::vector<codegen::Config> out;
    while (static_cast<int>(out.size()) < n) {
      Row r;
      if (!NextRow(&r)) break;
      ledger_.MarkSeen(r);
      out.push_back(index_->ToConfig(r));
    }
    return out;
  }

  void Exclude(const codegen::Config& config) override {
    Row r;
    if (index_->FromConfig(config, &r)) ledger_.MarkSeen(r);
  }

 protected:
  // The next valid row not proposed before; false when the strategy has none left.
  virtual bool NextRow(Row* r) = 0;

  std::shared_ptr<const SpaceIndex> index_;
  Ledger ledger_;
  std::mt19937_64 rng_;
};

}  // namespace kiln::agent
