#include <set>

#include "agent/strategy.h"
#include "codegen/cpu/gemm_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

StrategyContext SmallSpace(uint64_t seed) {
  StrategyContext c;
  c.space.AddKnob("A", {1, 2, 4, 8});
  c.space.AddKnob("B", {1, 2, 3});
  c.space.AddConstraint("A*B <= 16",
                        [](const codegen::Config& x) { return x.at("A") * x.at("B") <= 16; });
  c.seed = seed;
  return c;
}

TEST(RandomStrategy, ProposesEveryValidConfigExactlyOnce) {
  auto s = NewStrategy("random", SmallSpace(7));
  ASSERT_TRUE(s.ok());
  std::set<std::string> seen;
  for (int i = 0; i < 20; ++i)
    for (const auto& c : (*s)->Propose(1)) {
      EXPECT_TRUE(SmallSpace(0).space.IsValid(c));
      EXPECT_TRUE(seen.insert(codegen::ConfigKey(c)).second) << "proposed twice";
    }
  EXPECT_EQ(seen.size(), 11u);  // 12 points, one breaks the constraint (8*3)
  EXPECT_TRUE((*s)->Propose(5).empty());
}

TEST(StrategyNames, DefaultIsTheBenchmarkWinner) {
  auto d = NewStrategy("default", SmallSpace(3));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->name(), kDefaultStrategy);
  EXPECT_EQ(NewStrategy("nope", SmallSpace(3)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RandomStrategy, SameSeedSameOrder) {
  auto a = NewStrategy("random", SmallSpace(3));
  auto b = NewStrategy("random", SmallSpace(3));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(codegen::ConfigKey((*a)->Propose(1).at(0)),
              codegen::ConfigKey((*b)->Propose(1).at(0)));
}

TEST(RandomStrategy, FindsTheOptimumOfASmallSpace) {
  auto s = NewStrategy("random", SmallSpace(11));
  ASSERT_TRUE(s.ok());
  double best = 1e9;
  for (int i = 0; i < 10; ++i)
    for (const auto& c : (*s)->Propose(1)) {
      double cost = std::abs(c.at("A") - 4) + std::abs(c.at("B") - 2) + 1;
      (*s)->Observe({{c, v1::OK, cost}});
      best = std::min(best, cost);
    }
  EXPECT_EQ(best, 1);
}

TEST(RandomStrategy, ExcludedConfigsAreNotProposed) {
  auto s = NewStrategy("random", SmallSpace(5));
  ASSERT_TRUE(s.ok());
  (*s)->Exclude({{"A", 1}, {"B", 1}});
  int n = 0;
  for (auto c = (*s)->Propose(1); !c.empty(); c = (*s)->Propose(1), ++n)
    EXPECT_FALSE(c[0].at("A") == 1 && c[0].at("B") == 1);
  EXPECT_EQ(n, 10);
}

TEST(Strategy, UnknownNameIsRejectedWithTheKnownOnes) {
  auto s = NewStrategy("bayes", SmallSpace(1));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("random"), std::string::npos);
}

// A GEMM space on a chip with many cores (a longer NT domain) is past the size up to which a
// sparse space is enumerated; at a small shape almost all of its points break a rule, yet every
// strategy keeps finding valid, new configurations.
TEST(SparseSpaces, SmallGemmOnAManyCoreChipIsSearchedToItsBudget) {
  const auto gemm = codegen::ParseWorkload("gemm", "M=8,N=64,K=64");
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  codegen::ChipTraits chip;
  chip.vector_floats = 16, chip.vector_registers = 32, chip.cores = 16;
  for (const char* name : {"random", "annealing", "evolution", "default"}) {
    StrategyContext c;
    c.space = codegen::NewCpuGemmTemplate()->Space(*gemm, chip);
    ASSERT_GT(c.space.CartesianSize(), 1u << 24);
    c.seed = 5;
    auto s = NewStrategy(name, c);
    ASSERT_TRUE(s.ok()) << s.status();
    std::set<std::string> seen;
    for (int i = 0; i < 12; ++i)
      for (const auto& p : (*s)->Propose(1)) {
        EXPECT_TRUE(c.space.IsValid(p)) << name;
        seen.insert(codegen::ConfigKey(p));
        (*s)->Observe({{p, v1::OK, 1.0 + static_cast<double>(seen.size())}});
      }
    EXPECT_EQ(seen.size(), 12u) << name;
  }
}

}  // namespace
}  // namespace kiln::agent
