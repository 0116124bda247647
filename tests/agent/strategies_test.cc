// Every strategy: valid, never repeats, deterministic per seed, finds a small space's optimum.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "agent/strategy.h"
#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

// 6 x 6 x 4 x 3 = 432 points, 36 of them invalid; one optimum (A=8, B=5, C=2, D=0) in a
// landscape with interactions, plus a region that fails to "compile".
StrategyContext Synthetic(uint64_t seed) {
  StrategyContext c;
  c.space.AddKnob("A", {1, 2, 4, 8, 16, 32});
  c.space.AddKnob("B", {1, 2, 3, 4, 5, 6});
  c.space.AddKnob("C", {0, 1, 2, 3});
  c.space.AddKnob("D", {0, 1, 2});
  c.space.AddConstraint("A*B <= 96",
                        [](const codegen::Config& x) { return x.at("A") * x.at("B") <= 96; });
  c.seed = seed;
  c.persist = false;
  return c;
}

bool Fails(const codegen::Config& x) { return x.at("A") == 1 && x.at("D") == 2; }

double Cost(const codegen::Config& x) {
  double a = std::log2(static_cast<double>(x.at("A")));
  double b = x.at("B"), c = x.at("C"), d = x.at("D");
  return 10 + std::pow(a - 3, 2) + std::pow(b - 5, 2) * 0.7 + std::abs(c - 2) * (1 + 0.3 * d) +
         d * 0.8 + 0.2 * std::abs(a - 3) * std::abs(c - 2);
}

Observation Measure(const codegen::Config& c) {
  if (Fails(c)) return {c, v1::COMPILE_ERROR, 0};
  return {c, v1::OK, Cost(c)};
}

class EveryStrategy : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryStrategy, ProposesValidNewConfigsUntilTheSpaceIsExhausted) {
  StrategyContext ctx = Synthetic(5);
  auto s = NewStrategy(GetParam(), ctx);
  ASSERT_TRUE(s.ok()) << s.status();
  std::set<std::string> seen;
  for (int i = 0; i < 500; ++i) {
    auto c = (*s)->Propose(1);
    if (c.empty()) break;
    ASSERT_TRUE(ctx.space.IsValid(c[0]));
    ASSERT_TRUE(seen.insert(codegen::ConfigKey(c[0])).second) << "proposed twice";
    (*s)->Observe({Measure(c[0])});
  }
  EXPECT_EQ(seen.size(), 396u);
  EXPECT_TRUE((*s)->Propose(3).empty());
}

TEST_P(EveryStrategy, SameSeedSameProposals) {
  auto a = NewStrategy(GetParam(), Synthetic(9));
  auto b = NewStrategy(GetParam(), Synthetic(9));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 40; ++i) {
    auto ca = (*a)->Propose(1), cb = (*b)->Propose(1);
    ASSERT_EQ(ca.size(), 1u);
    ASSERT_EQ(codegen::ConfigKey(ca[0]), codegen::ConfigKey(cb[0])) << "trial " << i;
    (*a)->Observe({Measure(ca[0])});
    (*b)->Observe({Measure(cb[0])});
  }
}

TEST_P(EveryStrategy, FindsTheOptimumOfASmallSpace) {
  // Random search gets the whole space; the others must be faster than its expectation.
  const int budget = GetParam() == "random" ? 396 : 150;
  for (uint64_t seed : {1, 2, 3}) {
    auto s = NewStrategy(GetParam(), Synthetic(seed));
    ASSERT_TRUE(s.ok());
    int found = -1;
    for (int t = 1; t <= budget && found < 0; ++t) {
      auto c = (*s)->Propose(1);
      ASSERT_FALSE(c.empty());
      if (c[0] == codegen::Config{{"A", 8}, {"B", 5}, {"C", 2}, {"D", 0}}) found = t;
      (*s)->Observe({Measure(c[0])});
    }
    EXPECT_GT(found, 0) << GetParam() << " seed " << seed << " missed the optimum";
  }
}

TEST_P(EveryStrategy, ExcludedConfigsAreNeverProposed) {
  auto s = NewStrategy(GetParam(), Synthetic(4));
  ASSERT_TRUE(s.ok());
  codegen::Config banned{{"A", 8}, {"B", 5}, {"C", 2}, {"D", 0}};
  (*s)->Exclude(banned);
  for (int i = 0; i < 100; ++i) {
    auto c = (*s)->Propose(1);
    ASSERT_FALSE(c.empty());
    ASSERT_NE(c[0], banned);
    (*s)->Observe({Measure(c[0])});
  }
}

TEST_P(EveryStrategy, HandlesBatchesAndLateResults) {
  auto s = NewStrategy(GetParam(), Synthetic(6));
  ASSERT_TRUE(s.ok());
  std::set<std::string> seen;
  for (int round = 0; round < 10; ++round) {
    auto batch = (*s)->Propose(4);
    ASSERT_EQ(batch.size(), 4u);
    std::vector<Observation> results;
    for (const auto& c : batch) {
      ASSERT_TRUE(seen.insert(codegen::ConfigKey(c)).second);
      results.push_back(Measure(c));
    }
    (*s)->Observe(results);
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, EveryStrategy,
                         ::testing::Values("random", "annealing", "evolution", "policy"));

TEST(StrategyNames, DefaultAndCheckpointSyntax) {
  EXPECT_TRUE(CheckStrategyName("default").ok());
  EXPECT_TRUE(CheckStrategyName(kDefaultStrategy).ok());
  EXPECT_FALSE(CheckStrategyName("annealing:x").ok());
  auto missing = CheckStrategyName("policy:model.pt");
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("model.pt"), std::string::npos);
  EXPECT_EQ(CheckStrategyName("bogus").code(), absl::StatusCode::kInvalidArgument);
}

// A job may name a checkpoint, never a path: whether a file exists outside the checkpoint
// directory must not change the answer (no existence oracle), and nothing outside is opened.
TEST(StrategyNames, CheckpointsAreNamedNotPathed) {
  const std::string dir = ::testing::TempDir() + "/kiln-ckpt-names";
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/good.pt") << "x";
  std::ofstream(dir + "/.hidden") << "x";
  SetCheckpointDirectory(dir);
  EXPECT_TRUE(CheckStrategyName("policy:good").ok());
  EXPECT_TRUE(CheckStrategyName("policy:good.pt").ok());
  // Present and absent files outside the directory read the same.
  for (const char* path : {"/etc/passwd", "/etc/kiln-does-not-exist"}) {
    auto s = CheckStrategyName(std::string("policy:") + path);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_NE(s.message().find("not a checkpoint name"), std::string::npos) << s.message();
  }
  auto a = CheckStrategyName("policy:passwd"), b = CheckStrategyName("policy:no-such-name");
  EXPECT_EQ(a.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(a.message()).replace(a.message().find("passwd"), 6, "N"),
            std::string(b.message()).replace(b.message().find("no-such-name"), 12, "N"));
  EXPECT_NE(b.message().find("not found in the checkpoint directory"), std::string::npos);
  for (const std::string& bad :
       std::vector<std::string>{"../good.pt", "sub/../good.pt", ".hidden", "..", "", "a b", "a\\b",
                                std::string(129, 'a')})
    EXPECT_FALSE(CheckStrategyName("policy:" + bad).ok()) << bad;
  EXPECT_TRUE(CheckStrategyName("policy:" + std::string(128, 'a')).code() ==
              absl::StatusCode::kInvalidArgument);  // well formed, absent
  // The error quotes a short prefix of a huge name, not all of it.
  auto huge = CheckStrategyName("policy:" + std::string(100000, '/'));
  EXPECT_LT(huge.message().size(), 400u);
  SetCheckpointDirectory("");
  std::filesystem::remove_all(dir);
}

TEST(StrategyContext, LargeSpacesAreSampledNotEnumerated) {
  StrategyContext c;
  for (int k = 0; k < 8; ++k) c.space.AddKnob("K" + std::to_string(k), {1, 2, 3, 4, 5, 6, 7, 8});
  c.space.AddConstraint("K0 != K1",
                        [](const codegen::Config& x) { return x.at("K0") != x.at("K1"); });
  c.persist = false;
  EXPECT_FALSE(IndexFor(c)->enumerated());  // 8^8 = 16.7M points
  for (const char* name : {"random", "annealing", "evolution", "policy"}) {
    auto s = NewStrategy(name, c);
    ASSERT_TRUE(s.ok()) << name;
    for (int i = 0; i < 30; ++i) {
      auto p = (*s)->Propose(1);
      ASSERT_EQ(p.size(), 1u) << name;
      ASSERT_TRUE(c.space.IsValid(p[0])) << name;
      double cost = 1;
      for (const auto& [k, v] : p[0]) cost += v;
      (*s)->Observe({{p[0], v1::OK, cost}});
    }
  }
}

}  // namespace
}  // namespace kiln::agent

namespace kiln::agent {
namespace {

// A template's space on a chip, as the coordinator builds a task's context.
StrategyContext TemplateContext(const std::string& shape, int cores) {
  StrategyContext c;
  c.chip.set_kind("cpu");
  c.chip.set_cores(cores);
  c.chip.add_isa_features("avx2");
  c.chip.add_isa_features("fma");
  c.workload = *codegen::ParseWorkload("gemm", shape);
  c.space = *codegen::SpaceFor(c.workload, c.chip);
  c.persist = false;
  return c;
}

// Tasks on one template space share its index (enumerated once); another shape, other chip
// traits, a narrowed domain or a space built by hand get their own.
TEST(IndexForTest, SharesATemplateSpaceAndNothingElse) {
  const StrategyContext a = TemplateContext("M=8,N=512,K=256", 2);
  auto index = IndexFor(a);
  EXPECT_EQ(IndexFor(TemplateContext("M=8,N=512,K=256", 2)).get(), index.get());
  EXPECT_NE(IndexFor(TemplateContext("M=8,N=512,K=512", 2)).get(), index.get());
  EXPECT_NE(IndexFor(TemplateContext("M=8,N=512,K=256", 4)).get(), index.get());
  StrategyContext pinned = a;
  ASSERT_TRUE(pinned.space.Pin("NT", 1).ok());
  auto narrowed = IndexFor(pinned);
  EXPECT_NE(narrowed.get(), index.get());
  for (const Row& r : narrowed->rows()) EXPECT_EQ(narrowed->ToConfig(r).at("NT"), 1);
  StrategyContext by_hand = Synthetic(1);
  EXPECT_NE(IndexFor(by_hand).get(), IndexFor(by_hand).get());
}

}  // namespace
}  // namespace kiln::agent
