// Lease pacing: fast trials grow the lease up to its cap and go in one report; slow trials shrink
// it back and are reported as each finishes.
#include "common/lease_pacing.h"

#include "gtest/gtest.h"

namespace kiln {
namespace {

TEST(LeasePacingTest, FastTrialsGrowTheLeaseUpToItsCap) {
  LeasePacing p(4);
  EXPECT_EQ(p.lease_size(), 4);
  p.BatchRan(4, 0.004);  // 1 ms a trial
  EXPECT_EQ(p.lease_size(), 8);
  for (int i = 0; i < 10; ++i) p.BatchRan(p.lease_size(), 0.001 * p.lease_size());
  EXPECT_EQ(p.lease_size(), LeasePacing::kMaxLease);
  p.BatchRan(64, 64 * 0.5);  // the next job's trials take half a second
  EXPECT_EQ(p.lease_size(), 32);
  for (int i = 0; i < 10; ++i) p.BatchRan(p.lease_size(), 0.5 * p.lease_size());
  EXPECT_EQ(p.lease_size(), 4) << "never below --compile-ahead";
}

TEST(LeasePacingTest, ALeaseTheCoordinatorCouldNotFillDoesNotGrowIt) {
  LeasePacing p(4);
  p.BatchRan(1, 0.001);
  EXPECT_EQ(p.lease_size(), 4);
}

TEST(LeasePacingTest, MaxLeaseCapsAndOneAtATimeStaysOne) {
  LeasePacing capped(4, 16), single(1, 1);
  for (int i = 0; i < 10; ++i) {
    capped.BatchRan(capped.lease_size(), 0.001);
    single.BatchRan(1, 0.001);
  }
  EXPECT_EQ(capped.lease_size(), 16);
  EXPECT_EQ(single.lease_size(), 1);
}

TEST(LeasePacingTest, SlowTrialsAndOldResultsAreReportedAtOnce) {
  EXPECT_FALSE(LeasePacing::ReportNow(0.01, 0.001));
  EXPECT_TRUE(LeasePacing::ReportNow(0.0, 0.2));     // a slow trial: the strategy hears at once
  EXPECT_TRUE(LeasePacing::ReportNow(0.15, 0.001));  // held long enough
}

}  // namespace
}  // namespace kiln
