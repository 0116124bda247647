#include "agent/evolution/evolution_strategy.h"

#include <algorithm>
#include <random>

#include "agent/indexed_strategy.h"

namespace kiln::agent {
namespace {

// The population is the best kPopulation measured configurations (failures rank last). Every
// proposal is one child: two tournament winners, uniform crossover, then each knob mutates
// with probability 1/knobs (to a neighbouring value more often than not). Invalid or already
// proposed children are bred again; the first kPopulation proposals are random.
constexpr int kPopulation = 24;
constexpr int kTournament = 3;
constexpr int kBreedTries = 64;

class EvolutionStrategy final : public IndexedStrategy {
 public:
  explicit EvolutionStrategy(StrategyContext c) : IndexedStrategy(c) {}

  std::string name() const override { return "evolution"; }

  void Observe(const std::vector<Observation>& results) override {
    for (const auto& o : results) {
      Ledger::Result res;
      if (!ledger_.Record(o.config, o.status == v1::OK, o.median_us, &res)) continue;
      population_.push_back(res);
      std::stable_sort(population_.begin(), population_.end(), Fitter);
      if (population_.size() > kPopulation) population_.pop_back();
    }
  }

 protected:
  bool NextRow(Row* r) override { return Breed(r) || ledger_.RandomUnseen(rng_, r); }

 private:
  static bool Fitter(const Ledger::Result& a, const Ledger::Result& b) {
    if (a.ok != b.ok) return a.ok;
    return a.ok && a.log_us < b.log_us;
  }

  const Row& Tournament() {
    std::uniform_int_distribution<size_t> pick(0, population_.size() - 1);
    size_t best = pick(rng_);
    for (int i = 1; i < kTournament; ++i) best = std::min(best, pick(rng_));  // sorted: lower wins
    return population_[best].row;
  }

  bool Breed(Row* out) {
    if (population_.size() < kPopulation) return false;
    const int knobs = index_->num_knobs();
    std::uniform_real_distribution<> u(0, 1);
    for (int t = 0; t < kBreedTries; ++t) {
      const Row& a = Tournament();
      const Row& b = Tournament();
      Row child(knobs);
      for (int k = 0; k < knobs; ++k) child[k] = u(rng_) < 0.5 ? a[k] : b[k];
      bool mutated = false;
      for (int k = 0; k < knobs; ++k) {
        int size = index_->sizes()[k];
        if (size < 2 || u(rng_) >= 1.0 / knobs) continue;
        Mutate(k, &child);
        mutated = true;
      }
      if (!mutated && ledger_.Seen(child)) {  // a clone: force one mutation
        int k = std::uniform_int_distribution<int>(0, knobs - 1)(rng_);
        if (index_->sizes()[k] > 1) Mutate(k, &child);
      }
      if (!ledger_.Seen(child) && index_->IsValid(child)) {
        *out = std::move(child);
        return true;
      }
    }
    return false;
  }

  void Mutate(int k, Row* r) {
    int size = index_->sizes()[k];
    int v = (*r)[k];
    if (std::uniform_real_distribution<>(0, 1)(rng_) < 0.6) {
      v += std::uniform_int_distribution<int>(0, 1)(rng_) ? 1 : -1;
      v = std::clamp(v, 0, size - 1);
      if (v == (*r)[k]) v = v == 0 ? 1 : size - 2;
    } else {
      int w = std::uniform_int_distribution<int>(0, size - 2)(rng_);
      v = w >= (*r)[k] ? w + 1 : w;
    }
    (*r)[k] = v;
  }

  std::vector<Ledger::Result> population_;  // best first
};

}  // namespace

std::unique_ptr<Strategy> NewEvolutionStrategy(StrategyContext context) {
  return std::make_unique<EvolutionStrategy>(std::move(context));
}

}  // namespace kiln::agent
