// The CPU kernel templates' runtime (codegen/cpu/templates/parallel.h), included here as a kernel
// includes it: its loops run on the host's pool, which this binary exports (kiln_hardware).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "codegen/cpu/templates/parallel.h"
#include "gtest/gtest.h"

namespace {

// Every item runs exactly once; `next`, where given, is the following item of the same run.
TEST(ParallelRunsTest, RunsEveryItemOnceAndNamesTheNextOne) {
  for (long n : {0L, 1L, 2L, 3L, 7L, 8L, 100L, 1001L}) {
    for (int nt : {1, 2, 3, 8, 64, 100}) {
      std::vector<std::atomic<int>> runs(n);
      std::vector<long> next(n, -2);
      kiln_rt::ParallelRuns(n, nt, [&](long i, long then) {
        runs[i].fetch_add(1);
        next[i] = then;
      });
      for (long i = 0; i < n; ++i) {
        ASSERT_EQ(runs[i].load(), 1) << "item " << i << " of " << n << " on " << nt << " threads";
        ASSERT_TRUE(next[i] == -1 || next[i] == i + 1)
            << "item " << i << " named " << next[i] << " as next (n " << n << ", nt " << nt << ")";
      }
      if (n > 0) {
        EXPECT_EQ(next[n - 1], -1) << "the last item has no next";
      }
    }
  }
}

// One thread alone runs the items in order, each naming the next.
TEST(ParallelRunsTest, OneThreadRunsInOrder) {
  std::vector<long> order, nexts;
  kiln_rt::ParallelRuns(5, 1, [&](long i, long then) {
    order.push_back(i);
    nexts.push_back(then);
  });
  EXPECT_EQ(order, (std::vector<long>{0, 1, 2, 3, 4}));
  EXPECT_EQ(nexts, (std::vector<long>{1, 2, 3, 4, -1}));
}

// A thread held up in its first item does not hold up the rest of its run: the other thread takes
// those items from the run's far end.
TEST(ParallelRunsTest, TakesTheRestOfAHeldUpRun) {
  std::vector<std::thread::id> by(8);
  std::atomic<int> done{0};
  kiln_rt::ParallelRuns(8, 2, [&](long i, long) {
    by[i] = std::this_thread::get_id();
    if (i == 0) {  // wait (up to 10 s) for the other seven items
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (done.load() < 7 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } else {
      done.fetch_add(1);
    }
  });
  EXPECT_EQ(done.load(), 7);
  for (long i = 1; i < 4; ++i)
    EXPECT_NE(by[i], by[0]) << "item " << i << " waited for the thread held up in item 0";
}

}  // namespace
