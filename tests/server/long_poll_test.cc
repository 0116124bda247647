// Long-polls that hold no thread: the WaitList and PollExecutor (server/long_poll.h), and a real
// coordinator holding hundreds of parked LeaseTrials and WatchJob calls on a few threads.
#include "server/long_poll.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/v1/tuning_service.grpc.pb.h"
#include "kiln/v1/worker_service.grpc.pb.h"
#include "server/coordinator_server.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Counts resumptions and what they said; Await waits for `n` of them.
struct Resumed {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<int, bool>> order;  // (waiter, timed_out)
  WaitList::Resume For(int id) {
    return [this, id](bool timed_out) {
      std::lock_guard<std::mutex> lock(mu);
      order.emplace_back(id, timed_out);
      cv.notify_all();
    };
  }
  bool Await(size_t n, milliseconds within = milliseconds(5000)) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, within, [&] { return order.size() >= n; });
  }
};

TEST(WaitListTest, NotifyOneResumesTheEarliestParkedAndEachWaiterOnce) {
  PollExecutor executor(2);
  WaitList list(&executor);
  Resumed r;
  const auto later = Clock::now() + milliseconds(60000);
  list.Park(later, r.For(1));
  list.Park(later, r.For(2));
  list.Park(later, r.For(3));
  list.NotifyOne();
  ASSERT_TRUE(r.Await(1));
  {
    std::lock_guard<std::mutex> lock(r.mu);
    EXPECT_EQ(r.order[0], std::make_pair(1, false));
  }
  list.NotifyAll();
  ASSERT_TRUE(r.Await(3));
  list.NotifyAll();  // nobody is left: nothing runs twice
  std::this_thread::sleep_for(milliseconds(50));
  std::lock_guard<std::mutex> lock(r.mu);
  EXPECT_EQ(r.order.size(), 3u);
}

TEST(WaitListTest, NotifyUpToAndNotifyWeightWakeTheOldestAsManyAsAsked) {
  PollExecutor executor(2);
  WaitList list(&executor);
  Resumed r;
  const auto later = Clock::now() + milliseconds(60000);
  for (int i = 1; i <= 6; ++i) list.Park(later, r.For(i), /*weight=*/4);
  EXPECT_EQ(list.NotifyUpTo(2), 2);
  ASSERT_TRUE(r.Await(2));
  list.NotifyWeight(5);  // 5 units of work: two waiters of 4
  ASSERT_TRUE(r.Await(4));
  list.NotifyWeight(0);  // none
  std::this_thread::sleep_for(milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(r.mu);
    ASSERT_EQ(r.order.size(), 4u);
    std::vector<int> ids;
    for (const auto& [id, timed_out] : r.order) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids, (std::vector<int>{1, 2, 3, 4}));
  }
  EXPECT_EQ(list.NotifyUpTo(10), 2);  // only two were left
  ASSERT_TRUE(r.Await(6));
}

TEST(WaitListTest, AWaiterTimesOutAtItsDeadlineAndANotificationThenSkipsIt) {
  PollExecutor executor(1);
  WaitList list(&executor);
  Resumed r;
  const auto start = Clock::now();
  list.Park(start + milliseconds(50), r.For(1));
  list.Park(start + milliseconds(60000), r.For(2));
  ASSERT_TRUE(r.Await(1));
  EXPECT_GE(Clock::now() - start, milliseconds(50));
  list.NotifyOne();  // waiter 1 timed out: the notification goes to waiter 2
  ASSERT_TRUE(r.Await(2));
  std::lock_guard<std::mutex> lock(r.mu);
  EXPECT_EQ(r.order[0], std::make_pair(1, true));
  EXPECT_EQ(r.order[1], std::make_pair(2, false));
}

TEST(WaitListTest, StoppingTheExecutorResumesEveryParkedWaiterAsTimedOut) {
  Resumed r;
  {
    PollExecutor executor(1);
    WaitList list(&executor);
    for (int i = 0; i < 10; ++i) list.Park(Clock::now() + std::chrono::hours(1), r.For(i));
  }
  std::lock_guard<std::mutex> lock(r.mu);
  ASSERT_EQ(r.order.size(), 10u);  // none is left unanswered
  for (const auto& [id, timed_out] : r.order) EXPECT_TRUE(timed_out) << id;
}

int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

CoordinatorOptions ServerOptions() {
  CoordinatorOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = testing::TempDir();
  o.metrics_listen = "";
  o.quiet = true;
  o.max_watch_streams = 1000;
  o.max_watch_streams_per_caller = 1000;
  return o;
}

// A thread per waiting call (the synchronous gRPC API) would be hundreds of threads here.
TEST(LongPollServerTest, HundredsOfWaitingLeasesAndWatchesHoldAFewThreads) {
  auto server = StartCoordinator(ServerOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  auto workers = v1::WorkerService::NewStub(channel);
  auto tuning = v1::TuningService::NewStub(channel);
  const int before = ThreadsOfThisProcess();

  // A job for another chip: its watchers wait for events that do not come.
  v1::JobSpec other = testing::GemmSpec(8, 4);
  other.set_chip("opencl");
  grpc::ClientContext submit_ctx;
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = other;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(tuning->SubmitJob(&submit_ctx, submit, &submitted).ok());

  constexpr int kLeases = 300, kWatches = 100;
  struct Lease {
    grpc::ClientContext ctx;
    v1::LeaseTrialsRequest req;
    v1::LeaseTrialsResponse resp;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Lease>> leases;
  std::mutex mu;
  std::condition_variable cv;
  int answered = 0;
  for (int i = 0; i < kLeases; ++i) {
    grpc::ClientContext reg_ctx;
    v1::RegisterResponse reg;
    ASSERT_TRUE(workers->Register(&reg_ctx, testing::CpuRegistration(), &reg).ok());
    auto l = std::make_unique<Lease>();
    l->req.set_worker_id(reg.worker_id());
    l->req.set_max_trials(1);
    l->req.set_wait_ms(20000);
    workers->async()->LeaseTrials(&l->ctx, &l->req, &l->resp,
                                  [&mu, &cv, &answered, s = &l->status](grpc::Status st) {
                                    std::lock_guard<std::mutex> lock(mu);
                                    *s = st;
                                    ++answered;
                                    cv.notify_all();
                                  });
    leases.push_back(std::move(l));
  }
  struct Watch {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
  };
  std::vector<std::unique_ptr<Watch>> watches;
  v1::WatchJobRequest watch_req;
  watch_req.set_job_id(submitted.job_id());
  for (int i = 0; i < kWatches; ++i) {
    auto w = std::make_unique<Watch>();
    w->reader = tuning->WatchJob(&w->ctx, watch_req);
    v1::JobEvent first;
    ASSERT_TRUE(w->reader->Read(&first));  // the snapshot; then it waits
    watches.push_back(std::move(w));
  }
  std::this_thread::sleep_for(milliseconds(300));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(answered, 0) << "a lease with nothing to lease answered before its deadline";
  }
  const int waiting = ThreadsOfThisProcess();
  EXPECT_LT(waiting - before, 64) << "threads before: " << before << ", while waiting: " << waiting;

  // Work arrives: the parked leases take it without waiting out their long-poll.
  const auto submitted_at = Clock::now();
  grpc::ClientContext job_ctx;
  v1::SubmitJobRequest job;
  *job.mutable_spec() = testing::GemmSpec(8, kLeases);
  ASSERT_TRUE(tuning->SubmitJob(&job_ctx, job, &submitted).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(15), [&] { return answered == kLeases; }))
        << answered << " of " << kLeases << " leases answered";
  }
  EXPECT_LT(Clock::now() - submitted_at, std::chrono::seconds(10));
  int trials = 0;
  for (const auto& l : leases) {
    EXPECT_TRUE(l->status.ok()) << l->status.error_message();
    trials += l->resp.trials_size();
  }
  EXPECT_GT(trials, 0);

  // Stopping ends the parked watches at once (UNAVAILABLE), not at the server's grace period.
  const auto stop_at = Clock::now();
  (*server)->Shutdown();
  EXPECT_LT(Clock::now() - stop_at, milliseconds(1900));
  for (auto& w : watches) {
    v1::JobEvent e;
    while (w->reader->Read(&e)) {
    }
    EXPECT_FALSE(w->reader->Finish().ok());
  }
}

}  // namespace
}  // namespace kiln::server
