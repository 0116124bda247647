#include "agent/annealing/annealing_strategy.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "agent/indexed_strategy.h"

namespace kiln::agent {
namespace {

// Energies are log latencies, so the temperature reads as "accept a move this many e-folds
// slower with probability 1/e". It cools geometrically per observation and is reheated on a
// restart; a move to a configuration measured before costs no trial.
constexpr double kStartTemperature = 0.5;
constexpr double kFinalTemperature = 0.01;
constexpr double kCooling = 0.985;
constexpr int kMoveTries = 200;

class AnnealingStrategy final : public IndexedStrategy {
 public:
  explicit AnnealingStrategy(StrategyContext c) : IndexedStrategy(c) {}

  std::string name() const override { return "annealing"; }

  void Observe(const std::vector<Observation>& results) override {
    for (const auto& o : results) {
      Ledger::Result res;
      if (!ledger_.Record(o.config, o.status == v1::OK, o.median_us, &res)) continue;
      if (!has_current_) {
        if (res.ok) SetCurrent(res);
        continue;
      }
      Step(res);
      temperature_ = std::max(kFinalTemperature, temperature_ * kCooling);
    }
  }

 private:
  void SetCurrent(const Ledger::Result& res) {
    current_ = res.row;
    energy_ = res.log_us;
    has_current_ = true;
  }

  // Metropolis acceptance of a measured neighbour.
  void Step(const Ledger::Result& res) {
    if (!res.ok) return;
    double delta = res.log_us - energy_;
    if (delta <= 0 ||
        std::uniform_real_distribution<>(0, 1)(rng_) < std::exp(-delta / temperature_))
      SetCurrent(res);
  }

  // An unseen single-knob move from the current state (known neighbours are stepped through
  // for free), else a random unseen configuration as a restart.
  bool NextRow(Row* out) override {
    if (has_current_) {
      for (int t = 0; t < kMoveTries; ++t) {
        Row r;
        if (!index_->RandomMove(current_, rng_, &r)) continue;
        if (const Ledger::Result* known = ledger_.Lookup(r)) {
          Step(*known);
          continue;
        }
        if (ledger_.Seen(r)) continue;  // proposed, result pending
        *out = std::move(r);
        return true;
      }
      temperature_ = kStartTemperature;  // stuck: restart hot from a random point
      has_current_ = false;
    }
    return ledger_.RandomUnseen(rng_, out);
  }

  bool has_current_ = false;
  Row current_;
  double energy_ = 0;
  double temperature_ = kStartTemperature;
};

}  // namespace

std::unique_ptr<Strategy> NewAnnealingStrategy(StrategyContext context) {
  return std::make_unique<AnnealingStrategy>(std::move(context));
}

}  // namespace kiln::agent
