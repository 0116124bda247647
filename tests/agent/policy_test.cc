// The policy network (PPO), the cost model (ranking) and their checkpoints.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "agent/policy/checkpoint.h"
#include "agent/policy/cost_model.h"
#include "agent/policy/features.h"
#include "agent/policy/policy_net.h"
#include "agent/policy/policy_strategy.h"
#include "agent/policy/sampler.h"
#include "agent/strategy.h"
#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

codegen::KnobSpace Space() {
  codegen::KnobSpace s;
  s.AddKnob("TILE", {1, 2, 4, 8, 16});
  s.AddKnob("VEC", {1, 2, 4});
  s.AddKnob("UNROLL", {0, 1});
  s.AddConstraint("TILE*VEC <= 32",
                  [](const codegen::Config& c) { return c.at("TILE") * c.at("VEC") <= 32; });
  return s;
}

struct Fixture {
  codegen::KnobSpace space = Space();
  std::shared_ptr<const SpaceIndex> index = SpaceIndex::Build(space, nullptr);
  SpaceFeatures features{space, v1::Workload(), v1::ChipFingerprint()};
};

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name + std::to_string(::getpid());
}

// A configuration recorded before a knob existed is read with the value it ran with (pretraining
// and the ledger of seen configurations); without an absent_means it stays off the index.
TEST(SpaceIndexTest, RecordsFromBeforeAKnobWasAddedAreReadWithItsAbsentValue) {
  codegen::KnobSpace space = Space();
  space.AddKnob("PF", {0, 64}, "added later", /*absent_means=*/0);
  auto index = SpaceIndex::Build(space, nullptr);
  Row row;
  ASSERT_TRUE(index->FromConfig({{"TILE", 4}, {"VEC", 2}, {"UNROLL", 1}}, &row));
  EXPECT_EQ(index->ToConfig(row).at("PF"), 0);
  ASSERT_TRUE(index->FromConfig({{"TILE", 4}, {"VEC", 2}, {"UNROLL", 1}, {"PF", 64}}, &row));
  EXPECT_EQ(index->ToConfig(row).at("PF"), 64);
  EXPECT_FALSE(index->FromConfig({{"TILE", 4}, {"VEC", 2}, {"PF", 0}}, &row));  // UNROLL: none
  EXPECT_EQ(space.WithAbsentKnobs({{"TILE", 4}}).at("PF"), 0);
  EXPECT_EQ(space.WithAbsentKnobs({{"TILE", 4}}).count("UNROLL"), 0u);
}

TEST(PolicyNet, MaskedDistributionSumsToOneOverValidConfigs) {
  Fixture f;
  PolicyNet p(f.features, f.index, 1);
  std::vector<float> lp = p.LogProb(f.index->rows());
  double total = 0;
  for (float v : lp) total += std::exp(v);
  EXPECT_NEAR(total, 1.0, 1e-4);
  EXPECT_EQ(f.index->rows().size(), 28u);  // 30 points; TILE=16 with VEC=4 breaks the rule
}

TEST(PolicyNet, PpoUpdateLowersTheLossOnAFixedBatch) {
  Fixture f;
  PolicyNet p(f.features, f.index, 2);
  std::mt19937_64 rng(3);
  std::vector<PpoSample> batch;
  std::vector<float> lp = p.LogProb(f.index->rows());
  for (size_t i = 0; i < f.index->rows().size(); ++i) {
    const Row& r = f.index->rows()[i];
    batch.push_back({r, lp[i], r[0] == 3 && r[1] == 1 ? 2.0f : -0.5f + 0.1f * r[2]});
  }
  double before = p.Loss(batch);
  PpoStats first = p.Update(batch, 1);
  EXPECT_NEAR(first.loss, before, 1e-4);  // the first epoch sees the same parameters
  p.Update(batch, 30);
  EXPECT_LT(p.Loss(batch), before - 0.05);
  // And the rewarded configuration became more likely.
  Row best{3, 1, 0};
  EXPECT_GT(p.LogProb({best})[0], lp[f.index->Find(best)]);
}

TEST(CostModel, LearnsARankingOfASmallSpace) {
  Fixture f;
  CostModel m(4);
  std::mt19937_64 rng(5);
  std::vector<float> x, y;
  std::vector<uint8_t> ok;
  for (const Row& r : f.index->rows()) {
    x.resize(x.size() + kConfigFeatures);
    f.features.ConfigRow(r, x.data() + x.size() - kConfigFeatures);
    y.push_back(std::abs(r[0] - 3) + 0.5f * std::abs(r[1] - 1) - 0.3f * r[2]);
    ok.push_back(1);
  }
  for (int i = 0; i < 40; ++i) m.Train(x, y, ok, {}, 10, rng);
  std::vector<float> mean, spread;
  m.Predict(x.data(), static_cast<int>(y.size()), &mean, &spread);
  int agree = 0, pairs = 0;
  for (size_t i = 0; i < y.size(); ++i)
    for (size_t j = i + 1; j < y.size(); ++j)
      if (y[i] != y[j]) ++pairs, agree += (y[i] < y[j]) == (mean[i] < mean[j]);
  EXPECT_GT(static_cast<double>(agree) / pairs, 0.9);
}

TEST(Checkpoint, RoundTripReproducesBothModels) {
  Fixture f;
  PolicyNet p(f.features, f.index, 7);
  CostModel m(7);
  std::mt19937_64 rng(1);
  std::vector<PpoSample> batch;
  for (const Row& r : f.index->rows()) batch.push_back({r, -3, r[0] * 0.5f});
  p.Update(batch, 5);
  std::vector<float> x(kConfigFeatures * 3);
  for (int i = 0; i < 3; ++i)
    f.features.ConfigRow(f.index->rows()[i], x.data() + i * kConfigFeatures);
  m.Train(x, {0.f, 1.f, 2.f}, {1, 1, 0}, {}, 5, rng);

  const std::string path = TempPath("ckpt");
  ASSERT_TRUE(SaveCheckpoint(path, &p, &m).ok());
  PolicyNet p2(f.features, f.index, 99);
  CostModel m2(99);
  ASSERT_TRUE(LoadCheckpoint(path, &p2, &m2).ok());
  EXPECT_EQ(p.Logits(), p2.Logits());
  std::vector<float> a, b, sa, sb;
  m.Predict(x.data(), 3, &a, &sa);
  m2.Predict(x.data(), 3, &b, &sb);
  EXPECT_EQ(a, b);

  // Another space (different knobs) takes the shared weights but not the per-space offsets.
  codegen::KnobSpace other;
  other.AddKnob("X", {1, 2, 3, 4, 5, 6, 7});
  auto oi = SpaceIndex::Build(other, nullptr);
  SpaceFeatures of(other, v1::Workload(), v1::ChipFingerprint());
  PolicyNet p3(of, oi, 3);
  EXPECT_TRUE(LoadCheckpoint(path, &p3, nullptr).ok());
  std::remove(path.c_str());
}

TEST(Checkpoint, DamagedOrMissingFilesAreErrorsNotCrashes) {
  Fixture f;
  PolicyNet p(f.features, f.index, 1);
  CostModel m(1);
  EXPECT_EQ(LoadCheckpoint("/nonexistent/x.pt", &p, &m).code(), absl::StatusCode::kNotFound);
  const std::string path = TempPath("junk");
  std::ofstream(path) << "not a checkpoint";
  auto s = LoadCheckpoint(path, &p, &m);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos);
  std::remove(path.c_str());
}

TEST(PolicyStrategy, WarmStartsFromACheckpointAndSavesPerTask) {
  const std::string dir = TempPath("models");
  StrategyContext c;
  c.space = Space();
  c.seed = 3;
  c.save_checkpoint = dir + "/task.pt";
  {
    auto s = NewStrategy("policy", c);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < 20; ++i) {
      auto p = (*s)->Propose(1);
      ASSERT_EQ(p.size(), 1u);
      (*s)->Observe({{p[0], v1::OK, 1.0 + p[0].at("TILE")}});
    }
  }  // saved when the strategy goes away
  c.save_checkpoint.clear();
  c.persist = false;
  // Jobs name checkpoints in the checkpoint directory, with or without ".pt"; paths are refused.
  SetCheckpointDirectory(dir);
  auto warm = NewStrategy("policy:task.pt", c);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ((*warm)->Propose(1).size(), 1u);
  EXPECT_TRUE(NewStrategy("policy:task", c).ok());
  EXPECT_FALSE(NewStrategy("policy:absent", c).ok());
  EXPECT_FALSE(NewStrategy("policy:" + dir + "/task.pt", c).ok());
  SetCheckpointDirectory("");
  std::remove((dir + "/task.pt").c_str());
}

// A new best's one-knob neighbours along small (categorical) knobs are measured next: from the
// first result, the next proposals change VEC (3 values) or UNROLL (2), never TILE (5).
TEST(PolicyStrategy, FlipsTheCategoricalKnobsOfANewBest) {
  StrategyContext c;
  c.space = Space();
  c.seed = 2;
  c.persist = false;
  PolicyOptions o;
  o.initial = 1;
  o.flip_max = 3;
  o.flip_cap = 2;
  o.explore = 0;
  auto s = NewPolicyStrategy(c, o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto first = (*s)->Propose(1);
  ASSERT_EQ(first.size(), 1u);
  (*s)->Observe({{first[0], v1::OK, 5.0}});
  auto next = (*s)->Propose(2);
  ASSERT_EQ(next.size(), 2u);
  for (const auto& n : next) {
    EXPECT_EQ(n.at("TILE"), first[0].at("TILE"));
    EXPECT_EQ((n.at("VEC") != first[0].at("VEC")) + (n.at("UNROLL") != first[0].at("UNROLL")), 1);
  }
}

// KILN_POLICY_OPTIONS: numbers within range, modes by name or by their old numbers; anything
// else is an error that names the key, and leaves the options as they were up to it.
TEST(PolicyOptions, ParsesOverridesByTable) {
  PolicyOptions o;
  ASSERT_TRUE(
      ParsePolicyOptions("kappa=1.5,flip_cap=0,gp=ensemble,prior_mean=none,prior_fit=0", &o).ok());
  EXPECT_EQ(o.kappa, 1.5);
  EXPECT_EQ(o.flip_cap, 0);
  EXPECT_EQ(o.surrogate, Surrogate::kEnsemble);
  EXPECT_EQ(o.prior_mean, PriorMean::kNone);
  EXPECT_FALSE(o.prior_fit);
  ASSERT_TRUE(ParsePolicyOptions("gp=1,prior_mean=2", &o).ok());
  EXPECT_EQ(o.surrogate, Surrogate::kGp);
  EXPECT_EQ(o.prior_mean, PriorMean::kCostModelAndPolicy);
  ASSERT_TRUE(ParsePolicyOptions("gp=blend,prior_mean=cost_model", &o).ok());
  EXPECT_EQ(o.surrogate, Surrogate::kBlend);
  EXPECT_EQ(o.prior_mean, PriorMean::kCostModel);
  ASSERT_TRUE(ParsePolicyOptions("local_adapt=0", &o).ok());  // a fixed walk share
  EXPECT_EQ(o.local_adapt, 0);
  EXPECT_TRUE(ParsePolicyOptions("", &o).ok());

  for (const char* bad : {"thompson=1", "pool_all=100", "explore=1.5", "initial=2.5", "initial=-1",
                          "gp=3", "gp=product", "prior_fit=2", "kappa", "kappa=x"}) {
    absl::Status s = ParsePolicyOptions(bad, &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(s.message().find(key), absl::string_view::npos) << s.message();
  }
  PolicyOptions d;
  EXPECT_FALSE(ParsePolicyOptions("explore=0.1,nope=1", &d).ok());
  EXPECT_EQ(d.explore, 0.1);
}

class Recorder : public AgentMetrics {
 public:
  void Report(const std::string& name, double value) override { seen[name] = value; }
  std::map<std::string, double> seen;
};

TEST(PolicyStrategy, ReportsItsMetrics) {
  auto sink = std::make_shared<Recorder>();
  StrategyContext c;
  c.space = Space();
  c.seed = 1;
  c.persist = false;
  c.metrics = sink;
  auto s = NewStrategy("policy", c);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 24; ++i) {
    auto p = (*s)->Propose(1);
    ASSERT_EQ(p.size(), 1u);
    (*s)->Observe({{p[0], v1::OK, 1.0 + p[0].at("TILE") + p[0].at("VEC")}});
  }
  for (const char* name : {kPolicyLoss, kPolicyEntropy, kPolicyReward, kCostModelRankAccuracy})
    EXPECT_TRUE(sink->seen.count(name)) << name;
  EXPECT_GE(sink->seen[kCostModelRankAccuracy], 0);
  EXPECT_LE(sink->seen[kCostModelRankAccuracy], 1);
}

// A checkpoint trained where large tiles are fast, warm-starting a space where small tiles are
// (its cost model ranks the results backwards) and one where large tiles are fast again.
class WarmStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    double tile = 0;
    Run("policy", PolicyOptions{}, /*large_fast=*/true, 30, nullptr, &tile);  // the checkpoint
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Run(const std::string& strategy, const PolicyOptions& o, bool large_fast, int trials,
           std::shared_ptr<Recorder> sink, double* best_tile) {
    StrategyContext c;
    c.space = Space();
    c.seed = 5;
    c.persist = strategy == "policy";
    c.save_checkpoint = c.persist ? path_ : "";
    c.init_checkpoint = c.persist ? "" : path_;
    c.metrics = sink;
    auto s = NewPolicyStrategy(c, o);
    ASSERT_TRUE(s.ok()) << s.status();
    double best = 1e30;
    for (int i = 0; i < trials; ++i) {
      auto p = (*s)->Propose(1);
      if (p.empty()) break;
      const double tile = p[0].at("TILE"), us = large_fast ? 40.0 - tile : 1.0 + tile;
      if (us < best) best = us, *best_tile = tile;
      (*s)->Observe({{p[0], v1::OK, us + 0.1 * p[0].at("VEC") + 0.01 * p[0].at("UNROLL")}});
    }
  }
  // The prior weight a 20-trial warm start reports last (-1: none reported); `tile` gets the
  // fastest tile it found.
  double PriorWeight(const PolicyOptions& o, bool large_fast, double* tile) {
    auto sink = std::make_shared<Recorder>();
    Run("warm", o, large_fast, 20, sink, tile);
    return sink->seen.count(kPriorWeight) ? sink->seen[kPriorWeight] : -1;
  }
  const std::string path_ = TempPath("prior") + ".pt";
};

// The default warm start: the prior's weight is fitted to the task's results, so a prior that
// ranks them backwards gets none and the search still finds the optimum.
TEST_F(WarmStartTest, PriorMeanWeighsThePriorByHowItRanksThisTask) {
  double tile = 0;
  EXPECT_EQ(PriorWeight(PolicyOptions{}, /*large_fast=*/false, &tile), 0);
  EXPECT_EQ(tile, 1);  // found the fastest tile anyway
  EXPECT_GT(PriorWeight(PolicyOptions{}, /*large_fast=*/true, &tile), 0.1);
}

// The weight is trusted only once the rows picked without the models (the 10 space-filling
// ones here) show the prior ranks the task: with fewer of them than prior_fit_min, even a prior
// from the same landscape gets no weight; ungated (prior_fit=false) it gets one.
TEST_F(WarmStartTest, PriorWeightIsFittedOnRowsPickedWithoutTheModels) {
  double tile = 0;
  PolicyOptions gated;
  gated.prior_fit_min = 50;  // more than the 10 space-filling rows of 20 trials
  EXPECT_EQ(PriorWeight(gated, /*large_fast=*/true, &tile), 0);
  PolicyOptions all;
  all.prior_fit = false;
  EXPECT_GT(PriorWeight(all, /*large_fast=*/true, &tile), 0.1);
}

// The prior is flat over its predicted fastest prior_clip share of the space: a tenth keeps its
// ranking of the rest (weight > 0), the whole space leaves nothing to rank by (weight 0).
TEST_F(WarmStartTest, PriorIsFlatOverItsPredictedFastestShare) {
  double tile = 0;
  PolicyOptions tenth;
  tenth.prior_clip = 0.1;
  EXPECT_GT(PriorWeight(tenth, /*large_fast=*/true, &tile), 0.1);
  PolicyOptions whole;
  whole.prior_clip = 1;
  EXPECT_EQ(PriorWeight(whole, /*large_fast=*/true, &tile), 0);
}

// PriorMean::kNone loads both networks; its trust check drops a prior that ranks backwards
// (restarts cold, still finds the optimum) and keeps one from the same landscape.
TEST_F(WarmStartTest, LoadedNetworksAreDroppedWhenThePriorRanksBackwards) {
  PolicyOptions o;
  o.prior_mean = PriorMean::kNone;
  double tile = 0;
  auto distrusted = std::make_shared<Recorder>();
  Run("warm", o, /*large_fast=*/false, 20, distrusted, &tile);
  ASSERT_TRUE(distrusted->seen.count(kPriorRankAccuracy));
  EXPECT_LT(distrusted->seen[kPriorRankAccuracy], 0.6);
  EXPECT_EQ(tile, 1);
  auto trusted = std::make_shared<Recorder>();
  Run("warm", o, /*large_fast=*/true, 20, trusted, &tile);
  ASSERT_TRUE(trusted->seen.count(kPriorRankAccuracy));
  EXPECT_GE(trusted->seen[kPriorRankAccuracy], 0.6);
}

}  // namespace
}  // namespace kiln::agent
