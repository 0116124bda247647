#include "server/coordinator.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/export.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using testing::ConfigLetters;
using testing::CpuChip;
using testing::CpuRegistration;
using testing::GemmSpec;
using testing::LeaseRequest;
using testing::MambaSpec;
using testing::Ok;
using testing::ReportRequest;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir();
    store_ = *OpenStore("", dir_);
    Restart();
  }

  // A fresh core over the same store, as after kill -9 of the coordinator.
  void Restart() {
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, nullptr, options_);
    ASSERT_TRUE(core_->Recover().ok());
  }

  // Without final rounds unless a test turns them on (they add trials to every count).
  static CoreOptions TestOptions() {
    CoreOptions o{5000, 1000, 1000, 1};
    o.final_rounds = 0;
    return o;
  }

  std::string RegisterWorker(const std::string& id = "") {
    auto resp = core_->Register(CpuRegistration(id), "");
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->worker_id();
  }

  std::vector<v1::Trial> Lease(const std::string& worker, int n = 1) {
    auto resp = core_->LeaseTrials(LeaseRequest(worker, n), "");
    EXPECT_TRUE(resp.ok()) << resp.status();
    return {resp->trials().begin(), resp->trials().end()};
  }

  v1::ReportResultsResponse Report(const std::string& worker, const v1::Trial& t,
                                   v1::Measurement m) {
    auto resp = core_->ReportResults(ReportRequest(worker, t, std::move(m)), "");
    EXPECT_TRUE(resp.ok()) << resp.status();
    return *resp;
  }

  // Leases and answers trials until the job stops handing any out; returns trials run.
  int Drain(const std::string& worker, double base_us = 100) {
    int n = 0;
    for (auto ts = Lease(worker); !ts.empty(); ts = Lease(worker))
      for (const auto& t : ts) Report(worker, t, Ok(base_us + n++));
    return n;
  }

  CoreOptions options_ = TestOptions();
  FakeClock clock_;
  std::string dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> core_;
};

// Results that come back before the first new best is confirmed (a fleet's first wave): each is
// re-measured only if it beats every candidate still awaiting its re-measurement as well.
TEST_F(CoordinatorTest, AWaveOfFirstResultsReMeasuresOnlyTheCandidatesThatBeatTheOthers) {
  auto id = core_->SubmitJob(GemmSpec(8, 6));
  ASSERT_TRUE(id.ok());
  std::string w = RegisterWorker();
  auto ts = Lease(w, 7);  // the baseline and all six configurations
  ASSERT_EQ(ts.size(), 7u);
  const std::vector<double> us = {500, 100, 90, 95, 80, 85, 79};  // the baseline first
  for (size_t i = 0; i < ts.size(); ++i) Report(w, ts[i], Ok(us[i]));
  std::vector<v1::Trial> again = Lease(w, 8);
  std::vector<double> confirming;
  for (const v1::Trial& t : again) {
    ASSERT_EQ(t.kind(), v1::REMEASURE);
    for (size_t i = 1; i < ts.size(); ++i)
      if (google::protobuf::util::MessageDifferencer::Equals(ts[i].config(), t.config()))
        confirming.push_back(us[i]);
  }
  ASSERT_EQ(confirming, (std::vector<double>{100, 90, 80, 79}));  // not 95, not 85
  for (size_t i = 0; i < again.size(); ++i) Report(w, again[i], Ok(confirming[i]));
  EXPECT_EQ(Drain(w), 0);
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, BadSpecsAreRefusedAndNothingIsWritten) {
  auto bad = GemmSpec(0, 8);
  auto s = core_->SubmitJob(bad);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("M=0"), std::string::npos) << s.status();
  auto spec = GemmSpec(8, 8);
  spec.set_strategy("magic");
  EXPECT_EQ(core_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec = GemmSpec(8, 1000000);
  EXPECT_NE(core_->SubmitJob(spec).status().message().find("budget_trials"), std::string::npos);
  spec = GemmSpec(8, 8);
  spec.mutable_workload()->set_op(v1::OP_KIND_UNSPECIFIED);
  EXPECT_EQ(core_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec = GemmSpec(8, 8);
  (*spec.mutable_pin())["NOPE"] = 1;
  EXPECT_NE(core_->SubmitJob(spec).status().message().find("NOPE"), std::string::npos);
  EXPECT_TRUE(core_->ListJobs(0)->empty());
  EXPECT_TRUE(store_->LoadJobs()->empty());
  EXPECT_EQ(core_->GetJob("not-an-id").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->GetJob("j-000000000000").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, JobRunsBaselineThenBudgetThenSucceeds) {
  auto id = core_->SubmitJob(GemmSpec(8, 5));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::QUEUED);
  std::string w = RegisterWorker();
  auto first = Lease(w);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].kind(), v1::BASELINE);
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::RUNNING);
  Report(w, first[0], Ok(500));
  // 5 configurations; the first (100 us) is a new best, re-measured once (101 us) before it
  // is reported; the later ones are slower.
  EXPECT_EQ(Drain(w), 6);
  auto job = *core_->GetJob(*id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.message();
  EXPECT_EQ(job.chip_type(), "cpu-x86_64-avx2");
  EXPECT_EQ(job.tasks(0).trials_ok(), 5);
  EXPECT_DOUBLE_EQ(job.tasks(0).best().median_us(), 101);
  EXPECT_EQ(job.tasks(0).baseline_name(), "openblas-sgemm");
  auto results = *core_->GetResults(*id);
  EXPECT_EQ(results.trials_size(), 7);
  EXPECT_EQ(results.trials(2).kind(), v1::REMEASURE);
  // The finished job's trials leave memory at the next tick; its results read them back.
  EXPECT_EQ(core_->TrialsInMemory(), 7u);
  core_->Tick();
  EXPECT_EQ(core_->TrialsInMemory(), 0u);
  auto again = *core_->GetResults(*id);
  ASSERT_EQ(again.trials_size(), 7);
  for (int i = 0; i < 7; ++i)
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(again.trials(i), results.trials(i)))
        << i;
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::SUCCEEDED);
  // Racing: tuning trials leased after a best exists carry it; the first one, with no best to
  // beat, carries +infinity (any result is a new best: timed briefly, re-measured in full); the
  // re-measure carries nothing.
  EXPECT_EQ(results.trials(1).race_us(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(results.trials(2).race_us(), 0);
  EXPECT_DOUBLE_EQ(results.trials(3).race_us(), 101);
  std::set<std::string> configs;
  for (const auto& t : results.trials())
    if (t.kind() == v1::TUNE) {
      EXPECT_TRUE(configs.insert(t.config().DebugString()).second);
    }
}

// Memory follows the active work: beyond finished_jobs_in_memory, the oldest finished jobs leave
// memory at the next tick and every read (list, job, results, extend) finds them in the store.
TEST_F(CoordinatorTest, OldFinishedJobsLeaveMemoryAndAreReadFromTheStore) {
  options_.finished_jobs_in_memory = 1;
  Restart();
  const std::string w = RegisterWorker();
  std::vector<std::string> ids;
  std::map<std::string, int> trials;  // as read while the job was in memory
  for (int i = 0; i < 3; ++i) {
    auto id = core_->SubmitJob(GemmSpec(8, 3));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    EXPECT_GT(Drain(w), 0);
    trials[*id] = core_->GetResults(*id)->trials_size();
    clock_.Advance(10);
    core_->Tick();
  }
  EXPECT_EQ(core_->JobsInMemory(), 1u);
  auto listed = core_->ListJobs(0);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_EQ((*listed)[0].id(), ids[2]);  // newest first, the one in memory among them
  EXPECT_EQ((*listed)[2].id(), ids[0]);
  EXPECT_EQ(core_->ListJobs(2)->size(), 2u);
  for (const std::string& id : ids) {
    EXPECT_EQ(core_->GetJob(id)->state(), v1::SUCCEEDED) << id;
    auto results = core_->GetResults(id);
    ASSERT_TRUE(results.ok()) << results.status();
    EXPECT_EQ(results->trials_size(), trials[id]) << id;
  }
  auto events = core_->WaitEvents(ids[0], 0, 0);  // a watcher gets the final snapshot
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_FALSE(events->empty());
  EXPECT_EQ(events->back().job().state(), v1::SUCCEEDED);
  EXPECT_EQ(core_->CancelJob(ids[0]).value_or(v1::JOB_STATE_UNSPECIFIED), v1::SUCCEEDED);
  v1::JobSpec extend;
  extend.set_extend_job_id(ids[0]);
  extend.set_budget_trials(2);
  EXPECT_TRUE(core_->SubmitJob(extend).ok());
}

// A task measures its template's starting configurations first, then its strategy's proposals;
// a starting configuration that breaks a pin is skipped.
// A job is validated before it is bound to a chip: a knob that only some chips' spaces have
// (attention decode's VEC, on AVX-512) can be pinned; a knob no chip has cannot.
TEST_F(CoordinatorTest, PinsOfKnobsThatOnlySomeChipsHaveAreAccepted) {
  v1::JobSpec spec = GemmSpec(8, 8);
  auto w = codegen::ParseWorkload("attention_decode", "B=1,H=8,KVH=2,D=64,L=64");
  ASSERT_TRUE(w.ok()) << w.status();
  *spec.mutable_workload() = *w;
  (*spec.mutable_pin())["VEC"] = 8;
  EXPECT_TRUE(core_->SubmitJob(spec).ok());
  (*spec.mutable_pin())["NOPE"] = 1;
  auto refused = core_->SubmitJob(spec);
  EXPECT_NE(refused.status().message().find("no knob NOPE"), std::string::npos) << refused.status();
}

TEST_F(CoordinatorTest, TasksStartFromTheTemplatesStartingConfigs) {
  auto spec = GemmSpec(8, 5);
  auto id = core_->SubmitJob(spec);
  ASSERT_TRUE(id.ok());
  std::string w = RegisterWorker();
  Report(w, Lease(w).at(0), Ok(500));  // the baseline
  auto tmpl = *codegen::FindTemplate(spec.workload(), "cpu");
  const auto starts =
      tmpl->StartingConfigs(spec.workload(), codegen::TraitsFromFingerprint(CpuChip()));
  ASSERT_FALSE(starts.empty());
  auto first = Lease(w).at(0);
  EXPECT_EQ(first.kind(), v1::TUNE);
  EXPECT_EQ(codegen::FromProto(first.config()), starts[0]);

  auto pinned = GemmSpec(8, 3);
  (*pinned.mutable_pin())["UNROLL"] = starts[0].at("UNROLL") == 1 ? 2 : 1;
  pinned.set_priority(10);
  ASSERT_TRUE(core_->SubmitJob(pinned).ok());
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    for (const auto& t : ts) {
      if (t.job_id() != *id && t.kind() == v1::TUNE) {
        EXPECT_EQ(t.config().knobs().at("UNROLL"), pinned.pin().at("UNROLL"));
      }
      Report(w, t, Ok(200));
    }
  }
}

// exclude and range narrow the space the job's strategy and starting configurations draw from.
TEST_F(CoordinatorTest, ExcludesAndRangesNarrowTheSearch) {
  auto spec = GemmSpec(8, 8);
  (*spec.mutable_exclude())["UNROLL"].add_values(1);
  (*spec.mutable_exclude())["UNROLL"].add_values(2);
  (*spec.mutable_range())["MR"].set_lo(1);
  (*spec.mutable_range())["MR"].set_hi(4);
  auto id = core_->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::string w = RegisterWorker();
  int tuned = 0;
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    for (const auto& t : ts) {
      if (t.kind() == v1::TUNE) {
        ++tuned;
        EXPECT_GE(t.config().knobs().at("UNROLL"), 4) << t.config().DebugString();
        EXPECT_LE(t.config().knobs().at("MR"), 4) << t.config().DebugString();
      }
      Report(w, t, Ok(200 - tuned));
    }
  }
  EXPECT_GT(tuned, 0);
  EXPECT_EQ(core_->GetJob(*id)->state(), v1::SUCCEEDED) << core_->GetJob(*id)->message();
}

TEST_F(CoordinatorTest, ReportsAreIdempotentPerAttempt) {
  auto id = core_->SubmitJob(GemmSpec(8, 2));
  std::string w = RegisterWorker();
  auto t = Lease(w).at(0);
  EXPECT_EQ(Report(w, t, Ok(10)).accepted(), 1);
  EXPECT_EQ(Report(w, t, Ok(10)).duplicates(), 1);
  t.set_attempt(7);  // an attempt never leased: not the lease holder's report
  EXPECT_EQ(Report(w, t, Ok(10)).refused(), 1);
}

TEST_F(CoordinatorTest, SilentWorkersLeaseExpiresAndTheTrialIsRequeued) {
  auto id = core_->SubmitJob(GemmSpec(8, 2));
  std::string w1 = RegisterWorker();
  auto t = Lease(w1).at(0);
  EXPECT_EQ(t.attempt(), 1);
  clock_.Advance(6000);  // past the 5 s lease without a heartbeat
  core_->Tick();
  std::string w2 = RegisterWorker();
  auto again = Lease(w2).at(0);
  EXPECT_EQ(again.id(), t.id());
  EXPECT_EQ(again.attempt(), 2);
  EXPECT_EQ(Report(w1, t, Ok(10)).stale(), 1);  // the old attempt comes back late
  EXPECT_EQ(Report(w2, again, Ok(10)).accepted(), 1);
}

TEST_F(CoordinatorTest, HeartbeatsKeepLeasesAlive) {
  core_->SubmitJob(GemmSpec(8, 2)).IgnoreError();
  std::string w = RegisterWorker();
  auto t = Lease(w).at(0);
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(3000);
    v1::HeartbeatRequest hb;
    hb.set_worker_id(w);
    EXPECT_TRUE(core_->Heartbeat(hb, "")->known());
    core_->Tick();
  }
  EXPECT_EQ(Report(w, t, Ok(10)).accepted(), 1);
}

// A second job on a tuned workload times the best known configurations again first (half its
// budget at most, fresh TUNE trials, not answered from their records); its other proposals that
// were measured before are answered from the store, and count against its budget as any trial.
TEST_F(CoordinatorTest, MeasuredConfigsAreAnsweredFromTheStore) {
  auto a = *core_->SubmitJob(GemmSpec(8, 4));
  std::string w = RegisterWorker();
  Drain(w);
  ASSERT_EQ(core_->GetJob(a)->state(), v1::SUCCEEDED);
  const v1::Job done = *core_->GetJob(a);
  auto top = *store_->TopRecords(done.tasks(0).workload_key(), done.chip_type(), 2);
  ASSERT_EQ(top.size(), 2u);
  auto b = *core_->SubmitJob(GemmSpec(8, 4));  // same seed, same workload, same chip
  int measured = Drain(w);
  // The baseline, the two best known configurations, and the first one's re-measurement (a
  // new best); the two others came from the records.
  EXPECT_EQ(measured, 4);
  auto r = *core_->GetResults(b);
  EXPECT_EQ(r.job().state(), v1::SUCCEEDED);
  EXPECT_EQ(r.job().tasks(0).trials_ok(), 4);
  EXPECT_EQ(r.job().tasks(0).trials_from_earlier_jobs(), 4);
  std::vector<const v1::Trial*> tune;
  for (const auto& t : r.trials())
    if (t.kind() == v1::TUNE) tune.push_back(&t);
  ASSERT_EQ(tune.size(), 4u);    // exactly the budget
  for (int i = 0; i < 2; ++i) {  // the best known first, fastest first, measured again
    EXPECT_EQ(tune[i]->config().DebugString(), top[i].config().DebugString()) << i;
    EXPECT_FALSE(tune[i]->measurement().from_cache()) << i;
  }
  for (int i = 2; i < 4; ++i) EXPECT_TRUE(tune[i]->measurement().from_cache()) << i;
  // Drain's figures grow with every trial: job a's best stays the best, found by job a.
  EXPECT_EQ(r.job().tasks(0).best_config().DebugString(), top[0].config().DebugString());
  EXPECT_EQ(r.job().tasks(0).best_from_job(), a);
}

// Figures that depend only on the configuration (the same machine, no noise): a second job with
// another seed, whose strategy proposes other configurations, still ends with a best no worse
// than the first job's, because it times the best known configurations again first.
TEST_F(CoordinatorTest, ASecondJobOnATunedWorkloadIsNotWorse) {
  auto figure = [](const v1::Config& c) {  // 100..199.999 us, fixed per configuration
    return 100 + static_cast<double>(
                     std::hash<std::string>()(codegen::ConfigKey(codegen::FromProto(c))) % 100000) /
                     1000;
  };
  std::string w = RegisterWorker();
  auto run = [&](v1::JobSpec spec) {
    auto id = core_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    for (auto ts = Lease(w); !ts.empty(); ts = Lease(w))
      for (const auto& t : ts)
        Report(w, t, Ok(t.kind() == v1::BASELINE ? 500 : figure(t.config())));
    return *core_->GetResults(*id);
  };
  auto spec = GemmSpec(8, 8);
  spec.set_strategy("random");
  v1::GetResultsResponse previous = run(spec);
  ASSERT_EQ(previous.job().state(), v1::SUCCEEDED);
  for (uint64_t seed : {7, 1234, 99999}) {
    spec.set_seed(seed);
    const v1::GetResultsResponse again = run(spec);
    ASSERT_EQ(again.job().state(), v1::SUCCEEDED) << again.job().message();
    const v1::TaskResult& task = again.job().tasks(0);
    const v1::TaskResult& before = previous.job().tasks(0);
    EXPECT_LE(task.best().median_us(), before.best().median_us()) << seed;
    EXPECT_EQ(task.trials_ok() + task.trials_failed(), 8) << seed;  // the budget, exactly
    // Its first TUNE trial is the best known configuration, leased as a fresh TUNE trial.
    for (const auto& t : again.trials())
      if (t.kind() == v1::TUNE) {
        EXPECT_EQ(t.config().DebugString(), before.best_config().DebugString()) << seed;
        EXPECT_FALSE(t.measurement().from_cache()) << seed;
        break;
      }
    EXPECT_GE(task.trials_from_earlier_jobs(), 1) << seed;
    if (task.best_config().DebugString() == before.best_config().DebugString()) {
      EXPECT_FALSE(task.best_from_job().empty()) << seed;
    }
    previous = again;
  }
}

// kiln submit --extend JOB: a new job with JOB's spec and a new budget, starting from JOB's best
// configurations; only a finished job, and only its own workload.
TEST_F(CoordinatorTest, ExtendContinuesAFinishedJob) {
  auto a = *core_->SubmitJob(GemmSpec(8, 4));
  v1::JobSpec extend;
  extend.set_extend_job_id(a);
  extend.set_budget_trials(3);
  auto running = core_->SubmitJob(extend);  // job a has not finished
  EXPECT_EQ(running.status().code(), absl::StatusCode::kFailedPrecondition) << running.status();
  std::string w = RegisterWorker();
  Drain(w);
  const v1::Job done = *core_->GetJob(a);
  ASSERT_EQ(done.state(), v1::SUCCEEDED);

  v1::JobSpec other = GemmSpec(16, 3);  // another workload is not a continuation
  other.set_extend_job_id(a);
  auto refused = core_->SubmitJob(other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("extend_job_id"), std::string::npos);
  v1::JobSpec unknown = extend;
  unknown.set_extend_job_id("j-000000000000");
  EXPECT_EQ(core_->SubmitJob(unknown).status().code(), absl::StatusCode::kNotFound);
  v1::JobSpec same = GemmSpec(8, 3);  // the whole spec again is fine
  same.set_extend_job_id(a);
  EXPECT_TRUE(core_->SubmitJob(same).ok());
  Drain(w, 300);

  auto b = core_->SubmitJob(extend);
  ASSERT_TRUE(b.ok()) << b.status();
  const v1::Job queued = *core_->GetJob(*b);
  EXPECT_EQ(queued.spec().extend_job_id(), a);
  EXPECT_EQ(queued.spec().workload().DebugString(), done.spec().workload().DebugString());
  EXPECT_EQ(queued.spec().chip(), "cpu");
  EXPECT_EQ(queued.tasks(0).trials_budget(), 3);
  Drain(w, 300);  // slower than job a's figures: job a's best stays the best
  auto r = *core_->GetResults(*b);
  EXPECT_EQ(r.job().state(), v1::SUCCEEDED);
  const v1::Trial* first = nullptr;
  for (const auto& t : r.trials())
    if (t.kind() == v1::TUNE && !first) first = &t;
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->config().DebugString(), done.tasks(0).best_config().DebugString());
  EXPECT_FALSE(first->measurement().from_cache());
  EXPECT_EQ(r.job().tasks(0).trials_ok(), 3);
  EXPECT_GE(r.job().tasks(0).trials_from_earlier_jobs(), 1);
}

// A record answers a proposal only while the template renders the same kernel for it: after a
// template change (simulated by rewriting the records' digests) the configurations are measured
// again and their records replaced.
TEST_F(CoordinatorTest, RecordsOfAnOlderKernelAreMeasuredAgain) {
  auto a = *core_->SubmitJob(GemmSpec(8, 4));
  std::string w = RegisterWorker();
  Drain(w);
  const v1::Job done = *core_->GetJob(a);
  ASSERT_EQ(done.state(), v1::SUCCEEDED);
  const std::string key = done.tasks(0).workload_key();
  auto records = *store_->TopRecords(key, done.chip_type(), 100);
  ASSERT_EQ(records.size(), 4u);
  std::map<std::string, std::string> digest;  // config key -> the digest of today's kernel
  WriteBatch older;
  for (auto r : records) {
    EXPECT_FALSE(r.kernel_digest().empty()) << r.config_key();
    // The provenance the worker reported: the measured kernel's source hash and toolchain.
    EXPECT_EQ(r.source_hash().rfind("hash-" + r.job_id(), 0), 0u) << r.source_hash();
    EXPECT_EQ(r.toolchain(), "c++ -O3 -march=native");
    digest[r.config_key()] = r.kernel_digest();
    r.set_kernel_digest("digest-of-an-older-template");
    older.records.push_back(r);
  }
  ASSERT_TRUE(store_->Write(older).ok());

  auto b = *core_->SubmitJob(GemmSpec(8, 4));  // the same proposals as job a
  EXPECT_GE(Drain(w), 5);                      // the baseline and all four configurations
  auto job = *core_->GetJob(b);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.tasks(0).trials_ok(), 4);
  EXPECT_FALSE(job.tasks(0).best().from_cache());
  auto remeasured = store_->TopRecords(key, done.chip_type(), 100);
  ASSERT_TRUE(remeasured.ok());
  ASSERT_EQ(remeasured->size(), 4u);
  for (const auto& r : *remeasured)
    EXPECT_EQ(r.kernel_digest(), digest[r.config_key()]) << r.config_key();
}

TEST_F(CoordinatorTest, JobSurvivesARestartWithEveryTrialOnce) {
  auto id = *core_->SubmitJob(GemmSpec(8, 6));
  std::string w = RegisterWorker();
  auto b = Lease(w).at(0);
  Report(w, b, Ok(500));
  auto t1 = Lease(w).at(0);
  Report(w, t1, Ok(50));
  auto t2 = Lease(w).at(0);  // leased when the coordinator dies
  Restart();
  EXPECT_EQ(core_->GetJob(id)->state(), v1::RUNNING);
  EXPECT_EQ(Report(w, t2, Ok(40)).accepted(), 1);  // the worker reports after reconnecting
  Drain(w);
  auto r = *core_->GetResults(id);
  EXPECT_EQ(r.job().state(), v1::SUCCEEDED);
  EXPECT_EQ(r.job().tasks(0).trials_ok(), 6);
  std::set<std::string> ids, configs;
  for (const auto& t : r.trials()) {
    EXPECT_EQ(t.state(), v1::DONE);
    EXPECT_TRUE(ids.insert(t.id()).second);
    if (t.kind() == v1::TUNE) {
      EXPECT_TRUE(configs.insert(t.config().DebugString()).second);
    }
  }
  EXPECT_EQ(configs.size(), 6u);
}

// Final rounds: the configuration that a lucky moment made fastest once (A) loses to the one
// fastest when all are timed in turns (B), even in a round where the host ran at half speed; a
// configuration outside 1.5x of the fastest (D) is no contender, one that fails a round (C) is
// out; the rounds survive a restart of the coordinator.
TEST_F(CoordinatorTest, FinalRoundsPickTheFastestTimedInTurns) {
  options_.final_rounds = 3;
  options_.finalists = 3;
  Restart();
  auto id = *core_->SubmitJob(GemmSpec(8, 4));
  std::string w = RegisterWorker();
  ConfigLetters letter;  // configurations in the order they were first tuned: A, B, C, D
  const std::vector<std::string>& seen = letter.keys();
  std::vector<int> final_order;
  auto answer = [&](const v1::Trial& t) {
    if (t.kind() == v1::BASELINE) return Ok(500);
    const int x = letter(t);
    if (t.kind() != v1::FINAL) return Ok(std::vector<double>{100, 110, 120, 200}.at(x));
    final_order.push_back(x);
    if (x == 2 && t.final_round() == 2) {
      v1::Measurement crashed;
      crashed.set_status(v1::CRASHED);
      return crashed;
    }
    const double slow = t.final_round() == 2 ? 2 : 1;  // the host at half speed in round 2
    return Ok(slow * std::vector<double>{130, 105, 125}.at(x));
  };
  bool restarted = false;
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    Report(w, ts[0], answer(ts[0]));
    if (final_order.size() == 4 && !restarted) Restart(), restarted = true;
  }
  ASSERT_TRUE(restarted);
  auto r = *core_->GetResults(id);
  const v1::TaskResult& task = r.job().tasks(0);
  ASSERT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(final_order, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1, 2}));  // in turns, no repeats
  EXPECT_EQ(task.final_trials(), 9);
  EXPECT_EQ(task.final_trials_done(), 9);
  EXPECT_EQ(task.trials_ok(), 4);  // finals are not budget trials
  ASSERT_EQ(task.finalists_size(), 3);
  EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(task.finalists(0).config())), seen[1]);
  EXPECT_DOUBLE_EQ(task.finalists(0).score(), 1.0);
  EXPECT_EQ(std::vector<double>(task.finalists(0).round_median_us().begin(),
                                task.finalists(0).round_median_us().end()),
            (std::vector<double>{105, 210, 105}));
  EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(task.finalists(1).config())), seen[0]);
  EXPECT_NEAR(task.finalists(1).score(), 130.0 / 105, 1e-9);
  EXPECT_TRUE(task.finalists(2).failed());
  EXPECT_EQ(task.finalists(2).round_median_us(1), 0);
  EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(task.best_config())), seen[1]);
  EXPECT_DOUBLE_EQ(task.best().median_us(), 105);  // its median round
  // The finalists' records carry their final rounds: B's median round heads the store (A's lucky
  // 100 is gone), and C, which crashed, is no longer an OK record.
  auto records = *store_->TopRecords(task.workload_key(), r.job().chip_type(), 10);
  ASSERT_EQ(records.size(), 3u);  // A, B and D
  EXPECT_EQ(records[0].config_key(), seen[1]);
  EXPECT_DOUBLE_EQ(records[0].measurement().median_us(), 105);
  EXPECT_EQ(records[1].config_key(), seen[0]);
  EXPECT_DOUBLE_EQ(records[1].measurement().median_us(), 130);
}

// The task's fastest baseline route is timed once more in each final round, after the round's
// finalists, and the baseline becomes its median over those rounds: the first figure, taken when
// the task started, may come from another moment of a host whose memory bandwidth moves.
TEST_F(CoordinatorTest, TheFastestBaselineRouteIsTimedInTheFinalRounds) {
  options_.final_rounds = 3;
  options_.finalists = 2;
  Restart();
  auto id = *core_->SubmitJob(GemmSpec(8, 3));
  std::string w = RegisterWorker();
  std::vector<std::string> order;  // "F<round>" / "B<round>" in lease order, finals only
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    const v1::Trial& t = ts[0];
    v1::Measurement m = Ok(100 + t.seq());
    if (t.kind() == v1::BASELINE && t.final_round() == 0) {
      m = Ok(500);  // the first figure, at a fast moment
      for (auto [name, threads, us] :
           {std::tuple{"openblas-sgemv", 2, 500.0}, std::tuple{"openblas-sgemv", 1, 900.0},
            std::tuple{"onednn-packed", 2, 700.0}}) {
        v1::BaselineRoute* r = m.add_baseline_routes();
        r->set_name(name);
        r->set_threads(threads);
        r->set_status(v1::OK);
        r->set_median_us(us);
      }
    } else if (t.kind() == v1::BASELINE) {
      EXPECT_EQ(t.baseline_route().name(), "openblas-sgemv");
      EXPECT_EQ(t.baseline_route().threads(), 2);
      m = Ok(600 + 10 * t.final_round());  // beside the finalists, at a slower moment
      order.push_back("B" + std::to_string(t.final_round()));
    } else if (t.kind() == v1::FINAL) {
      order.push_back("F" + std::to_string(t.final_round()));
    }
    Report(w, t, m);
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"F1", "F1", "B1", "F2", "F2", "B2", "F3", "F3", "B3"}));
  auto r = *core_->GetResults(id);
  const v1::TaskResult& task = r.job().tasks(0);
  ASSERT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
  EXPECT_EQ(task.final_trials(), 9);
  EXPECT_EQ(task.final_trials_done(), 9);
  EXPECT_DOUBLE_EQ(task.baseline().median_us(), 620);    // the rounds' median, not the first 500
  EXPECT_EQ(task.baseline().baseline_routes_size(), 3);  // every route's first figure stays
  EXPECT_THAT(task.baseline().message(), ::testing::HasSubstr("first timed 500.0 us"));
}

// A job whose finalists all fail a final round has no best it can stand behind: it fails and
// says why.
TEST_F(CoordinatorTest, AJobWhoseFinalistsAllFailFails) {
  options_.final_rounds = 2;
  Restart();
  auto id = *core_->SubmitJob(GemmSpec(8, 3));
  std::string w = RegisterWorker();
  int finals = 0;
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    v1::Measurement m = Ok(100 + ts[0].seq());
    if (ts[0].kind() == v1::FINAL) {
      ++finals;
      m.set_status(v1::WRONG_RESULT);
    }
    Report(w, ts[0], m);
  }
  EXPECT_EQ(finals, 6);  // 2 rounds of 3 contenders
  const v1::Job job = *core_->GetJob(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.message().find("failed a final round"), std::string::npos) << job.message();
  EXPECT_FALSE(job.tasks(0).has_best());
  EXPECT_EQ(job.tasks(0).finalists_size(), 3);
}

// Two-sided re-measurement: a new best whose re-measurement is more than 3% slower than its first
// figure was luckier than it is. It is demoted: its record takes the re-measured figure, and the
// task keeps its best confirmed configuration even where the demoted figure is faster. A task
// with no confirmed best takes the demoted figure (the slower one) meanwhile; a re-measurement
// that comes out faster confirms.
TEST_F(CoordinatorTest, ARemeasureThatDoesNotConfirmIsDemoted) {
  auto id = *core_->SubmitJob(GemmSpec(8, 4));
  std::string w = RegisterWorker();
  ConfigLetters letter;  // configurations in the order they were first tuned: A, B, C, D
  const std::vector<std::string>& seen = letter.keys();
  std::vector<double> bests;  // the task's best after each report
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    const v1::Trial& t = ts[0];
    if (t.kind() == v1::BASELINE) {
      Report(w, t, Ok(500));
      continue;
    }
    const int x = letter(t);
    // A: 200 then 220 (+10%); B: 150 then 170 (+13%); C: 160 then 158; D: 120 then 130 (+8%).
    const std::vector<double> first = {200, 150, 160, 120}, again = {220, 170, 158, 130};
    Report(w, t, Ok((t.kind() == v1::REMEASURE ? again : first).at(x)));
    const v1::TaskResult task = core_->GetJob(id)->tasks(0);
    if (t.kind() == v1::REMEASURE) bests.push_back(task.has_best() ? task.best().median_us() : 0);
  }
  ASSERT_EQ(seen.size(), 4u);
  // A (no best yet) stands in with its slower figure; B, demoted as well, replaces it with a
  // faster one; C confirms; D is demoted and C stays the best although D's 130 is faster.
  EXPECT_EQ(bests, (std::vector<double>{220, 170, 158, 158}));
  auto r = *core_->GetResults(id);
  ASSERT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
  const v1::TaskResult& task = r.job().tasks(0);
  EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(task.best_config())), seen[2]);
  EXPECT_FALSE(task.best().demoted());
  std::vector<std::string> messages;
  for (const auto& t : r.trials())
    if (t.kind() == v1::REMEASURE) {
      EXPECT_EQ(t.measurement().demoted(), letter(t) != 2) << letter(t);
      messages.push_back(t.measurement().message());
    }
  EXPECT_EQ(messages, (std::vector<std::string>{
                          "demoted: re-measured 220.0 us vs 200.0 us first (+10.0%)",
                          "demoted: re-measured 170.0 us vs 150.0 us first (+13.3%)", "",
                          "demoted: re-measured 130.0 us vs 120.0 us first (+8.3%)"}));
  // The demoted configurations' records carry their re-measured figures, not the lucky ones.
  std::map<std::string, double> record_us;
  const auto records = *store_->TopRecords(task.workload_key(), r.job().chip_type(), 10);
  for (const auto& rec : records) {
    record_us[rec.config_key()] = rec.measurement().median_us();
    EXPECT_EQ(rec.measurement().demoted(), rec.config_key() != seen[2]) << rec.config_key();
  }
  EXPECT_EQ(record_us, (std::map<std::string, double>{
                           {seen[0], 220}, {seen[1], 170}, {seen[2], 160}, {seen[3], 130}}));
}

// A tuning trial that raced ahead (timed briefly: surely faster than the best) is timed in full
// by its re-measurement, which is its figure: it confirms by still beating the best, however far
// from the brief figure, and its record takes the full figure. A failed re-measurement makes no
// best and its record the failure.
TEST_F(CoordinatorTest, ARacedAheadBestConfirmsByBeatingTheBest) {
  auto id = *core_->SubmitJob(GemmSpec(8, 3));
  std::string w = RegisterWorker();
  ConfigLetters letter;
  const std::vector<std::string>& seen = letter.keys();
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    const v1::Trial& t = ts[0];
    if (t.kind() == v1::BASELINE) {
      Report(w, t, Ok(500));
      continue;
    }
    const int x = letter(t);
    // A: 100 briefly, 120 in full; B: 90 briefly, 125 in full; C: 80, then a wrong result.
    v1::Measurement m = Ok(std::vector<double>{100, 90, 80}.at(x));
    m.set_raced_ahead(x < 2);
    if (t.kind() == v1::REMEASURE) {
      m = Ok(std::vector<double>{120, 125, 80}.at(x));
      if (x == 2) {
        m.set_status(v1::WRONG_RESULT);
        m.set_message("wrong result: out[3] = nan");
      }
    }
    Report(w, t, m);
  }
  auto r = *core_->GetResults(id);
  ASSERT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
  ASSERT_EQ(seen.size(), 3u);
  const v1::TaskResult& task = r.job().tasks(0);
  EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(task.best_config())), seen[0]);
  EXPECT_DOUBLE_EQ(task.best().median_us(), 120);
  EXPECT_FALSE(task.best().demoted());
  int remeasures = 0;
  for (const auto& t : r.trials()) {
    if (t.kind() != v1::REMEASURE) continue;
    ++remeasures;
    if (letter(t) == 1) {
      EXPECT_TRUE(t.measurement().demoted());
      EXPECT_EQ(t.measurement().message(),
                "demoted: re-measured 125.0 us in full, not faster than the best 120.0 us it "
                "raced ahead of (90.0 us timed briefly)");
    }
  }
  EXPECT_EQ(remeasures, 3);
  std::map<std::string, double> record_us;
  const auto records = *store_->TopRecords(task.workload_key(), r.job().chip_type(), 10);
  for (const auto& rec : records) record_us[rec.config_key()] = rec.measurement().median_us();
  // C's record is its failed re-measurement, which TopRecords (OK only) leaves out.
  EXPECT_EQ(record_us, (std::map<std::string, double>{{seen[0], 120}, {seen[1], 125}}));
  auto c = *store_->FindRecord(task.workload_key(), r.job().chip_type(), seen[2]);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->measurement().status(), v1::WRONG_RESULT);
}

// Model jobs' operator tasks get final rounds too, once the shared budget is spent and before the
// composed step, which runs each task's final winner.
// A model task's first trial is its template's first guess where it has one (else its safe
// default): a small budget over many tasks gives some tasks one trial, and the first value of
// every GEMM knob is a 1 x 8 tile over 16 x 64 blocks.
TEST_F(CoordinatorTest, AModelTasksFirstTrialIsItsTemplatesFirstGuess) {
  v1::JobSpec spec = MambaSpec(12);
  auto id = core_->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::string w = RegisterWorker();
  std::map<int, codegen::Config> first;
  for (int guard = 0; guard < 1000; ++guard) {
    auto ts = Lease(w);
    if (ts.empty()) break;
    const v1::Trial& t = ts[0];
    if (t.kind() == v1::TUNE) first.emplace(t.task_index(), codegen::FromProto(t.config()));
    v1::Measurement m = Ok(100);
    if (t.kind() == v1::STEP) m.mutable_step()->set_measured(50);
    Report(w, t, m);
  }
  auto r = *core_->GetResults(*id);
  ASSERT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
  int guessed = 0;
  for (int i = 0; i < r.job().tasks_size(); ++i) {
    const v1::Workload& wl = r.job().tasks(i).workload();
    auto tmpl = codegen::FindTemplate(wl, "cpu");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(CpuChip());
    const auto starts = (*tmpl)->StartingConfigs(wl, traits);
    guessed += !starts.empty();
    ASSERT_TRUE(first.count(i)) << codegen::WorkloadKey(wl) << " got no trial";
    EXPECT_EQ(first[i],
              starts.empty() ? codegen::SafeDefaultConfig((*tmpl)->Space(wl, traits)) : starts[0])
        << codegen::WorkloadKey(wl);
  }
  EXPECT_GT(guessed, 0) << "no task of the model has a template with starting configurations";
}

TEST_F(CoordinatorTest, ModelJobTasksGetFinalRoundsBeforeTheStep) {
  options_.final_rounds = 2;
  options_.finalists = 3;
  Restart();
  v1::JobSpec spec = MambaSpec(30);
  auto id = core_->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  std::string w = RegisterWorker();
  std::map<int, std::vector<std::string>> seen;  // per task, config keys in first-tuned order
  auto order = [&](const v1::Trial& t) {
    auto& keys = seen[t.task_index()];
    const std::string key = codegen::ConfigKey(codegen::FromProto(t.config()));
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it != keys.end()) return static_cast<int>(it - keys.begin());
    keys.push_back(key);
    return static_cast<int>(keys.size()) - 1;
  };
  v1::Trial step;
  int64_t last_final_seq = 0;
  for (int guard = 0; guard < 1000; ++guard) {
    auto ts = Lease(w);
    if (ts.empty()) break;
    const v1::Trial& t = ts[0];
    if (t.kind() == v1::STEP) {
      step = t;
      v1::Measurement m = Ok(1000);
      m.mutable_step()->set_measured(50);
      Report(w, t, m);
    } else if (t.kind() == v1::BASELINE) {
      Report(w, t, Ok(1000));
    } else if (t.kind() == v1::FINAL) {  // timed in turns, the order reverses
      last_final_seq = std::max(last_final_seq, t.seq());
      Report(w, t, Ok(200 - 5 * order(t)));
    } else {  // the first tuned configuration of each task is the fastest once
      Report(w, t, Ok(100 + 5 * order(t)));
    }
  }
  auto r = *core_->GetResults(*id);
  ASSERT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
  ASSERT_EQ(step.kind(), v1::STEP);
  EXPECT_GT(last_final_seq, 0);
  EXPECT_LT(last_final_seq, step.seq());  // every final round before the step
  int with_finals = 0;
  for (int i = 0; i < r.job().tasks_size(); ++i) {
    const v1::TaskResult& task = r.job().tasks(i);
    const std::string best = codegen::ConfigKey(codegen::FromProto(task.best_config()));
    EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(step.step().kernels(i).config())), best) << i;
    if (task.finalists_size() < 2) continue;
    ++with_finals;
    EXPECT_EQ(task.final_trials_done(), 2 * task.finalists_size()) << i;
    // The winner of the rounds, not the configuration that was fastest once.
    EXPECT_EQ(best, codegen::ConfigKey(codegen::FromProto(task.finalists(0).config()))) << i;
    EXPECT_NE(best, seen[i].at(0)) << i;
  }
  EXPECT_GE(with_finals, 1);
  EXPECT_DOUBLE_EQ(r.job().tokens_per_second().measured(), 50);
}

// The composed step's logits are checked against LibTorch's where the coordinator accepts the
// STEP result: beyond the composed tolerance (fp32: 1e-3 of the largest logit) the step is
// refused, its tokens/s is not published, and the job fails saying why.
TEST_F(CoordinatorTest, AStepOutsideTheComposedToleranceIsRefused) {
  std::string w = RegisterWorker();
  for (double max_error : {5e-4, 0.2}) {
    v1::JobSpec spec = MambaSpec(9);
    auto id = core_->SubmitJob(spec);
    ASSERT_TRUE(id.ok()) << id.status();
    for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
      v1::Measurement m = Ok(100);
      if (ts[0].kind() == v1::STEP) {
        m.mutable_step()->set_measured(123);
        m.mutable_step()->set_baseline_measured(45);
        m.mutable_step()->set_max_error(max_error);
      }
      Report(w, ts[0], m);
    }
    auto r = *core_->GetResults(*id);
    const v1::Trial* step = nullptr;
    for (const auto& t : r.trials())
      if (t.kind() == v1::STEP) step = &t;
    ASSERT_NE(step, nullptr) << max_error << " " << v1::JobState_Name(r.job().state()) << " "
                             << r.job().message();
    const v1::StepResult& tps = r.job().tokens_per_second();
    EXPECT_DOUBLE_EQ(tps.baseline_measured(), 45);
    EXPECT_DOUBLE_EQ(tps.max_error(), max_error);
    if (max_error < 1e-3) {
      EXPECT_EQ(r.job().state(), v1::SUCCEEDED) << r.job().message();
      EXPECT_EQ(step->measurement().status(), v1::OK);
      EXPECT_DOUBLE_EQ(tps.measured(), 123);
      continue;
    }
    EXPECT_EQ(r.job().state(), v1::FAILED);
    EXPECT_NE(r.job().message().find("max_error 0.2 > tolerance 0.001"), std::string::npos)
        << r.job().message();
    EXPECT_EQ(step->measurement().status(), v1::WRONG_RESULT);
    EXPECT_NE(step->measurement().message().find("max_error 0.2 > tolerance 0.001 (fp32"),
              std::string::npos)
        << step->measurement().message();
    EXPECT_EQ(tps.measured(), 0);  // not published
    EXPECT_NE(tps.note().find("max_error 0.2"), std::string::npos) << tps.note();
  }
}

TEST_F(CoordinatorTest, CancelStopsTheJob) {
  auto id = *core_->SubmitJob(GemmSpec(8, 6));
  EXPECT_EQ(*core_->CancelJob(id), v1::CANCELLED);
  std::string w = RegisterWorker();
  EXPECT_TRUE(Lease(w).empty());
  auto events = *core_->WaitEvents(id, 0, 0);
  EXPECT_EQ(events.back().job().state(), v1::CANCELLED);
}

TEST_F(CoordinatorTest, TrialsGoOnlyToMatchingChipTypes) {
  auto spec = GemmSpec(8, 2);
  spec.set_chip("opencl");
  auto id = *core_->SubmitJob(spec);
  EXPECT_TRUE(Lease(RegisterWorker()).empty());
  EXPECT_EQ(core_->GetJob(id)->state(), v1::QUEUED);
}

TEST_F(CoordinatorTest, AllFailedTrialsFailTheJob) {
  auto id = *core_->SubmitJob(GemmSpec(8, 3));
  std::string w = RegisterWorker();
  for (auto ts = Lease(w); !ts.empty(); ts = Lease(w)) {
    v1::Measurement m;
    m.set_status(ts[0].kind() == v1::BASELINE ? v1::OK : v1::CRASHED);
    m.set_median_us(1);
    m.add_samples_us(1);
    Report(w, ts[0], m);
  }
  auto job = *core_->GetJob(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.message().find("passed verification"), std::string::npos);
}

TEST_F(CoordinatorTest, TimeBudgetEndsTheJob) {
  auto spec = GemmSpec(8, 50);
  spec.set_max_seconds(2);
  auto id = *core_->SubmitJob(spec);
  std::string w = RegisterWorker();
  auto b = Lease(w).at(0);
  Report(w, b, Ok(500));
  Report(w, Lease(w).at(0), Ok(30));
  clock_.Advance(2500);
  core_->Tick();
  auto job = *core_->GetJob(id);
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_NE(job.message().find("time budget"), std::string::npos);
}

TEST_F(CoordinatorTest, UnknownWorkerMustRegister) {
  v1::LeaseTrialsRequest r;
  r.set_worker_id("w-00000000abcd");
  EXPECT_EQ(core_->LeaseTrials(r, "").status().code(), absl::StatusCode::kNotFound);
  r.set_worker_id("bogus");
  EXPECT_EQ(core_->LeaseTrials(r, "").status().code(), absl::StatusCode::kInvalidArgument);
}

// A job that no live worker can run says why in Job.waiting, with an event each time that
// changes: at submit, when a worker of another type registers, when its worker falls silent and
// when one is back; a finished job waits for nothing.
TEST_F(CoordinatorTest, AJobNoLiveWorkerCanRunSaysSo) {
  auto spec = GemmSpec(8, 2);
  spec.set_chip("opencl");
  auto opencl = *core_->SubmitJob(spec);
  EXPECT_EQ(core_->GetJob(opencl)->waiting(),
            "no live worker matches chip 'opencl'; no worker is live");
  EXPECT_EQ(core_->WaitEvents(opencl, 0, 0)->back().job().waiting(),
            "no live worker matches chip 'opencl'; no worker is live");
  std::string w = RegisterWorker();
  EXPECT_EQ(core_->GetJob(opencl)->waiting(),
            "no live worker matches chip 'opencl'; live: cpu-x86_64-avx2");
  auto cpu = *core_->SubmitJob(GemmSpec(8, 2));
  EXPECT_EQ(core_->GetJob(cpu)->waiting(), "");
  ASSERT_EQ(Lease(w).size(), 1u);  // binds the cpu job to the worker's type
  int64_t seq = core_->WaitEvents(cpu, 0, 0)->back().seq();
  clock_.Advance(6000);  // silent past the 5 s liveness window
  core_->Tick();
  EXPECT_EQ(core_->GetJob(cpu)->waiting(),
            "no live worker of chip type 'cpu-x86_64-avx2' (the job is bound to it); no worker "
            "is live");
  auto events = *core_->WaitEvents(cpu, seq, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_NE(events.back().job().waiting(), "");
  seq = events.back().seq();
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  ASSERT_TRUE(core_->Heartbeat(hb, "")->known());
  core_->Tick();
  EXPECT_EQ(core_->GetJob(cpu)->waiting(), "");
  events = *core_->WaitEvents(cpu, seq, 0);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().job().waiting(), "");
  ASSERT_EQ(*core_->CancelJob(opencl), v1::CANCELLED);
  EXPECT_EQ(core_->GetJob(opencl)->waiting(), "");
  core_->Tick();
  EXPECT_EQ(core_->GetJob(opencl)->waiting(), "");
}

// A stopping worker deregisters: gone from ListWorkers and the store at once, its leases
// requeued for the next worker, its jobs waiting again. Only its own credential may do it.
TEST_F(CoordinatorTest, DeregisterForgetsTheWorkerAtOnce) {
  auto id = *core_->SubmitJob(GemmSpec(8, 3));
  auto reg = core_->Register(testing::CpuRegistration(), "lab-1");
  ASSERT_TRUE(reg.ok()) << reg.status();
  const std::string w = reg->worker_id();
  auto leased = core_->LeaseTrials(LeaseRequest(w, 1), "lab-1");
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_EQ(leased->trials_size(), 1);
  const v1::Trial t = leased->trials(0);
  v1::DeregisterRequest req;
  req.set_worker_id(w);
  EXPECT_EQ(core_->Deregister(req, "lab-2").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core_->ListWorkers().size(), 1u);
  ASSERT_TRUE(core_->Deregister(req, "lab-1").ok());
  EXPECT_TRUE(core_->ListWorkers().empty());
  EXPECT_TRUE(store_->LoadWorkers()->empty());
  EXPECT_NE(core_->GetJob(id)->waiting(), "");
  EXPECT_TRUE(core_->Deregister(req, "lab-1").ok());  // again: already gone
  req.set_worker_id("bogus");
  EXPECT_EQ(core_->Deregister(req, "lab-1").code(), absl::StatusCode::kInvalidArgument);
  // The trial it held goes to the next worker, as a new attempt.
  std::string w2 = RegisterWorker();
  EXPECT_EQ(core_->GetJob(id)->waiting(), "");
  auto again = Lease(w2).at(0);
  EXPECT_EQ(again.id(), t.id());
  EXPECT_EQ(again.attempt(), t.attempt() + 1);
}

// A job cancelled while its best awaits its re-measurement reports that best as measured once,
// so that its job, its results and its export agree.
TEST_F(CoordinatorTest, ACancelledJobKeepsItsBestForExport) {
  auto id = *core_->SubmitJob(GemmSpec(8, 6));
  std::string w = RegisterWorker();
  Report(w, Lease(w).at(0), Ok(500));  // the baseline
  auto t = Lease(w).at(0);
  ASSERT_EQ(t.kind(), v1::TUNE);
  Report(w, t, Ok(120));
  EXPECT_FALSE(core_->GetJob(id)->tasks(0).has_best());  // waiting for its re-measurement
  ASSERT_EQ(*core_->CancelJob(id), v1::CANCELLED);
  auto job = *core_->GetJob(id);
  ASSERT_TRUE(job.tasks(0).has_best());
  EXPECT_EQ(job.tasks(0).best().median_us(), 120);
  EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(job.tasks(0).best_config())),
            codegen::ConfigKey(codegen::FromProto(t.config())));
  auto exported = ExportJobKernels(job);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->kernels_size(), 1);
}

}  // namespace
}  // namespace kiln::server
