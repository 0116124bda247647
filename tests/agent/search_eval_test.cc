// The search benchmark's arithmetic: random search's exact median and mean, run summaries.
#include "bench/search_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::bench {
namespace {

// Four configurations of one knob: times 1, 1.02 (within 95%), 2, and a failure.
std::string WriteSet() {
  std::string path = ::testing::TempDir() + "/tiny" + std::to_string(::getpid()) + ".json";
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

}  // namespace
}  // namespace kiln::bench
