// The search benchmark's arithmetic: random search's exact expectations and run summaries.
#include "bench/search_eval.h"

#include <cmath>
#include <cstdio>
#include <fstream>

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
  EXPECT_FALSE(RunOnce(*space, "nonsense", 1, 10, 10).ok());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kiln::bench
