// Group commit: batches written in order, several to a transaction, and a failure that fails
// everything queued after it until the coordinator takes the failed batches back.
#include "server/group_commit.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "gtest/gtest.h"
#include "server/job_state.h"
#include "tests/server/forwarding_store.h"
#include "tests/server/store_fixture.h"

namespace kiln::server {
namespace {

using testing::Job;
using testing::Record;
using testing::Trial;

// Forwards to SQLite; writes fail while `fail` is set, and each write can be held back.
class GatedStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::atomic<bool> fail{false};
  std::atomic<bool> hold{false};
  std::atomic<int> writes{0};

  absl::Status Write(const WriteBatch& b) override {
    while (hold) std::this_thread::yield();
    ++writes;
    if (fail) return absl::ResourceExhaustedError("disk full");
    return inner().Write(b);
  }
};

class GroupCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln-group-commit-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto inner = OpenStore("", dir_.string());
    ASSERT_TRUE(inner.ok()) << inner.status();
    store_ = std::make_unique<GatedStore>(*std::move(inner));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  WriteBatch TrialBatch(int64_t seq, v1::TrialState state) {
    WriteBatch b;
    v1::Trial t = Trial("j-000000000001", seq);
    t.set_state(state);
    b.trials.push_back(t);
    return b;
  }

  std::filesystem::path dir_;
  std::unique_ptr<GatedStore> store_;
};

TEST_F(GroupCommitTest, WritesInOrderSeveralToATransaction) {
  GroupCommit commits(store_.get());
  store_->hold = true;  // the first batch's write waits, so the rest queue behind it
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 50; ++i) {
    // The same trial written again and again: the last state is the one stored.
    auto t = commits.Enqueue(TrialBatch(1, i % 2 ? v1::LEASED : v1::PENDING));
    ASSERT_TRUE(t.ok());
    tickets.push_back(*t);
  }
  auto last = commits.Enqueue(TrialBatch(1, v1::DONE));
  ASSERT_TRUE(last.ok());
  store_->hold = false;
  for (uint64_t t : tickets) EXPECT_TRUE(commits.Wait(t).ok());
  EXPECT_TRUE(commits.Wait(*last).ok());
  EXPECT_LE(commits.transactions(), 3u) << "51 batches queued behind one write";
  auto stored = store_->LoadTrials("j-000000000001");
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].state(), v1::DONE);
  EXPECT_TRUE(commits.Wait(0).ok());  // nothing to wait for
  EXPECT_EQ(*commits.Enqueue(WriteBatch()), 0u);
}

TEST_F(GroupCommitTest, AFailureFailsWhatWasQueuedAfterItUntilTakenBack) {
  GroupCommit commits(store_.get());
  auto ok = commits.Enqueue(TrialBatch(1, v1::PENDING));
  ASSERT_TRUE(ok.ok());
  ASSERT_TRUE(commits.Wait(*ok).ok());
  store_->hold = true;
  store_->fail = true;
  auto a = commits.Enqueue(TrialBatch(2, v1::PENDING));
  auto b = commits.Enqueue(TrialBatch(3, v1::PENDING));  // made on top of a: fails with it
  ASSERT_TRUE(a.ok() && b.ok());
  store_->hold = false;
  EXPECT_EQ(commits.Wait(*a).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(commits.Wait(*b).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(commits.HasFailed());
  store_->fail = false;
  // Refused until the failed batches are taken back: it joins them.
  auto c = commits.Enqueue(TrialBatch(4, v1::PENDING));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  std::vector<WriteBatch> failed = commits.TakeFailed();
  int trials = 0;
  for (const WriteBatch& f : failed) trials += f.trials.size();
  EXPECT_EQ(trials, 3) << "the failed group, what was queued after it, and the refused batch";
  EXPECT_FALSE(commits.HasFailed());
  auto d = commits.Enqueue(TrialBatch(5, v1::PENDING));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(commits.Wait(*d).ok());
  auto stored = store_->LoadTrials("j-000000000001");
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 2u);  // seq 1 and 5: nothing of the failed ones
  EXPECT_EQ((*stored)[1].seq(), 5);
}

// WhenDone: at once for tickets already done (and for none), after their transaction otherwise,
// with the first failure among them; every callback runs once, none is left when it stops.
TEST_F(GroupCommitTest, WhenDoneAnswersOnceEveryTicketIsWrittenOrOneFailed) {
  std::atomic<int> ok{0}, failed{0};
  auto count = [&](absl::Status s) { ++(s.ok() ? ok : failed); };
  {
    GroupCommit commits(store_.get());
    commits.WhenDone({}, count);
    commits.WhenDone({0}, count);
    EXPECT_EQ(ok, 2);  // nothing to wait for: on this thread
    store_->hold = true;
    const uint64_t a = *commits.Enqueue(TrialBatch(1, v1::PENDING));
    const uint64_t b = *commits.Enqueue(TrialBatch(2, v1::PENDING));
    commits.WhenDone({a, b}, count);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(ok, 2);  // held back: not yet
    store_->hold = false;
    ASSERT_TRUE(commits.Wait(b).ok());
    for (int i = 0; i < 500 && ok < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(ok, 3);
    store_->fail = true;
    const uint64_t c = *commits.Enqueue(TrialBatch(3, v1::PENDING));
    commits.WhenDone({a, c}, count);  // a was written, c fails: the failure
    EXPECT_FALSE(commits.Wait(c).ok());
    for (int i = 0; i < 500 && failed < 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    EXPECT_EQ(failed, 1);
    EXPECT_TRUE(commits.HasFailed());
    commits.TakeFailed();
    EXPECT_FALSE(commits.HasFailed());
    store_->fail = false;
    store_->hold = true;
    const uint64_t d = *commits.Enqueue(TrialBatch(4, v1::PENDING));
    commits.WhenDone({d}, count);
    store_->hold = false;  // and it stops at once: the callback still runs
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(failed, 1);
}

TEST_F(GroupCommitTest, EverythingQueuedIsWrittenBeforeItStops) {
  {
    GroupCommit commits(store_.get());
    for (int i = 1; i <= 20; ++i) ASSERT_TRUE(commits.Enqueue(TrialBatch(i, v1::DONE)).ok());
  }
  auto stored = store_->LoadTrials("j-000000000001");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->size(), 20u);
}

TEST(MergeBatchesTest, HasTheEffectOfWritingInOrder) {
  WriteBatch a, b, c;
  a.jobs.push_back(Job("j-000000000001", v1::QUEUED, 1));
  b.jobs.push_back(Job("j-000000000001", v1::RUNNING, 1));
  a.records.push_back(Record("A=1", 30));
  b.records.push_back(Record("A=1", 20));
  b.records.push_back(Record("A=2", 10));
  v1::WorkerInfo w1, w2;
  w1.set_id("w-1");
  w2.set_id("w-2");
  a.workers = {w1, w2};
  b.removed_workers = {"w-1", "w-2"};  // both gone ...
  c.workers = {w2};                    // ... and w-2 back
  WriteBatch m = MergeBatches({a, b, c});
  ASSERT_EQ(m.jobs.size(), 1u);
  EXPECT_EQ(m.jobs[0].state(), v1::RUNNING);
  ASSERT_EQ(m.records.size(), 2u);
  EXPECT_EQ(m.records[0].measurement().median_us(), 20);
  EXPECT_EQ(m.removed_workers, std::vector<std::string>{"w-1"});
  ASSERT_EQ(m.workers.size(), 2u);  // w-1's upsert is removed again after it
}

v1::Trial Pending(int64_t seq) {
  v1::Trial t = Trial("j-000000000001", seq);
  t.set_state(v1::PENDING);
  t.set_attempt(1);
  return t;
}

TEST(JobEntryTest, IndexesFollowEveryStateChange) {
  JobEntry job;
  v1::Trial& a = job.AddTrial(Pending(1));
  v1::Trial& b = job.AddTrial(Pending(2));
  EXPECT_EQ(job.pending.size(), 2u);
  job.SetState(a, v1::LEASED);
  a.set_worker_id("w-1");
  EXPECT_EQ(job.pending.begin()->second, &b);
  EXPECT_EQ(job.leased.at(1), &a);
  job.Requeue(a);
  EXPECT_EQ(a.attempt(), 2);
  EXPECT_TRUE(a.worker_id().empty());
  EXPECT_EQ(job.pending.begin()->second, &a) << "oldest first";
  job.SetState(a, v1::DONE);
  EXPECT_FALSE(job.Settled());
  EXPECT_EQ(job.DropPending(), std::vector<std::string>{b.id()});
  EXPECT_TRUE(job.Settled());
  EXPECT_EQ(job.trials.size(), 1u);
}

}  // namespace
}  // namespace kiln::server
