// Robustness of the coordinator: refused store writes leave memory as stored, lost workers are
// purged, old finished jobs stay in the store only, one coordinator per data dir, capped watches.
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/v1/tuning_service.grpc.pb.h"
#include "server/coordinator.h"
#include "server/coordinator_server.h"
#include "tests/server/forwarding_store.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using testing::CpuChip;
using testing::CpuRegistration;
using testing::GemmSpec;
using testing::Ok;
using testing::ReportRequest;

// The default strategy's (the policy network's) set-up costs seconds per job load; the refused
// writes reload jobs often, and what is tested does not depend on the strategy.
v1::JobSpec Spec(int m, int budget) {
  v1::JobSpec s = GemmSpec(m, budget);
  s.set_strategy("random");
  return s;
}

// A store whose writes can be made to fail, as on a full disk; reads still work.
class FlakyStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::atomic<bool> fail{false};
  int fail_every = 0;  // > 0: every n-th write fails
  int writes = 0, failed = 0;
  int job_loads = 0;

  absl::Status Write(const WriteBatch& b) override {
    ++writes;
    if (fail || (fail_every > 0 && writes % fail_every == 0)) {
      ++failed;
      return absl::ResourceExhaustedError("sqlite: database or disk is full");
    }
    return ForwardingStore::Write(b);
  }
  absl::StatusOr<std::optional<v1::Job>> LoadJob(const std::string& id) override {
    ++job_loads;
    return ForwardingStore::LoadJob(id);
  }
};

class RobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir();
    store_ = std::make_unique<FlakyStore>(*OpenStore("", dir_));
    options_.final_rounds = 0;
    Restart();
  }
  void Restart() {
    core_.reset();
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, nullptr, options_);
    ASSERT_TRUE(core_->Recover().ok());
  }
  std::string RegisterWorker(const std::string& id = "") {
    auto resp = core_->Register(CpuRegistration(id), "");
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->worker_id() : "";
  }
  absl::StatusOr<v1::LeaseTrialsResponse> Lease(const std::string& worker) {
    v1::LeaseTrialsRequest r;
    r.set_worker_id(worker);
    r.set_max_trials(1);
    return core_->LeaseTrials(r, "");
  }
  absl::StatusOr<v1::ReportResultsResponse> Report(const std::string& worker, const v1::Trial& t,
                                                   v1::Measurement m) {
    return core_->ReportResults(ReportRequest(worker, t, std::move(m)), "");
  }

  CoreOptions options_{5000, 1000, 1000, 1};
  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<FlakyStore> store_;
  std::unique_ptr<Coordinator> core_;
};

// What a job's counts, budget use and best are, for comparing before and after.
std::string Snapshot(const v1::Job& j) {
  std::string s = absl::StrCat(j.state(), " done=", j.trials_done(), " failed=", j.trials_failed());
  for (const auto& t : j.tasks())
    absl::StrAppend(&s, " [ok=", t.trials_ok(), " failed=", t.trials_failed(),
                    " best=", t.best().median_us(), " ", t.best_config().ShortDebugString(), "]");
  return s;
}

TEST_F(RobustnessTest, AReportTheStoreRefusesLeavesTheJobAsItWasAndIsRetried) {
  auto id = *core_->SubmitJob(Spec(8, 4));
  std::string w = RegisterWorker();
  auto base = Lease(w);
  ASSERT_TRUE(base.ok() && base->trials_size() == 1);
  ASSERT_TRUE(Report(w, base->trials(0), Ok(500)).ok());
  auto tune = Lease(w);
  ASSERT_TRUE(tune.ok() && tune->trials_size() == 1);
  const v1::Trial t = tune->trials(0);
  const std::string before = Snapshot(*core_->GetJob(id));

  store_->fail = true;  // the disk fills
  auto refused = Report(w, t, Ok(50));
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(Snapshot(*core_->GetJob(id)), before);  // no count, no best, no budget spent
  auto results = *core_->GetResults(id);
  for (const auto& r : results.trials())
    if (r.id() == t.id()) {
      EXPECT_EQ(r.state(), v1::LEASED) << "the trial is still to be answered";
    }
  // A lease the store refuses hands nothing out and proposes nothing.
  auto lease = Lease(w);
  EXPECT_FALSE(lease.ok());
  EXPECT_EQ(Snapshot(*core_->GetJob(id)), before);

  store_->fail = false;  // space again: the same report is accepted, once
  auto again = Report(w, t, Ok(50));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->accepted(), 1);
  EXPECT_EQ(core_->GetJob(id)->trials_done(), 1);
}

// The miscount: writes refused now and then through a whole job, and a restart; the
// trials counted equal the budget exactly, in memory and in the store.
TEST_F(RobustnessTest, BudgetsAreExactWhenWritesFailNowAndThen) {
  constexpr int kBudget = 6;
  auto id = *core_->SubmitJob(Spec(8, kBudget));
  std::string w = RegisterWorker();
  store_->fail_every = 3;
  int refused = 0;
  bool restarted = false;
  for (int round = 0; round < 400; ++round) {
    auto now = core_->GetJob(id);
    ASSERT_TRUE(now.ok()) << now.status();
    if (now->state() == v1::SUCCEEDED) break;
    if (!restarted && now->trials_done() >= kBudget / 2) {  // a coordinator restart midway
      restarted = true;
      Restart();
    }
    auto lease = Lease(w);
    if (!lease.ok()) {
      ++refused;
      continue;
    }
    if (lease->trials_size() == 0) {  // work held by a lease the worker forgot: let it expire
      clock_.Advance(options_.lease_ttl_ms + 1);
      core_->Tick();
      continue;
    }
    for (const auto& t : lease->trials())
      if (!Report(w, t, Ok(100 + round)).ok()) ++refused;  // dropped: the lease expires
  }
  EXPECT_GT(refused, 2);
  v1::Job job = *core_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << Snapshot(job);
  EXPECT_EQ(job.tasks(0).trials_ok() + job.tasks(0).trials_failed(), kBudget);
  EXPECT_EQ(job.trials_done(), kBudget);
  store_->fail_every = 0;
  Restart();
  job = *core_->GetJob(id);
  EXPECT_EQ(job.trials_done(), kBudget);
  int tune_done = 0;
  const v1::GetResultsResponse results = *core_->GetResults(id);
  for (const auto& t : results.trials()) tune_done += t.kind() == v1::TUNE && t.state() == v1::DONE;
  EXPECT_EQ(tune_done, kBudget);
}

// The sequence: a report refused by a full disk and never retried (the worker died), more
// progress stored, the coordinator restarted: the trial is run again and counted once.
TEST_F(RobustnessTest, ARefusedReportIsCountedOnceAfterARestart) {
  constexpr int kBudget = 4;
  auto id = *core_->SubmitJob(Spec(8, kBudget));
  std::string w = RegisterWorker();
  auto lease = [&] {
    auto l = Lease(w);
    EXPECT_TRUE(l.ok() && l->trials_size() == 1) << l.status();
    return l.ok() && l->trials_size() == 1 ? l->trials(0) : v1::Trial();
  };
  ASSERT_TRUE(Report(w, lease(), Ok(500)).ok());  // the baseline
  const v1::Trial lost = lease();
  store_->fail = true;
  EXPECT_FALSE(Report(w, lost, Ok(60)).ok());
  store_->fail = false;
  ASSERT_TRUE(Report(w, lease(), Ok(70)).ok());  // stored: the job's counts with it
  Restart();
  for (int round = 0; round < 100 && core_->GetJob(id)->state() != v1::SUCCEEDED; ++round) {
    auto l = Lease(w);
    ASSERT_TRUE(l.ok());
    if (l->trials_size() == 0) {
      clock_.Advance(options_.lease_ttl_ms + 1);
      core_->Tick();
    }
    for (const auto& t : l->trials()) ASSERT_TRUE(Report(w, t, Ok(80 + round)).ok());
  }
  v1::Job job = *core_->GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.trials_done(), kBudget) << Snapshot(job);
  EXPECT_EQ(job.tasks(0).trials_ok(), kBudget) << Snapshot(job);
}

TEST_F(RobustnessTest, ARegistrationTheStoreRefusesDidNotHappen) {
  store_->fail = true;
  v1::RegisterRequest r;
  r.set_name("w");
  *r.mutable_chip() = CpuChip();
  EXPECT_FALSE(core_->Register(r, "").ok());
  EXPECT_TRUE(core_->ListWorkers().empty());
}

TEST_F(RobustnessTest, LostWorkersArePurgedFromMemoryAndStore) {
  options_.worker_purge_after_ms = 60'000;
  Restart();
  core_->SubmitJob(Spec(8, 4)).IgnoreError();
  std::string lost = RegisterWorker();
  auto lease = Lease(lost);
  ASSERT_TRUE(lease.ok() && lease->trials_size() == 1);
  clock_.Advance(30'000);
  std::string alive = RegisterWorker();
  core_->Tick();  // the lost worker's lease is requeued; it is listed as lost
  ASSERT_EQ(core_->ListWorkers().size(), 2u);
  auto trials = core_->GetResults((*core_->ListJobs(1))[0].id())->trials();
  EXPECT_EQ(trials[0].state(), v1::PENDING);
  clock_.Advance(31'000);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(alive);
  ASSERT_TRUE(core_->Heartbeat(hb, "").ok());
  store_->fail = true;  // a purge the store refuses keeps the worker until it can be stored
  core_->Tick();
  EXPECT_EQ(core_->ListWorkers().size(), 2u);
  store_->fail = false;
  core_->Tick();
  auto workers = core_->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].id(), alive);
  EXPECT_EQ(store_->LoadWorkers()->size(), 1u);
  Restart();
  EXPECT_EQ(core_->ListWorkers().size(), 1u);
  // A purged worker that comes back registers again (heartbeats answer known=false).
  hb.set_worker_id(lost);
  EXPECT_FALSE(core_->Heartbeat(hb, "")->known());
}

TEST_F(RobustnessTest, OldFinishedJobsStayInTheStoreAndAreReadOnDemand) {
  options_.job_retention_ms = 7LL * 24 * 3600 * 1000;
  Restart();
  auto old_id = *core_->SubmitJob(Spec(8, 2));
  std::string w = RegisterWorker();
  for (int i = 0; i < 10; ++i) {
    auto lease = Lease(w);
    ASSERT_TRUE(lease.ok());
    for (const auto& t : lease->trials()) ASSERT_TRUE(Report(w, t, Ok(100 - i)).ok());
  }
  ASSERT_EQ(core_->GetJob(old_id)->state(), v1::SUCCEEDED);
  const v1::Job finished = *core_->GetJob(old_id);
  const int trials = core_->GetResults(old_id)->trials_size();
  clock_.Advance(8LL * 24 * 3600 * 1000);
  auto new_id = *core_->SubmitJob(Spec(16, 2));  // unfinished: always loaded
  Restart();
  EXPECT_EQ(core_->JobsInMemory(), 1u);
  auto listed = core_->ListJobs(0);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);  // the archived job is not listed
  EXPECT_EQ((*listed)[0].id(), new_id);
  auto job = core_->GetJob(old_id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*job, finished));
  auto results = core_->GetResults(old_id);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ(results->trials_size(), trials);
  auto events = core_->WaitEvents(old_id, 0, 10);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->back().job().state(), v1::SUCCEEDED);
  EXPECT_EQ(*core_->CancelJob(old_id), v1::SUCCEEDED);
  EXPECT_EQ(core_->JobsInMemory(), 1u);  // reading it did not load it
  EXPECT_EQ(core_->GetJob("j-000000000000").status().code(), absl::StatusCode::kNotFound);
  // Retention 0 loads every job.
  options_.job_retention_ms = 0;
  Restart();
  EXPECT_EQ(core_->JobsInMemory(), 2u);
}

CoordinatorOptions ServerOptions(const std::string& dir) {
  CoordinatorOptions o;
  o.listen = "127.0.0.1:0";
  o.data_dir = dir;
  o.metrics_listen = "";
  o.quiet = true;
  return o;
}

TEST(DataDirLockTest, ASecondCoordinatorOnTheSameDataDirFailsNamingTheHolder) {
  const std::string dir = testing::TempDir();
  auto first = StartCoordinator(ServerOptions(dir));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StartCoordinator(ServerOptions(dir));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(second.status().message(), absl::StrCat("pid ", getpid())))
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "host ")) << second.status();
  // The same database named as sqlite:PATH is the same lock.
  CoordinatorOptions by_path = ServerOptions(testing::TempDir());
  by_path.store = "sqlite:" + dir + "/kiln.db";
  EXPECT_EQ(StartCoordinator(by_path).status().code(), absl::StatusCode::kFailedPrecondition);
  (*first)->Shutdown();
  first->reset();  // the lock goes with it
  auto third = StartCoordinator(ServerOptions(dir));
  EXPECT_TRUE(third.ok()) << third.status();
}

// Opens a WatchJob stream and waits for its first event (so the server holds it open).
struct Watch {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
  bool first = false;
};

std::unique_ptr<Watch> OpenWatch(v1::TuningService::Stub& stub, const std::string& job) {
  auto w = std::make_unique<Watch>();
  v1::WatchJobRequest req;
  req.set_job_id(job);
  w->reader = stub.WatchJob(&w->ctx, req);
  v1::JobEvent e;
  w->first = w->reader->Read(&e);
  return w;
}

TEST(WatchLimitTest, WatchStreamsOverTheCapAreRefused) {
  for (const bool per_caller : {true, false}) {
    SCOPED_TRACE(per_caller ? "per caller" : "in all");
    CoordinatorOptions o = ServerOptions(testing::TempDir());
    o.max_watch_streams_per_caller = per_caller ? 2 : 100;
    o.max_watch_streams = per_caller ? 100 : 2;
    auto server = StartCoordinator(o);
    ASSERT_TRUE(server.ok()) << server.status();
    auto stub = v1::TuningService::NewStub(
        grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext submit_ctx;
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = GemmSpec(8, 4);
    v1::SubmitJobResponse submitted;
    ASSERT_TRUE(stub->SubmitJob(&submit_ctx, submit, &submitted).ok());
    auto a = OpenWatch(*stub, submitted.job_id());
    auto b = OpenWatch(*stub, submitted.job_id());
    ASSERT_TRUE(a->first && b->first);
    auto c = OpenWatch(*stub, submitted.job_id());
    EXPECT_FALSE(c->first);
    grpc::Status refused = c->reader->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "limit of 2"))
        << refused.error_message();
    a->ctx.TryCancel();  // a closed stream gives its place back
    a->reader->Finish();
    bool reopened = false;
    for (int i = 0; i < 50 && !reopened; ++i) {
      auto d = OpenWatch(*stub, submitted.job_id());
      reopened = d->first;
      d->ctx.TryCancel();
      d->reader->Finish();
      if (!reopened) usleep(100'000);
    }
    EXPECT_TRUE(reopened);
    b->ctx.TryCancel();
    b->reader->Finish();
    (*server)->Shutdown();
  }
}

}  // namespace
}  // namespace kiln::server
