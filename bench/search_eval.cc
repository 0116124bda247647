#include "bench/search_eval.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>
#include <tuple>

#include "agent/agent_metrics.h"
#include "agent/strategy.h"

namespace kiln::bench {

constexpr double kTarget = 0.95;

// CPU time of the calling thread: the agent's own cost, unaffected by other load on the machine.
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

absl::StatusOr<Space> PrepareSpace(const std::string& path) {
  auto set = hardware::LoadReplaySet(path);
  if (!set.ok()) return set.status();
  Space s;
  s.path = path;
  s.set = *set;
  std::vector<codegen::Config> configs = s.set->Configs();
  s.index = agent::SpaceIndex::Build(s.set->Space(), &configs);
  s.best_us = s.set->BestUs();
  if (!std::isfinite(s.best_us))
    return absl::InvalidArgumentError(path + ": no configuration was measured successfully");
  s.worst_us = s.best_us;
  for (const auto& e : s.set->entries)
    if (e.status == v1::OK) s.worst_us = std::max(s.worst_us, e.median_us);
  for (const auto& e : s.set->entries)
    s.sorted_us.push_back(e.status == v1::OK ? e.median_us : s.worst_us);
  std::sort(s.sorted_us.begin(), s.sorted_us.end());
  s.good = s.set->CountWithin(kTarget);
  return s;
}

namespace {

// Counts a run's prior-weight fits (RunOnce runs on one thread: no locking).
class PriorWeightCounter final : public agent::AgentMetrics {
 public:
  explicit PriorWeightCounter(Trace* trace) : trace_(trace) {}
  void Report(const std::string& name, double value) override {
    if (name != agent::kPriorWeight) return;
    ++trace_->prior_fits;
    trace_->prior_weighted += value > 0;
  }

 private:
  Trace* trace_;
};

}  // namespace

absl::StatusOr<Trace> RunOnce(const Space& space, const std::string& strategy, uint64_t seed,
                              int budget, int keep_going, const std::string& checkpoint) {
  agent::StrategyContext ctx;
  ctx.space = space.index->space();
  ctx.workload = space.set->Workload();
  ctx.chip = space.set->Chip();
  ctx.seed = seed;
  ctx.index = space.index;
  ctx.init_checkpoint = checkpoint;
  ctx.persist = false;  // a benchmark run is no task to remember, whatever $KILN_MODEL_DIR says
  Trace tr;
  ctx.metrics = std::make_shared<PriorWeightCounter>(&tr);
  double t0 = CpuSeconds();
  auto s = agent::NewStrategy(strategy, std::move(ctx));
  if (!s.ok()) return s.status();
  tr.agent_seconds = CpuSeconds() - t0;
  double best = space.worst_us;
  const double target = space.best_us / kTarget;
  for (int t = 1; t <= budget; ++t) {
    double start = CpuSeconds();
    std::vector<codegen::Config> c = (*s)->Propose(1);
    tr.agent_seconds += CpuSeconds() - start;
    if (c.empty()) break;
    const hardware::ReplayEntry* e = space.set->Find(c[0]);
    if (!e) return absl::InternalError("strategy proposed a configuration outside the set");
    agent::Observation o{c[0], e->status, e->median_us};
    start = CpuSeconds();
    (*s)->Observe({o});
    tr.agent_seconds += CpuSeconds() - start;
    if (e->status == v1::OK) best = std::min(best, e->median_us);
    tr.best_us.push_back(best);
    if (tr.trials_to_target < 0 && best <= target * (1 + 1e-12)) tr.trials_to_target = t;
    if (tr.trials_to_target > 0 && t >= keep_going) break;
  }
  return tr;
}

double RandomExpectedTrials(int n, int good) { return (n + 1.0) / (good + 1.0); }

int RandomMedianTrials(int n, int good) {
  if (good <= 0) return n + 1;
  // P(none in t draws) = C(n-good, t) / C(n, t) = prod_{i<t} (n-good-i) / (n-i), multiplied up
  // one draw at a time. Exact ties at 1/2 are common (n even, good = 1, t = n/2) and must count as
  // reached; long double keeps the rounding of ~1e5 factors near 1e-14, inside the tolerance.
  long double p_none = 1;
  for (int t = 1;; ++t) {
    p_none *= static_cast<long double>(n - good - (t - 1)) / (n - (t - 1));
    if (p_none <= 0.5L * (1 + 1e-12L)) return t;  // t = n-good+1 at the latest: p_none is 0
  }
}

double RandomExpectedBest(const Space& space, int k) {
  const int n = static_cast<int>(space.sorted_us.size());
  k = std::clamp(k, 1, n);
  // P(the best of k draws is the i-th smallest) = C(n-i, k-1) / C(n, k), i = 1..n.
  auto log_choose = [](double a, double b) {
    return std::lgamma(a + 1) - std::lgamma(b + 1) - std::lgamma(a - b + 1);
  };
  const double denom = log_choose(n, k);
  double e = 0;
  for (int i = 1; i <= n - k + 1; ++i)
    e += space.sorted_us[i - 1] * std::exp(log_choose(n - i, k - 1) - denom);
  return e;
}

namespace {

// The mean best-so-far latency at trial k over runs (a run that stopped early kept its best).
double MeanBestAt(const std::vector<Trace>& runs, int k, double worst) {
  double sum = 0;
  for (const auto& r : runs)
    sum += r.best_us.empty() ? worst : r.best_us[std::min<size_t>(k, r.best_us.size()) - 1];
  return sum / runs.size();
}

}  // namespace

Summary Summarize(const Space& space, const std::vector<Trace>& runs, int budget) {
  Summary s;
  std::vector<double> reach;
  double agent = 0, trials = 0, to_target = 0;
  for (const auto& r : runs) {
    reach.push_back(r.trials_to_target > 0 ? r.trials_to_target : INFINITY);
    // Censored at the budget, so with runs that missed it this mean is a lower bound.
    to_target += r.trials_to_target > 0 ? r.trials_to_target : budget;
    agent += r.agent_seconds;
    trials += r.best_us.size();
  }
  std::sort(reach.begin(), reach.end());
  const size_t n = reach.size();
  double med = n % 2 ? reach[n / 2] : (reach[n / 2 - 1] + reach[n / 2]) / 2;
  s.median_trials = std::isfinite(med) ? med : -1;
  s.mean_trials = n > 0 ? to_target / n : 0;
  s.reached_share =
      std::count_if(reach.begin(), reach.end(), [](double x) { return std::isfinite(x); }) /
      static_cast<double>(n);
  s.agent_ms_per_trial = trials > 0 ? 1000 * agent / trials : 0;
  for (auto [fraction, out] : {std::pair{0.10, &s.score_10}, std::pair{0.25, &s.score_25}}) {
    int k = std::max(1, static_cast<int>(std::lround(fraction * budget)));
    double random = RandomExpectedBest(space, k);
    double mine = MeanBestAt(runs, k, space.worst_us);
    *out = random > space.best_us ? (random - mine) / (random - space.best_us) : 1.0;
  }
  return s;
}

double MedianTrials(const std::vector<Trace>& runs) {
  std::vector<double> reach;
  for (const auto& r : runs)
    reach.push_back(r.trials_to_target > 0 ? r.trials_to_target : INFINITY);
  if (reach.empty()) return INFINITY;
  std::sort(reach.begin(), reach.end());
  const size_t n = reach.size();
  return n % 2 ? reach[n / 2] : (reach[n / 2 - 1] + reach[n / 2]) / 2;
}

double MedianRatio(int random_median, double median_trials, int budget) {
  return random_median /
         (std::isfinite(median_trials) && median_trials > 0 ? median_trials : budget);
}

std::vector<double> BootstrapMedians(const std::vector<Trace>& runs, int resamples, uint64_t seed) {
  std::vector<double> out;
  if (runs.empty()) return out;
  // Indices from the raw 64-bit stream by multiply-shift, not std::uniform_int_distribution,
  // whose algorithm differs between standard libraries: the interval is the same everywhere.
  std::mt19937_64 rng(seed);
  std::vector<Trace> draw(runs.size());
  for (int b = 0; b < resamples; ++b) {
    for (auto& d : draw)
      d.trials_to_target =
          runs[static_cast<size_t>((static_cast<unsigned __int128>(rng()) * runs.size()) >> 64)]
              .trials_to_target;
    out.push_back(MedianTrials(draw));
  }
  return out;
}

Interval PercentileInterval(std::vector<double> values, double level) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const double tail = (1 - level) / 2 * values.size();
  const size_t lo = std::min(values.size() - 1, static_cast<size_t>(std::floor(tail)));
  const size_t hi = std::max<double>(lo, std::ceil(values.size() - tail) - 1);
  return {values[lo], values[std::min(hi, values.size() - 1)]};
}

const char* HoldoutLabel(Holdout h) {
  switch (h) {
    case Holdout::kNoLearnedState:
      return "no learned state";
    case Holdout::kGivenCheckpoint:
      return "given-checkpoint";
    case Holdout::kLeaveOneOut:
      return "loo-checkpoint";
    case Holdout::kNoPrior:
      return "no-prior";
  }
  return "";
}

std::pair<std::string, std::string> SplitCheckpointPath(const std::string& strategy) {
  const size_t colon = strategy.find(':');
  if (colon == std::string::npos || strategy.find('/', colon) == std::string::npos)
    return {strategy, ""};
  return {strategy.substr(0, colon), strategy.substr(colon + 1)};
}

std::vector<Row> PlanRows(const std::vector<std::string>& strategies, bool holdout, bool transfer) {
  std::vector<Row> rows;
  for (const auto& s : strategies) {
    Row row;
    row.strategy = s;
    std::tie(row.name, row.checkpoint) = SplitCheckpointPath(s);
    // "default" learns across spaces only if the default strategy itself names a checkpoint.
    const std::string resolved =
        row.name.empty() || row.name == "default" ? agent::kDefaultStrategy : row.name;
    const size_t colon = resolved.find(':');
    const std::string learner = resolved.substr(0, colon);
    const bool learned = !row.checkpoint.empty() || colon != std::string::npos;
    row.holdout = learned ? Holdout::kGivenCheckpoint : Holdout::kNoLearnedState;
    rows.push_back(row);
    // Only the policy loads a checkpoint (agent::CheckStrategyName refuses one for the others).
    const bool compare = transfer && learner == "policy";
    row.name = learner;  // the same learner, with no checkpoint or one given per space
    row.checkpoint.clear();
    if (compare && learned) {
      row.holdout = Holdout::kNoPrior;
      rows.push_back(row);
    }
    if ((learned && holdout) || compare) {
      row.holdout = Holdout::kLeaveOneOut;
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<agent::TrainingSet> LeaveOneOutSets(const std::vector<Space>& spaces, size_t held_out) {
  std::vector<agent::TrainingSet> sets;
  const Space& out = spaces.at(held_out);
  for (const auto& s : spaces)
    if (s.path != out.path && s.set->name != out.set->name)
      sets.push_back(agent::TrainingSetOf(*s.set));
  return sets;
}

std::vector<TransferRows> PlanTransfers(const std::vector<Row>& rows) {
  std::vector<TransferRows> out;
  // PlanRows puts a strategy's rows together, the as-given one first.
  for (size_t k = 0; k < rows.size();) {
    size_t end = k + 1;
    while (end < rows.size() && rows[end].holdout != Holdout::kNoLearnedState &&
           rows[end].holdout != Holdout::kGivenCheckpoint)
      ++end;
    TransferRows t;
    t.strategy = rows[k].strategy;
    bool no_prior = false, loo = false;
    for (size_t i = k; i < end; ++i) {
      switch (rows[i].holdout) {
        case Holdout::kNoLearnedState:
        case Holdout::kNoPrior:
          t.no_prior = i, no_prior = true;
          break;
        case Holdout::kGivenCheckpoint:
          t.given = static_cast<int>(i);
          break;
        case Holdout::kLeaveOneOut:
          t.loo = i, loo = true;
          break;
      }
    }
    if (no_prior && loo) out.push_back(t);
    k = end;
  }
  return out;
}

const char* TransferVerdict(const Interval& ratio_ci) {
  if (ratio_ci.lo > 1) return "helped";
  if (ratio_ci.hi < 1) return "hurt";
  return "no difference within noise";
}

TransferComparison CompareTransfer(const std::vector<Trace>& no_prior,
                                   const std::vector<Trace>& with_prior, int budget, int resamples,
                                   uint64_t seed) {
  // An unreached median counts as the budget, as MedianRatio takes it.
  auto trials = [budget](double median) {
    return std::isfinite(median) && median > 0 ? median : static_cast<double>(budget);
  };
  TransferComparison c;
  c.no_prior_median = MedianTrials(no_prior);
  c.prior_median = MedianTrials(with_prior);
  c.ratio = trials(c.no_prior_median) / trials(c.prior_median);
  // One bootstrap seed for both: the same draws of seeds (BootstrapMedians), so pairs stay pairs.
  const std::vector<double> a = BootstrapMedians(no_prior, resamples, seed);
  const std::vector<double> b = BootstrapMedians(with_prior, resamples, seed);
  std::vector<double> ratios;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    ratios.push_back(trials(a[i]) / trials(b[i]));
  c.ci = PercentileInterval(ratios);
  c.verdict = TransferVerdict(c.ci);
  return c;
}

}  // namespace kiln::bench
