#include "agent/pretrain/pretrain.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/policy/checkpoint.h"
#include "agent/policy/cost_model.h"
#include "agent/policy/features.h"
#include "agent/policy/policy_net.h"

namespace kiln::agent {
namespace {

// A set's features, standardised log latencies and fastest rows, ready for training.
struct Prepared {
  std::shared_ptr<const SpaceIndex> index;
  std::unique_ptr<SpaceFeatures> features;
  std::unique_ptr<PolicyNet> policy;
  std::vector<float> x, y;
  std::vector<uint8_t> ok;
  std::vector<Row> top;
};

absl::Status Prepare(const TrainingSet& set, const PretrainOptions& o, Prepared* p) {
  if (set.configs.size() != set.median_us.size() || set.configs.size() < 2)
    return absl::InvalidArgumentError(absl::StrCat(set.name, ": fewer than two records"));
  p->index = SpaceIndex::Build(set.space, &set.configs);
  p->features = std::make_unique<SpaceFeatures>(set.space, set.workload, set.chip);
  p->policy = std::make_unique<PolicyNet>(*p->features, p->index, o.seed);
  double mean = 0, sq = 0;
  int n_ok = 0;
  for (double t : set.median_us)
    if (t > 0) mean += std::log(t), sq += std::log(t) * std::log(t), ++n_ok;
  if (n_ok < 2) return absl::InvalidArgumentError(absl::StrCat(set.name, ": fewer than two OK"));
  mean /= n_ok;
  const double sd = std::max(1e-3, std::sqrt(std::max(0.0, sq / n_ok - mean * mean)));
  std::vector<std::pair<double, size_t>> order;
  Row r;
  for (size_t i = 0; i < set.configs.size(); ++i) {
    if (!p->index->FromConfig(set.configs[i], &r)) continue;
    p->x.resize(p->x.size() + kConfigFeatures);
    p->features->ConfigRow(r, p->x.data() + p->x.size() - kConfigFeatures);
    const bool ok = set.median_us[i] > 0;
    p->ok.push_back(ok);
    p->y.push_back(ok ? static_cast<float>((std::log(set.median_us[i]) - mean) / sd) : 0);
    if (ok) order.push_back({set.median_us[i], i});
  }
  std::sort(order.begin(), order.end());
  size_t keep = std::max<size_t>(8, order.size() * o.top_fraction);
  for (size_t i = 0; i < std::min(keep, order.size()); ++i) {
    p->index->FromConfig(set.configs[order[i].second], &r);
    p->top.push_back(r);
  }
  return absl::OkStatus();
}

// Share of sampled pairs of `rows` (OK rows of `p`) that the predictions `mean` order as measured.
double PairAccuracy(const std::vector<float>& mean, const Prepared& p, const std::vector<int>& rows,
                    std::mt19937_64& rng) {
  if (rows.size() < 2) return 0;
  std::uniform_int_distribution<size_t> u(0, rows.size() - 1);
  int agree = 0, pairs = 0;
  for (int t = 0; t < 20000 && pairs < 5000; ++t) {
    const int i = rows[u(rng)], j = rows[u(rng)];
    if (p.y[i] == p.y[j]) continue;
    ++pairs;
    agree += (p.y[i] < p.y[j]) == (mean[i] < mean[j]);
  }
  return pairs ? static_cast<double>(agree) / pairs : 0;
}

std::vector<int> OkRows(const Prepared& p) {
  std::vector<int> ok;
  for (int i = 0; i < static_cast<int>(p.y.size()); ++i)
    if (p.ok[i]) ok.push_back(i);
  return ok;
}

// Share of ordered pairs of OK rows the model ranks correctly (a sample of pairs).
double RankAccuracy(const CostModel& m, const Prepared& p, std::mt19937_64& rng) {
  std::vector<float> mean;
  m.Predict(p.x.data(), static_cast<int>(p.y.size()), &mean, nullptr);
  return PairAccuracy(mean, p, OkRows(p), rng);
}

// How a cost model ranks a set it was not trained on, as a search would feel it: rank accuracy
// over all pairs and among the fastest tenth, and where the model's 16 favourites fall in the
// set's true order (percentile of the best of them and of their median; lower is better).
std::string HeldOutReport(const CostModel& m, const Prepared& p, std::mt19937_64& rng) {
  const int n = static_cast<int>(p.y.size());
  std::vector<float> mean;
  m.Predict(p.x.data(), n, &mean, nullptr);
  const std::vector<int> ok = OkRows(p);
  std::vector<int> by_true = ok, by_model = ok;
  std::sort(by_true.begin(), by_true.end(), [&](int a, int b) { return p.y[a] < p.y[b]; });
  std::sort(by_model.begin(), by_model.end(), [&](int a, int b) { return mean[a] < mean[b]; });
  std::vector<double> percentile(n, 1.0);
  for (size_t r = 0; r < by_true.size(); ++r) percentile[by_true[r]] = 100.0 * r / by_true.size();
  auto accuracy = [&](const std::vector<int>& rows) { return PairAccuracy(mean, p, rows, rng); };
  const std::vector<int> top(by_true.begin(),
                             by_true.begin() + std::max<size_t>(2, by_true.size() / 10));
  const size_t fav = std::min<size_t>(16, by_model.size());
  std::vector<double> fav_pct;
  for (size_t i = 0; i < fav; ++i) fav_pct.push_back(percentile[by_model[i]]);
  std::sort(fav_pct.begin(), fav_pct.end());
  return absl::StrFormat(
      "rank accuracy %.3f (fastest tenth %.3f); its %zu favourites: best at the %.1fth "
      "percentile, median at the %.1fth",
      accuracy(ok), accuracy(top), fav, fav_pct.empty() ? 100.0 : fav_pct[0],
      fav_pct.empty() ? 100.0 : fav_pct[fav_pct.size() / 2]);
}

}  // namespace

absl::Status Pretrain(const std::vector<TrainingSet>& sets, const PretrainOptions& o,
                      const std::string& out_path, std::ostream* log,
                      const std::vector<TrainingSet>& held_out) {
  if (sets.empty()) return absl::InvalidArgumentError("pretrain: no training data");
  std::vector<Prepared> prepared(sets.size());
  for (size_t s = 0; s < sets.size(); ++s) {
    auto status = Prepare(sets[s], o, &prepared[s]);
    if (!status.ok()) return status;
  }
  std::vector<Prepared> evaluate(held_out.size());  // checked before the training, not after
  for (size_t s = 0; s < held_out.size(); ++s) {
    auto status = Prepare(held_out[s], o, &evaluate[s]);
    if (!status.ok()) return status;
  }
  std::mt19937_64 rng(o.seed);
  CostModel cost(o.seed);
  PolicyNet& shared = *prepared[0].policy;  // holds the shared weights between rounds
  constexpr int kChunk = 10;
  const int rounds = std::max(o.cost_steps, o.policy_steps) / kChunk;
  for (int round = 0; round < rounds; ++round) {
    for (auto& p : prepared) {
      if (round * kChunk < o.cost_steps) cost.Train(p.x, p.y, p.ok, {}, kChunk, rng);
      if (round * kChunk < o.policy_steps) {
        if (&p != &prepared[0]) CopySharedWeights(shared, *p.policy);
        p.policy->Imitate(p.top, kChunk);
        if (&p != &prepared[0]) CopySharedWeights(*p.policy, shared);
      }
    }
  }
  if (log) {
    for (size_t s = 0; s < sets.size(); ++s) {
      const Prepared& p = prepared[s];
      if (s > 0) CopySharedWeights(shared, *p.policy);
      std::vector<float> lp = p.policy->LogProb(p.top);
      double mass = 0;
      for (float v : lp) mass += std::exp(v);
      *log << absl::StrFormat(
          "pretrain: %-32s %6zu configs  cost-model rank accuracy %.3f  policy mass on the "
          "fastest %zu: %.3f\n",
          sets[s].name, p.y.size(), RankAccuracy(cost, p, rng), p.top.size(), mass);
    }
  }
  for (size_t s = 0; s < held_out.size() && log; ++s)
    *log << absl::StrFormat("pretrain: held out %-27s %6zu configs  %s\n", held_out[s].name,
                            evaluate[s].y.size(), HeldOutReport(cost, evaluate[s], rng));
  auto status = SaveCheckpoint(out_path, &shared, &cost);
  if (!status.ok()) return status;
  if (log) *log << "pretrain: wrote " << out_path << "\n";
  return absl::OkStatus();
}

}  // namespace kiln::agent
