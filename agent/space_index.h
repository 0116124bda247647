// Valid configurations of a knob space as rows of value indices: lookup, neighbours, sampling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/knob_space.h"

namespace kiln::agent {

using Row = std::vector<int32_t>;  // one value index per knob, in the space's knob order

class SpaceIndex {
 public:
  // Enumerates the valid configurations when the Cartesian product has at most `enumerate_limit`
  // points, or takes them from `valid` when given (a replay set's recorded configurations).
  static std::shared_ptr<const SpaceIndex> Build(const codegen::KnobSpace& space,
                                                 const std::vector<codegen::Config>* valid,
                                                 uint64_t enumerate_limit = 1 << 20);

  const codegen::KnobSpace& space() const { return space_; }
  int num_knobs() const { return static_cast<int>(sizes_.size()); }
  const std::vector<int>& sizes() const { return sizes_; }
  // True when rows() holds every valid configuration; otherwise validity is checked on demand.
  bool enumerated() const { return enumerated_; }
  const std::vector<Row>& rows() const { return rows_; }

  uint64_t Code(const Row& r) const;  // unique per row (mixed radix, or a 64-bit hash)
  int Find(const Row& r) const;       // position in rows(), or -1
  bool IsValid(const Row& r) const;
  codegen::Config ToConfig(const Row& r) const;
  // False when off the domains; a knob the config lacks is read as its absent_means, if any.
  bool FromConfig(const codegen::Config& c, Row* r) const;

  // Valid rows that differ from `r` in exactly one knob.
  std::vector<Row> Neighbours(const Row& r) const;
  // A random one-knob move from `r` (the local step of annealing and of the policy's walk): a
  // knob drawn uniformly goes to a neighbouring value (60%) or to any other value. False, with
  // the draws spent, when that knob has one value, the step leaves its range or the row is invalid.
  bool RandomMove(const Row& r, std::mt19937_64& rng, Row* out) const;
  // A valid row drawn uniformly (rejection sampling when not enumerated; in a sparse space too
  // large to enumerate, a random walk from a known valid row when rejection fails); false if
  // none is found.
  bool SampleUniform(std::mt19937_64& rng, Row* out) const;

 private:
  bool IsSparse();  // too few valid points for rejection sampling; keeps those it met (seeds_)
  void FindSeed();  // the first valid row in mixed-radix order, into seeds_
  void EnumerateAll();
  codegen::KnobSpace space_;
  std::vector<int> sizes_;
  bool enumerated_ = false;
  bool radix_fits_ = true;
  std::vector<Row> rows_;
  std::vector<Row> seeds_;  // valid rows the walks of SampleUniform start from (sparse spaces)
  std::unordered_map<uint64_t, int> by_code_;
};

// Bookkeeping every strategy shares: what was proposed, what was measured, the best so far.
class Ledger {
 public:
  explicit Ledger(std::shared_ptr<const SpaceIndex> index) : index_(std::move(index)) {}
  const SpaceIndex& index() const { return *index_; }
  bool Seen(const Row& r) const { return seen_.count(index_->Code(r)) > 0; }
  void MarkSeen(const Row& r) { seen_.insert({index_->Code(r), -1}); }
  size_t num_seen() const { return seen_.size(); }
  // Records a result; returns false when the config is not in the space. `log_us` is the log of
  // the median for OK results; failures are stored with ok=false.
  struct Result {
    Row row;
    bool ok = false;
    double log_us = 0;
  };
  bool Record(const codegen::Config& c, bool ok, double median_us, Result* out = nullptr);
  const std::vector<Result>& results() const { return results_; }
  // Result for a row measured before, or nullptr.
  const Result* Lookup(const Row& r) const;
  // A valid configuration not proposed yet, drawn uniformly; false when none is left (or none
  // is found in a space too large to enumerate).
  bool RandomUnseen(std::mt19937_64& rng, Row* out) const;
  double best_log_us() const { return best_; }
  int best_result() const { return best_at_; }

 private:
  std::shared_ptr<const SpaceIndex> index_;
  std::unordered_map<uint64_t, int> seen_;  // code -> result position, -1 when only proposed
  std::vector<Result> results_;
  double best_ = 1e300;
  int best_at_ = -1;
};

// A Metropolis walk over one-knob moves: annealing's whole search, and the policy's local walk.
// Its position is a measured row; a measured neighbour replaces it when faster, or when slower
// with probability exp(-delta / temperature) on log time; it cools by kCooling a step.
class MetropolisWalk {
 public:
  static constexpr double kHot = 0.5, kCold = 0.01, kCooling = 0.985;
  static constexpr int kMoveTries = 200;  // moves tried before the walk counts as stuck

  bool placed() const { return placed_; }
  double energy() const { return energy_; }
  void MoveTo(const Ledger::Result& res) { at_ = res.row, energy_ = res.log_us, placed_ = true; }
  // Metropolis acceptance of a measured row (failures are never accepted).
  void Step(const Ledger::Result& res, std::mt19937_64& rng) {
    if (!res.ok) return;
    const double delta = res.log_us - energy_;
    if (delta <= 0 || std::uniform_real_distribution<>(0, 1)(rng) < std::exp(-delta / temperature_))
      MoveTo(res);
  }
  void Cool() { temperature_ = std::max(kCold, temperature_ * kCooling); }
  // An unseen one-knob move from the position (measured neighbours are stepped through for
  // free); false when stuck, and the walk is then unplaced and hot again.
  bool NextMove(const Ledger& ledger, std::mt19937_64& rng, Row* out) {
    for (int t = 0; t < kMoveTries; ++t) {
      Row r;
      if (!ledger.index().RandomMove(at_, rng, &r)) continue;
      if (const Ledger::Result* known = ledger.Lookup(r)) {
        Step(*known, rng);
        continue;
      }
      if (ledger.Seen(r)) continue;  // proposed, result pending
      *out = std::move(r);
      return true;
    }
    placed_ = false;
    temperature_ = kHot;
    return false;
  }

 private:
  bool placed_ = false;
  Row at_;
  double energy_ = 0;
  double temperature_ = kHot;
};

}  // namespace kiln::agent
