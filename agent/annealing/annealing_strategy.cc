#include "agent/annealing/annealing_strategy.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "agent/indexed_strategy.h"

namespace kiln::agent {
namespace {

// Energies are log latencies, so the temperature reads as "accept a move this many e-folds
// slower with probability 1/e" (MetropolisWalk, agent/space_index.h). It cools geometrically per
// observation and is reheated on a restart; a move to a configuration measured before costs no
// trial.
class AnnealingStrategy final : public IndexedStrategy {
 public:
  explicit AnnealingStrategy(StrategyContext c) : IndexedStrategy(c) {}

  std::string name() const override { return "annealing"; }

  void Observe(const std::vector<Observation>& results) override {
    for (const auto& o : results) {
      Ledger::Result res;
      if (!ledger_.Record(o.config, o.status == v1::OK, o.median_us, &res)) continue;
      if (!walk_.placed()) {
        if (res.ok) walk_.MoveTo(res);
        continue;
      }
      walk_.Step(res, rng_);
      walk_.Cool();
    }
  }

 private:
  // An unseen single-knob move from the current state, else a random unseen configuration as a
  // restart (the walk, stuck, is then unplaced and hot again).
  bool NextRow(Row* out) override {
    if (walk_.placed() && walk_.NextMove(ledger_, rng_, out)) return true;
    return ledger_.RandomUnseen(rng_, out);
  }

  MetropolisWalk walk_;
};

}  // namespace

std::unique_ptr<Strategy> NewAnnealingStrategy(StrategyContext context) {
  return std::make_unique<AnnealingStrategy>(std::move(context));
}

}  // namespace kiln::agent
