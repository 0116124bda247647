// kiln-bench-search --transfer: the rows it plans, the paired comparison and its verdict, and the
// report's shape from a run of the tool on two tiny spaces.
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench/search_eval.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kiln::bench {
namespace {

std::vector<Trace> RunsReaching(const std::vector<int>& trials) {
  std::vector<Trace> runs(trials.size());
  for (size_t i = 0; i < trials.size(); ++i) runs[i].trials_to_target = trials[i];
  return runs;
}

TEST(Transfer, VerdictNeedsTheWholeIntervalOnOneSideOfOne) {
  EXPECT_STREQ(TransferVerdict({1.2, 3.0}), "helped");
  EXPECT_STREQ(TransferVerdict({1.0001, 1.5}), "helped");
  EXPECT_STREQ(TransferVerdict({0.3, 0.9}), "hurt");
  EXPECT_STREQ(TransferVerdict({0.8, 1.5}), "no difference within noise");
  // Touching 1 is not clear of it.
  EXPECT_STREQ(TransferVerdict({1.0, 2.0}), "no difference within noise");
  EXPECT_STREQ(TransferVerdict({0.5, 1.0}), "no difference within noise");
  EXPECT_STREQ(TransferVerdict({1.0, 1.0}), "no difference within noise");
  EXPECT_STREQ(TransferVerdict({1.5, INFINITY}), "helped");
}

TEST(Transfer, ComparisonOnConstructedRuns) {
  const auto slow = RunsReaching({50, 60, 45, 70, 55, 65, 40, 80, 52, 58});
  const auto fast = RunsReaching({10, 12, 9, 15, 11, 14, 8, 16, 10, 13});
  const TransferComparison helped = CompareTransfer(slow, fast, 1000, 1000, 3);
  EXPECT_DOUBLE_EQ(helped.no_prior_median, 56.5);
  EXPECT_DOUBLE_EQ(helped.prior_median, 11.5);
  EXPECT_DOUBLE_EQ(helped.ratio, 56.5 / 11.5);
  EXPECT_GT(helped.ci.lo, 1);
  EXPECT_LE(helped.ci.lo, helped.ci.hi);
  EXPECT_STREQ(helped.verdict, "helped");
  // The other way round: the prior cost trials.
  const TransferComparison hurt = CompareTransfer(fast, slow, 1000, 1000, 3);
  EXPECT_LT(hurt.ci.hi, 1);
  EXPECT_STREQ(hurt.verdict, "hurt");
  EXPECT_DOUBLE_EQ(hurt.ratio, 11.5 / 56.5);
  // Overlapping spreads: no verdict either way.
  const auto mixed = RunsReaching({20, 90, 35, 60, 15, 75, 40, 55, 25, 100});
  const auto other = RunsReaching({30, 70, 45, 20, 85, 50, 35, 65, 25, 95});
  EXPECT_STREQ(CompareTransfer(mixed, other, 1000, 1000, 3).verdict, "no difference within noise");
  // Unreached medians count as the budget, as the table's ratios do.
  const auto missed = RunsReaching({-1, -1, -1, 30});
  const TransferComparison censored =
      CompareTransfer(missed, RunsReaching({5, 6, 7, 8}), 200, 500, 1);
  EXPECT_TRUE(std::isinf(censored.no_prior_median));
  EXPECT_DOUBLE_EQ(censored.ratio, 200 / 6.5);
  EXPECT_STREQ(censored.verdict, "helped");
}

TEST(Transfer, RunsOfOneSeedAreResampledTogether) {
  // A prior that changed nothing gives the same trials seed for seed: resampled in pairs, every
  // draw's ratio is 1. Drawn apart, the spread of the seeds would show up as an interval.
  const auto runs = RunsReaching({5, 80, 12, 7, 200, 33, 19, 44, 9, 130});
  const TransferComparison same = CompareTransfer(runs, runs, 1000, 1000, 11);
  EXPECT_DOUBLE_EQ(same.ratio, 1);
  EXPECT_DOUBLE_EQ(same.ci.lo, 1);
  EXPECT_DOUBLE_EQ(same.ci.hi, 1);
  EXPECT_STREQ(same.verdict, "no difference within noise");
  // A prior that saved exactly one trial in four on every seed: every draw's ratio is 4/3.
  std::vector<int> quarter_off = {4, 80, 12, 8, 200, 32, 20, 44, 8, 128};
  std::vector<int> three_quarters;
  for (int t : quarter_off) three_quarters.push_back(t * 3 / 4);
  const TransferComparison steady =
      CompareTransfer(RunsReaching(quarter_off), RunsReaching(three_quarters), 1000, 1000, 11);
  EXPECT_DOUBLE_EQ(steady.ci.lo, 4.0 / 3);
  EXPECT_DOUBLE_EQ(steady.ci.hi, 4.0 / 3);
  EXPECT_STREQ(steady.verdict, "helped");
}

TEST(Transfer, RowsPlannedPerLearner) {
  // The default names no checkpoint: as given it is the no-prior run, then its [loo] row.
  const auto def = PlanRows({"default", "random"}, false, true);
  ASSERT_EQ(def.size(), 3u);
  EXPECT_EQ(def[0].holdout, Holdout::kNoLearnedState);
  EXPECT_EQ(def[1].holdout, Holdout::kLeaveOneOut);
  EXPECT_EQ(def[1].strategy, "default");
  EXPECT_EQ(def[1].name, "policy");
  EXPECT_EQ(def[2].strategy, "random");
  const auto dt = PlanTransfers(def);
  ASSERT_EQ(dt.size(), 1u);  // random learns nothing: no comparison
  EXPECT_EQ(dt[0].strategy, "default");
  EXPECT_EQ(dt[0].no_prior, 0u);
  EXPECT_EQ(dt[0].loo, 1u);
  EXPECT_EQ(dt[0].given, -1);
  // A checkpoint given: its row, the same learner without it, and from the leave-one-out one.
  const auto ck = PlanRows({"annealing", "policy:/tmp/ck.pt"}, false, true);
  ASSERT_EQ(ck.size(), 4u);
  EXPECT_EQ(ck[1].holdout, Holdout::kGivenCheckpoint);
  EXPECT_EQ(ck[1].checkpoint, "/tmp/ck.pt");
  EXPECT_EQ(ck[2].holdout, Holdout::kNoPrior);
  EXPECT_EQ(ck[2].name, "policy");
  EXPECT_EQ(ck[2].checkpoint, "");
  EXPECT_STREQ(HoldoutLabel(ck[2].holdout), "no-prior");
  EXPECT_EQ(ck[3].holdout, Holdout::kLeaveOneOut);
  EXPECT_EQ(ck[3].checkpoint, "");
  const auto ct = PlanTransfers(ck);
  ASSERT_EQ(ct.size(), 1u);
  EXPECT_EQ(ct[0].strategy, "policy:/tmp/ck.pt");
  EXPECT_EQ(ct[0].given, 1);
  EXPECT_EQ(ct[0].no_prior, 2u);
  EXPECT_EQ(ct[0].loo, 3u);
  // Without --transfer nothing changes, and nothing is compared.
  EXPECT_EQ(PlanRows({"default"}, true).size(), 1u);
  EXPECT_TRUE(PlanTransfers(PlanRows({"default", "policy:/tmp/ck.pt"}, true)).empty());
  EXPECT_TRUE(PlanTransfers(PlanRows({"random", "evolution"}, false, true)).empty());
}

// Four configurations of one knob, the fastest two within 95% of each other.
std::string WriteSet(const std::string& stem, double slow) {
  std::string path = ::testing::TempDir() + "/" + stem + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"tune_params_keys": ["X"], "tune_params": {"X": [1, 2, 3, 4]},
    "cache": {"1": {"X": 1, "time": 1.0}, "2": {"X": 2, "time": 1.02},
              "3": {"X": 3, "time": )"
                      << slow << R"(}, "4": {"X": 4, "time": "RuntimeFailedConfig"}}})";
  return path;
}

// Runs the tool; its exit status in *rc, its stdout returned.
std::string RunTool(const std::string& args, int* rc) {
  std::string out;
  FILE* p = popen((std::string(KILN_BENCH_SEARCH) + " " + args + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(Transfer, ToolReportsEverySpace) {
  const std::string a = WriteSet("alpha", 2.0), b = WriteSet("beta", 3.0);
  const std::string common = "--space " + a + " " + b + " --seeds 3 --budget 4 --jobs 2";
  int rc = -1;
  const std::string json_text =
      RunTool(common + " --strategy default random --transfer --json", &rc);
  ASSERT_EQ(rc, 0) << json_text;
  const auto j = nlohmann::json::parse(json_text);
  // Rows: default (no prior), default [loo], random; on each of the two spaces.
  ASSERT_EQ(j["results"].size(), 6u);
  EXPECT_EQ(j["results"][0]["holdout"], "no learned state");
  EXPECT_EQ(j["results"][1]["holdout"], "loo-checkpoint");
  ASSERT_TRUE(j.contains("transfer"));
  ASSERT_EQ(j["transfer"].size(), 2u);  // one per space, for the one learner
  const std::set<std::string> verdicts = {"helped", "hurt", "no difference within noise"};
  std::set<std::string> spaces;
  for (const auto& t : j["transfer"]) {
    std::set<std::string> keys;
    for (const auto& [k, v] : t.items()) keys.insert(k);
    EXPECT_EQ(keys,
              (std::set<std::string>{"space", "strategy", "no_prior_median", "loo_median", "ratio",
                                     "ci_low", "ci_high", "verdict", "loo_prior_on_share"}));
    spaces.insert(t["space"].get<std::string>());
    EXPECT_EQ(t["strategy"], "default");
    EXPECT_TRUE(t["no_prior_median"].is_number()) << t.dump();  // 4 trials cover the space
    EXPECT_TRUE(t["loo_median"].is_number()) << t.dump();
    const double lo = t["ci_low"], hi = t["ci_high"];
    EXPECT_LE(lo, hi);
    EXPECT_TRUE(verdicts.count(t["verdict"].get<std::string>()));
    EXPECT_EQ(t["verdict"].get<std::string>(), TransferVerdict({lo, hi}));
  }
  EXPECT_EQ(spaces, (std::set<std::string>{a, b}));

  // A checkpoint given is run too, marked as possibly trained on the space.
  const std::string ck = ::testing::TempDir() + "/transfer" + std::to_string(::getpid()) + ".pt";
  std::vector<Space> loaded;
  for (const auto& p : {a, b}) loaded.push_back(*PrepareSpace(p));
  agent::PretrainOptions quick;
  quick.cost_steps = quick.policy_steps = 10;
  ASSERT_TRUE(agent::Pretrain(LeaveOneOutSets(loaded, 0), quick, ck).ok());
  const std::string given =
      RunTool(common + " --strategy policy:" + ck + " --transfer --json", &rc);
  ASSERT_EQ(rc, 0) << given;
  const auto g = nlohmann::json::parse(given);
  ASSERT_EQ(g["results"].size(), 6u);  // as given, [no prior], [loo]; per space
  EXPECT_EQ(g["results"][1]["holdout"], "no-prior");
  ASSERT_EQ(g["transfer"].size(), 2u);
  for (const auto& t : g["transfer"]) {
    EXPECT_EQ(t["given_seen_space"], true);
    EXPECT_TRUE(t["given_median"].is_number()) << t.dump();
    EXPECT_LE(t["given_ci_low"].get<double>(), t["given_ci_high"].get<double>());
  }

  // The table: a transfer section naming both spaces, and its tally.
  const std::string text = RunTool(common + " --strategy default --transfer", &rc);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("transfer, default:"), std::string::npos) << text;
  EXPECT_NE(text.find("no-prior"), std::string::npos);
  EXPECT_NE(text.find("of 2 spaces"), std::string::npos) << text;
  // --transfer needs a learner and two spaces.
  RunTool(common + " --strategy random --transfer", &rc);
  EXPECT_EQ(rc, 2);
  RunTool("--space " + a + " --strategy default --transfer --seeds 2", &rc);
  EXPECT_EQ(rc, 2);
  std::remove(ck.c_str());
  std::remove(a.c_str());
  std::remove(b.c_str());
}

}  // namespace
}  // namespace kiln::bench
