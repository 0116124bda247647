// The search benchmark's arithmetic: random search's exact median and mean, run summaries.
#include "bench/search_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <vector>

#include "agent/strategy.h"
#include "gtest/gtest.h"

namespace kiln::bench {
namespace {

// Four configurations of one knob: times 1, 1.02 (within 95%), 2, and a failure.
std::string WriteSet(const std::string& stem = "tiny") {
  std::string path = ::testing::TempDir() + "/" + stem + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"tune_params_keys": ["X"], "tune_params": {"X": [1, 2, 3, 4]},
    "cache": {"1": {"X": 1, "time": 1.0}, "2": {"X": 2, "time": 1.02},
              "3": {"X": 3, "time": 2.0}, "4": {"X": 4, "time": "RuntimeFailedConfig"}}})";
  return path;
}

TEST(SearchEval, RandomExpectations) {
  EXPECT_DOUBLE_EQ(RandomExpectedTrials(4, 2), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(RandomExpectedTrials(100, 0), 101.0);
  std::string path = WriteSet();
  auto space = PrepareSpace(path);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->good, 2);
  // Best of k draws without replacement, failures counting as the slowest OK time (2 ms):
  // k=1: mean of {1, 1.02, 2, 2}; k=4: always 1.
  EXPECT_NEAR(RandomExpectedBest(*space, 1), (1000 + 1020 + 2000 + 2000) / 4.0, 1e-6);
  EXPECT_NEAR(RandomExpectedBest(*space, 4), 1000, 1e-6);
  // k=2: P(best is 1) = 3/6, P(1.02) = 2/6, P(2) = 1/6.
  EXPECT_NEAR(RandomExpectedBest(*space, 2), (3 * 1000 + 2 * 1020 + 2000) / 6.0, 1e-6);
  std::remove(path.c_str());
}

// Every distinct placement of `good` good configurations among `n` is equally likely under a
// uniformly random order, so counting placements by the position of their first good one gives
// random search's distribution exactly, in integers. Returns {median, mean numerator, count}.
struct BruteForce {
  int median = 0;
  int64_t position_sum = 0, placements = 0;
};
BruteForce Enumerate(int n, int good) {
  std::vector<int> order(n, 0);
  std::fill(order.end() - good, order.end(), 1);  // the smallest placement: good ones last
  std::vector<int64_t> first_at(n + 1, 0);
  BruteForce b;
  do {
    int first = std::find(order.begin(), order.end(), 1) - order.begin() + 1;
    ++first_at[first];
    b.position_sum += first;
    ++b.placements;
  } while (std::next_permutation(order.begin(), order.end()));
  int64_t within = 0;
  for (int t = 1; t <= n; ++t) {
    within += first_at[t];
    if (2 * within >= b.placements) {
      b.median = t;
      break;
    }
  }
  return b;
}

TEST(SearchEval, RandomMedianAndMeanMatchEnumeration) {
  for (int n = 1; n <= 16; ++n)
    for (int good = 1; good <= n; ++good) {
      BruteForce b = Enumerate(n, good);
      EXPECT_EQ(RandomMedianTrials(n, good), b.median) << "n=" << n << " good=" << good;
      EXPECT_DOUBLE_EQ(RandomExpectedTrials(n, good),
                       static_cast<double>(b.position_sum) / b.placements)
          << "n=" << n << " good=" << good;
    }
}

TEST(SearchEval, RandomMedianSmallCases) {
  // n=10, g=1: P(found within 5) = 5/10 exactly, a tie that counts; the mean is 11/2.
  EXPECT_EQ(RandomMedianTrials(10, 1), 5);
  EXPECT_DOUBLE_EQ(RandomExpectedTrials(10, 1), 5.5);
  // n=10, g=3: P(none in 1) = 7/10, P(none in 2) = C(8,3)/C(10,3) = 56/120 < 1/2; mean 11/4.
  EXPECT_EQ(RandomMedianTrials(10, 3), 2);
  EXPECT_DOUBLE_EQ(RandomExpectedTrials(10, 3), 2.75);
  EXPECT_EQ(RandomMedianTrials(10, 10), 1);
  EXPECT_DOUBLE_EQ(RandomExpectedTrials(10, 10), 1.0);
  EXPECT_EQ(RandomMedianTrials(1, 1), 1);
  // Nothing good: never found, n+1 like the mean.
  EXPECT_EQ(RandomMedianTrials(10, 0), 11);
}

TEST(SearchEval, RandomMedianLargeSpaces) {
  // One good among n: P(none in t) = (n-t)/n, so the median is ceil(n/2), a tie for even n.
  EXPECT_EQ(RandomMedianTrials(100000, 1), 50000);
  EXPECT_EQ(RandomMedianTrials(100001, 1), 50001);
  EXPECT_EQ(RandomMedianTrials(5000, 2500), 1);  // P(none in 1) = 1/2 exactly
  // Against the other form of P(none in t), C(n-t, g) / C(n, g), a product of g factors: the
  // median is where it first reaches 1/2.
  for (auto [n, good] : {std::pair{17956, 12}, std::pair{17956, 150}, std::pair{100000, 7}}) {
    auto p_none = [n = n, good = good](int t) {
      double p = 1;
      for (int i = 0; i < good; ++i) p *= static_cast<double>(n - t - i) / (n - i);
      return p;
    };
    int t = RandomMedianTrials(n, good);
    EXPECT_LE(p_none(t), 0.5) << "n=" << n << " good=" << good;
    EXPECT_GT(p_none(t - 1), 0.5) << "n=" << n << " good=" << good;
  }
  // With many good configurations, a small share q of many more, the median tends to ln 2 / q
  // draws against a mean of about 1/q: random's own median is ~0.69 of its mean, which is why
  // the agent's median is compared with random's median.
  EXPECT_NEAR(RandomMedianTrials(100000, 1000) / RandomExpectedTrials(100000, 1000), std::log(2.0),
              0.01);
}

TEST(SearchEval, RunsAndSummaries) {
  std::string path = WriteSet();
  auto space = PrepareSpace(path);
  ASSERT_TRUE(space.ok());
  std::vector<Trace> runs;
  for (uint64_t seed = 1; seed <= 9; ++seed) {
    auto t = RunOnce(*space, "random", seed, 10, 10);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->best_us.size(), 4u);  // the space ran out
    EXPECT_GE(t->trials_to_target, 1);
    EXPECT_EQ(t->best_us.back(), 1000);
    runs.push_back(*t);
  }
  Summary s = Summarize(*space, runs, 10);
  EXPECT_EQ(s.reached_share, 1.0);
  EXPECT_GE(s.median_trials, 1);
  EXPECT_LE(s.median_trials, 3);
  double sum = 0;
  for (const auto& r : runs) sum += r.trials_to_target;
  EXPECT_DOUBLE_EQ(s.mean_trials, sum / runs.size());
  EXPECT_FALSE(RunOnce(*space, "nonsense", 1, 10, 10).ok());
  std::remove(path.c_str());
}

TEST(SearchEval, MeanCountsMissedRunsAsTheBudget) {
  std::string path = WriteSet();
  auto space = PrepareSpace(path);
  ASSERT_TRUE(space.ok());
  std::vector<Trace> runs(4);
  runs[0].trials_to_target = 2;
  runs[1].trials_to_target = 4;
  // runs[2] and runs[3] missed the target (-1) within a budget of 10.
  for (auto& r : runs) r.best_us = {space->worst_us};
  Summary s = Summarize(*space, runs, 10);
  EXPECT_DOUBLE_EQ(s.mean_trials, (2 + 4 + 10 + 10) / 4.0);
  EXPECT_EQ(s.median_trials, -1);  // the middle two runs: 4 and never
  EXPECT_DOUBLE_EQ(s.reached_share, 0.5);
  std::remove(path.c_str());
}

std::vector<Trace> RunsReaching(const std::vector<int>& trials) {
  std::vector<Trace> runs(trials.size());
  for (size_t i = 0; i < trials.size(); ++i) runs[i].trials_to_target = trials[i];
  return runs;
}

TEST(SearchEval, BootstrapIntervalHoldsThePointEstimateAndIsReproducible) {
  const auto runs = RunsReaching(
      {40, 12, 95, 33, 18, 250, 61, 27, 44, 9, 130, 52, 75, 21, 38, 300, 66, 15, 48, 88});
  const double median = MedianTrials(runs);
  EXPECT_DOUBLE_EQ(median, 46);  // (44 + 48) / 2
  const auto boot = BootstrapMedians(runs, 1000, 7);
  ASSERT_EQ(boot.size(), 1000u);
  EXPECT_EQ(BootstrapMedians(runs, 1000, 7), boot);  // deterministic given the seed
  EXPECT_NE(BootstrapMedians(runs, 1000, 8), boot);
  const Interval ci = PercentileInterval(boot);
  EXPECT_LE(ci.lo, median);
  EXPECT_GE(ci.hi, median);
  EXPECT_LT(ci.lo, ci.hi);  // seeds this spread cannot pin the median down
  // Every bootstrap median is a median of the runs' own values (or halfway between two).
  EXPECT_GE(ci.lo, 9);
  EXPECT_LE(ci.hi, 300);
  // The ratio's interval is the median's turned over: random's median / the strategy's.
  const Interval rci = PercentileInterval([&] {
    std::vector<double> r;
    for (double m : boot) r.push_back(MedianRatio(500, m, 1000));
    return r;
  }());
  EXPECT_DOUBLE_EQ(rci.lo, 500 / ci.hi);
  EXPECT_DOUBLE_EQ(rci.hi, 500 / ci.lo);
  EXPECT_LE(rci.lo, MedianRatio(500, median, 1000));
  EXPECT_GE(rci.hi, MedianRatio(500, median, 1000));
  // For a handful of seeds, too, the interval holds the point estimate.
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto few = RunsReaching({5, 80, 12, 7, 200, 33, 19});
    const Interval i = PercentileInterval(BootstrapMedians(few, 1000, seed));
    EXPECT_LE(i.lo, MedianTrials(few)) << seed;
    EXPECT_GE(i.hi, MedianTrials(few)) << seed;
  }
}

TEST(SearchEval, BootstrapCountsMissedRunsAsUnreached) {
  // Three of five runs missed: the median is unreached, and so is the interval's upper end; the
  // ratio then takes the budget, as the point estimate does.
  const auto runs = RunsReaching({10, -1, 20, -1, -1});
  EXPECT_TRUE(std::isinf(MedianTrials(runs)));
  EXPECT_DOUBLE_EQ(MedianRatio(100, MedianTrials(runs), 1000), 0.1);
  const Interval ci = PercentileInterval(BootstrapMedians(runs, 1000, 1));
  EXPECT_TRUE(std::isinf(ci.hi));
  EXPECT_GE(ci.lo, 10);
}

TEST(SearchEval, PercentileIntervalIsTheCentralShare) {
  std::vector<double> v;
  for (int i = 999; i >= 0; --i) v.push_back(i);
  const Interval ci = PercentileInterval(v);
  EXPECT_EQ(ci.lo, 25);
  EXPECT_EQ(ci.hi, 974);
  const Interval one = PercentileInterval({3.0});
  EXPECT_EQ(one.lo, 3);
  EXPECT_EQ(one.hi, 3);
}

TEST(SearchEval, HoldoutRowsRerunOnlyStrategiesThatStartFromACheckpoint) {
  const auto rows =
      PlanRows({"random", "annealing", "evolution", "policy", "policy:/tmp/ck.pt"}, true);
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i].holdout, Holdout::kNoLearnedState) << rows[i].strategy;
    EXPECT_EQ(rows[i].checkpoint, "");
  }
  // The checkpoint as given, then the same learner with a checkpoint chosen per held-out space.
  EXPECT_EQ(rows[4].holdout, Holdout::kGivenCheckpoint);
  EXPECT_EQ(rows[4].name, "policy");
  EXPECT_EQ(rows[4].checkpoint, "/tmp/ck.pt");
  EXPECT_EQ(rows[5].holdout, Holdout::kLeaveOneOut);
  EXPECT_EQ(rows[5].strategy, "policy:/tmp/ck.pt");
  EXPECT_EQ(rows[5].name, "policy");
  EXPECT_EQ(rows[5].checkpoint, "");
  EXPECT_STREQ(HoldoutLabel(rows[0].holdout), "no learned state");
  EXPECT_STREQ(HoldoutLabel(rows[5].holdout), "loo-checkpoint");
  // Without --holdout, one row each.
  EXPECT_EQ(PlanRows({"random", "policy:/tmp/ck.pt"}, false).size(), 2u);
  // A checkpoint by name (from $KILN_CHECKPOINT_DIR) is learned state too.
  const auto named = PlanRows({"policy:mine"}, true);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].name, "policy:mine");
  EXPECT_EQ(named[1].name, "policy");
  // The default is retrained leave-one-out exactly when it names a checkpoint of its own.
  const bool default_learns = std::string(agent::kDefaultStrategy).find(':') != std::string::npos;
  const auto def = PlanRows({"default"}, true);
  ASSERT_EQ(def.size(), default_learns ? 2u : 1u);
  EXPECT_EQ(def[0].holdout, default_learns ? Holdout::kGivenCheckpoint : Holdout::kNoLearnedState);
}

TEST(SearchEval, LeaveOneOutCheckpointNeverSeesTheHeldOutSpace) {
  std::vector<std::string> paths = {WriteSet("alpha"), WriteSet("beta"), WriteSet("gamma")};
  std::vector<Space> spaces;
  for (const auto& p : paths) {
    auto s = PrepareSpace(p);
    ASSERT_TRUE(s.ok()) << s.status();
    spaces.push_back(std::move(*s));
  }
  for (size_t held = 0; held < spaces.size(); ++held) {
    const auto sets = LeaveOneOutSets(spaces, held);
    ASSERT_EQ(sets.size(), 2u);
    for (const auto& t : sets) {
      EXPECT_NE(t.name, spaces[held].set->name);
      EXPECT_EQ(t.configs.size(), 4u);  // the whole recorded set, as `kiln agent pretrain` reads
    }
    for (size_t other = 0; other < spaces.size(); ++other) {
      if (other == held) continue;
      EXPECT_TRUE(std::any_of(sets.begin(), sets.end(), [&](const agent::TrainingSet& t) {
        return t.name == spaces[other].set->name;
      }));
    }
  }
  // The same file given twice is held out twice: no copy of it leaks into the training.
  spaces.push_back(*PrepareSpace(paths[0]));
  const auto sets = LeaveOneOutSets(spaces, 0);
  ASSERT_EQ(sets.size(), 2u);
  for (const auto& t : sets) EXPECT_NE(t.name, spaces[0].set->name);
  // A failure is a zero time in the training set, as pretraining expects.
  EXPECT_EQ(std::count(sets[0].median_us.begin(), sets[0].median_us.end(), 0.0), 1);
  // And the checkpoint trains on them: one per held-out space, loadable as a warm start.
  const std::string ck = ::testing::TempDir() + "/loo" + std::to_string(::getpid()) + ".pt";
  agent::PretrainOptions quick;
  quick.cost_steps = quick.policy_steps = 10;
  ASSERT_TRUE(agent::Pretrain(LeaveOneOutSets(spaces, 1), quick, ck).ok());
  auto run = RunOnce(spaces[1], "policy", 1, 4, 4, ck);
  EXPECT_TRUE(run.ok()) << run.status();
  std::remove(ck.c_str());
  for (const auto& p : paths) std::remove(p.c_str());
}

}  // namespace
}  // namespace kiln::bench
