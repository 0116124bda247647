// A worker with valid credentials is not trusted with more than its own work: its id belongs to
// the credential that registered it, only the lease holder at that attempt may report a trial,
// reported figures must be figures a harness can produce, and a new best that would answer later
// jobs is confirmed by another worker of the chip type when there is one.
#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernel_template.h"
#include "codegen/workload.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/metrics.h"
#include "server/tuning_record.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using testing::CpuChip;
using testing::GemmSpec;
using testing::MambaSpec;
using testing::Ok;
using testing::ReportRequest;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

class WorkerTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *OpenStore("", testing::TempDir());
    Restart();
  }

  void Restart() {
    core_.reset();
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, &metrics_, options_);
    ASSERT_TRUE(core_->Recover().ok());
  }

  static CoreOptions TestOptions() {
    CoreOptions o{5000, 1000, 1000, 1};
    o.final_rounds = 0;
    return o;
  }

  absl::StatusOr<v1::RegisterResponse> TryRegister(const std::string& caller,
                                                   const std::string& id = "",
                                                   v1::ChipFingerprint chip = CpuChip()) {
    v1::RegisterRequest r;
    r.set_name("w");
    *r.mutable_chip() = chip;
    r.set_worker_id(id);
    return core_->Register(r, caller);
  }

  std::string Register(const std::string& caller, const std::string& id = "") {
    auto resp = TryRegister(caller, id);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->worker_id() : "";
  }

  absl::StatusOr<v1::LeaseTrialsResponse> TryLease(const std::string& worker,
                                                   const std::string& caller = "") {
    v1::LeaseTrialsRequest r;
    r.set_worker_id(worker);
    r.set_max_trials(1);
    return core_->LeaseTrials(r, caller);
  }

  std::vector<v1::Trial> Lease(const std::string& worker, const std::string& caller = "") {
    auto resp = TryLease(worker, caller);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return {};
    return {resp->trials().begin(), resp->trials().end()};
  }

  absl::StatusOr<v1::ReportResultsResponse> TryReport(const std::string& worker, const v1::Trial& t,
                                                      v1::Measurement m,
                                                      const std::string& caller = "") {
    return core_->ReportResults(ReportRequest(worker, t, std::move(m)), caller);
  }

  v1::ReportResultsResponse Report(const std::string& worker, const v1::Trial& t, v1::Measurement m,
                                   const std::string& caller = "") {
    auto resp = TryReport(worker, t, m, caller);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::ReportResultsResponse();
  }

  v1::Trial TrialOf(const std::string& job, const std::string& id) {
    const auto results = core_->GetResults(job);
    EXPECT_TRUE(results.ok()) << results.status();
    if (results.ok())
      for (const auto& t : results->trials())
        if (t.id() == id) return t;
    ADD_FAILURE() << "no trial " << id;
    return {};
  }

  v1::WorkerInfo WorkerOf(const std::string& id) {
    for (const auto& w : core_->ListWorkers())
      if (w.id() == id) return w;
    ADD_FAILURE() << "no worker " << id;
    return {};
  }

  double Refused(const std::string& reason) {
    const std::string text = prometheus::TextSerializer().Serialize(metrics_.registry()->Collect());
    const std::string series = "kiln_rpc_refused_total{reason=\"" + reason + "\"} ";
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(series, 0) == 0) return std::stod(line.substr(series.size()));
    return 0;
  }

  CoreOptions options_ = TestOptions();
  FakeClock clock_;
  CoordinatorMetrics metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> core_;
};

TEST_F(WorkerTrustTest, AWorkerIdBelongsToTheCredentialThatRegisteredIt) {
  const std::string w = Register("lab-1");
  EXPECT_EQ(WorkerOf(w).owner(), "lab-1");
  v1::ChipFingerprint rogue;
  rogue.set_kind("sim");
  rogue.set_model("rogue chip");
  rogue.set_chip_type("rogue-chip");
  for (const std::string caller : {"lab-2", ""}) {
    auto taken = TryRegister(caller, w, rogue);
    EXPECT_EQ(taken.status().code(), absl::StatusCode::kPermissionDenied) << caller;
  }
  EXPECT_EQ(WorkerOf(w).chip().chip_type(), "cpu-x86_64-avx2");  // not overwritten
  EXPECT_EQ(Refused("not_worker_owner"), 2);

  // Every other WorkerService call for the id is the owner's only.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  EXPECT_EQ(core_->Heartbeat(hb, "lab-2").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(core_->Heartbeat(hb, "lab-1")->known());
  EXPECT_EQ(TryLease(w, "lab-2").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(TryLease(w, "lab-1").ok());
  v1::ReleaseTrialsRequest release;
  release.set_worker_id(w);
  EXPECT_EQ(core_->ReleaseTrials(release, "lab-2").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(core_->ReleaseTrials(release, "lab-1").ok());
  v1::ReportResultsRequest report;
  report.set_worker_id(w);
  EXPECT_EQ(core_->ReportResults(report, "lab-2").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Refused("not_worker_owner"), 6);

  // The owner is stored with the worker: a restarted coordinator still refuses the take-over.
  Restart();
  EXPECT_EQ(WorkerOf(w).owner(), "lab-1");
  EXPECT_EQ(TryRegister("lab-2", w).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(TryLease(w, "lab-2").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(TryLease(w, "lab-1").ok());
}

// Re-registering with an id takes it back only as it was: same credential, same chip, and a
// worker gone silent. A live worker's id, or a different chip under the same id, registers as a
// new worker and leaves the old one as it was.
TEST_F(WorkerTrustTest, ReRegisteringNeverOverwritesAWorker) {
  const std::string w = Register("lab-1");
  const std::string live = Register("lab-1", w);  // the id is in use
  EXPECT_NE(live, w);
  EXPECT_FALSE(live.empty());

  clock_.Advance(6000);  // w goes silent (past max(lease TTL, 3 heartbeats))
  v1::ChipFingerprint other = CpuChip();
  other.set_chip_type("cpu-x86_64-avx512");
  auto changed = TryRegister("lab-1", w, other);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_NE(changed->worker_id(), w);
  EXPECT_EQ(WorkerOf(w).chip().chip_type(), "cpu-x86_64-avx2");
  EXPECT_EQ(WorkerOf(changed->worker_id()).chip().chip_type(), "cpu-x86_64-avx512");

  // The same worker coming back (same credential and chip) keeps its id.
  EXPECT_EQ(Register("lab-1", w), w);

  // After a coordinator restart on another store (nothing known of w), the worker re-registers
  // with its id and keeps it, now bound to its credential.
  store_ = *OpenStore("", testing::TempDir());
  Restart();
  EXPECT_EQ(Register("lab-1", w), w);
  EXPECT_EQ(TryRegister("lab-2", w).status().code(), absl::StatusCode::kPermissionDenied);

  // Anonymous workers (a coordinator without auth) keep today's behaviour among themselves.
  const std::string a = Register("");
  clock_.Advance(6000);
  EXPECT_EQ(Register("", a), a);
}

// Reports from anyone but the lease holder at the leased attempt are refused and counted, and
// change nothing: the rogue worker of the security acceptance check (valid credentials, impossible
// timings for trials leased to another worker, pending or done).
TEST_F(WorkerTrustTest, OnlyTheLeaseHolderAtThatAttemptMayReport) {
  const std::string job = *core_->SubmitJob(GemmSpec(8, 3));
  const std::string honest = Register("lab-1");
  v1::ChipFingerprint chip;  // its own chip type: it never leases this job's trials
  chip.set_kind("sim");
  chip.set_model("rogue chip");
  chip.set_chip_type("rogue-chip");
  const std::string rogue = TryRegister("lab-2", "", chip)->worker_id();
  v1::Trial t = Lease(honest, "lab-1").at(0);
  ASSERT_EQ(t.kind(), v1::BASELINE);
  for (double us : {0.001, 1e-300}) {
    auto r = Report(rogue, t, Ok(us), "lab-2");  // leased to another worker
    EXPECT_EQ(r.accepted(), 0);
    EXPECT_EQ(r.refused(), 1);
  }
  EXPECT_EQ(TrialOf(job, t.id()).state(), v1::LEASED);

  // Released: pending at attempt 2, which nobody holds.
  v1::ReleaseTrialsRequest release;
  release.set_worker_id(honest);
  release.add_trial_ids(t.id());
  ASSERT_TRUE(core_->ReleaseTrials(release, "lab-1").ok());
  v1::Trial pending = TrialOf(job, t.id());
  ASSERT_EQ(pending.state(), v1::PENDING);
  EXPECT_EQ(Report(rogue, pending, Ok(0.001), "lab-2").refused(), 1);
  EXPECT_EQ(Report(honest, pending, Ok(0.001), "lab-1").refused(), 1);  // even its last holder
  EXPECT_EQ(Report(honest, t, Ok(500), "lab-1").stale(), 1);            // the released attempt

  v1::Trial again = Lease(honest, "lab-1").at(0);
  ASSERT_EQ(again.id(), t.id());
  ASSERT_EQ(again.attempt(), 2);
  v1::Trial never = again;
  never.set_attempt(3);  // an attempt never leased
  EXPECT_EQ(Report(honest, never, Ok(500), "lab-1").refused(), 1);
  EXPECT_EQ(Report(honest, again, Ok(500), "lab-1").accepted(), 1);
  EXPECT_EQ(Report(honest, again, Ok(500), "lab-1").duplicates(), 1);  // the holder's retry
  EXPECT_EQ(Report(rogue, again, Ok(0.001), "lab-2").refused(), 1);    // done, by another
  EXPECT_EQ(Refused("not_lease_holder"), 6);

  // The rest of the job runs on the honest worker; nothing forged reaches it or the store.
  for (auto ts = Lease(honest, "lab-1"); !ts.empty(); ts = Lease(honest, "lab-1")) {
    EXPECT_EQ(Report(rogue, ts[0], Ok(1e-300), "lab-2").refused(), 1);
    Report(honest, ts[0], Ok(100 + ts[0].seq()), "lab-1");
  }
  const v1::Job done = *core_->GetJob(job);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.message();
  EXPECT_EQ(done.tasks(0).trials_ok(), 3);
  EXPECT_DOUBLE_EQ(done.tasks(0).baseline().median_us(), 500);
  EXPECT_GT(done.tasks(0).best().median_us(), 100);
  const auto records = store_->TopRecords(done.tasks(0).workload_key(), done.chip_type(), 10);
  ASSERT_TRUE(records.ok()) << records.status();
  for (const auto& rec : *records) EXPECT_GT(rec.measurement().median_us(), 100);
  EXPECT_EQ(WorkerOf(rogue).trials_done(), 0);
}

// An OK report whose figures no harness produces is refused as forged and counted; the trial is
// answered as SUSPECT (counted once, as any failed trial: the budget stays exact), and no record
// of it answers later jobs.
TEST_F(WorkerTrustTest, ImplausibleFiguresAreRefusedAndTheTrialFails) {
  std::vector<std::pair<std::string, v1::Measurement>> forged;
  auto add = [&](const std::string& what, v1::Measurement m) { forged.emplace_back(what, m); };
  for (double us : {kNaN, kInf, 0.0, -5.0}) {
    v1::Measurement m = Ok(100);
    m.set_median_us(us);
    add("median " + std::to_string(us), m);
  }
  v1::Measurement m = Ok(100);
  m.clear_samples_us();
  add("no samples", m);
  for (double s : {kNaN, 0.0, -1.0, kInf}) {
    m = Ok(100);
    m.add_samples_us(s);
    add("sample " + std::to_string(s), m);
  }
  m = Ok(1e-3);  // below every sample
  m.clear_samples_us();
  for (double s : {90, 100, 110}) m.add_samples_us(s);
  add("median outside its samples", m);
  m = Ok(91);  // inside them, but not their median (100)
  m.clear_samples_us();
  for (double s : {90, 100, 110}) m.add_samples_us(s);
  add("median not the samples' median", m);
  m = Ok(100);
  m.set_gflops(-1);
  add("negative gflops", m);
  m = Ok(100);
  m.set_gbytes_per_s(kInf);
  add("infinite gbytes_per_s", m);
  m = Ok(100);
  m.set_max_error(kNaN);
  add("NaN max_error", m);

  const int budget = static_cast<int>(forged.size()) + 2;
  const std::string job = *core_->SubmitJob(GemmSpec(8, budget));
  const std::string w = Register("lab-1");
  ASSERT_EQ(Report(w, Lease(w, "lab-1").at(0), Ok(500), "lab-1").accepted(), 1);  // baseline
  int refused = 0;
  for (const auto& [what, measurement] : forged) {
    auto ts = Lease(w, "lab-1");
    ASSERT_EQ(ts.size(), 1u) << what;
    ASSERT_EQ(ts[0].kind(), v1::TUNE) << what;
    auto r = Report(w, ts[0], measurement, "lab-1");
    EXPECT_EQ(r.refused(), 1) << what;
    EXPECT_EQ(r.accepted(), 0) << what;
    refused += r.refused();
    const v1::Trial t = TrialOf(job, ts[0].id());
    EXPECT_EQ(t.state(), v1::DONE) << what;
    EXPECT_EQ(t.measurement().status(), v1::SUSPECT) << what;
    EXPECT_NE(t.measurement().message().find("refused by the coordinator"), std::string::npos)
        << t.measurement().message();
    EXPECT_EQ(t.measurement().median_us(), 0) << what;  // the forged figures are not kept
    // The holder's retry of the same report is a duplicate, not a second failure.
    EXPECT_EQ(Report(w, ts[0], measurement, "lab-1").duplicates(), 1) << what;
  }
  EXPECT_EQ(Refused("implausible"), refused);
  // Figures a harness does produce: an even count's median between its middle samples, within
  // 1% of it, and a single sample.
  m = Ok(100.5);
  m.clear_samples_us();
  for (double s : {90, 100, 101, 120}) m.add_samples_us(s);
  EXPECT_EQ(Report(w, Lease(w, "lab-1").at(0), m, "lab-1").accepted(), 1);
  for (auto ts = Lease(w, "lab-1"); !ts.empty(); ts = Lease(w, "lab-1"))
    EXPECT_EQ(Report(w, ts[0], Ok(200), "lab-1").accepted(), 1);
  const v1::Job done = *core_->GetJob(job);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.message();
  EXPECT_EQ(done.trials_done(), budget);  // every trial once: none requeued, none counted twice
  EXPECT_EQ(done.tasks(0).trials_failed(), static_cast<int>(forged.size()));
  EXPECT_EQ(done.tasks(0).trials_ok(), 2);
  EXPECT_DOUBLE_EQ(done.tasks(0).best().median_us(), 200);  // the re-measured one
  const auto records = store_->TopRecords(done.tasks(0).workload_key(), done.chip_type(), 100);
  ASSERT_TRUE(records.ok()) << records.status();
  for (const auto& rec : *records) EXPECT_GE(rec.measurement().median_us(), 100);
}

// A model job's composed step: its own figures must be figures too.
TEST_F(WorkerTrustTest, AStepWithImpossibleFiguresIsRefused) {
  v1::JobSpec spec = MambaSpec(9);
  const std::string job = *core_->SubmitJob(spec);
  const std::string w = Register("");
  int steps = 0, guard = 0;
  for (auto ts = Lease(w); !ts.empty() && ++guard < 500; ts = Lease(w)) {
    v1::Measurement m = Ok(100);
    if (ts[0].kind() == v1::STEP) {
      ++steps;
      m.mutable_step()->set_measured(kInf);
      EXPECT_EQ(Report(w, ts[0], m).refused(), 1);
      EXPECT_EQ(TrialOf(job, ts[0].id()).measurement().status(), v1::SUSPECT);
      continue;
    }
    Report(w, ts[0], m);
  }
  EXPECT_EQ(steps, 1);
  const v1::Job done = *core_->GetJob(job);
  EXPECT_EQ(done.tokens_per_second().measured(), 0);  // nothing published
  EXPECT_EQ(Refused("implausible"), 1);
}

// A new best is re-measured by another live worker of the chip type when there is one, and its
// record answers later jobs only once confirmed: a worker's too-good figure is demoted by the
// other's measurement instead of becoming the store's answer.
TEST_F(WorkerTrustTest, ANewBestIsConfirmedOnAnotherWorker) {
  const std::string job = *core_->SubmitJob(GemmSpec(8, 3));
  const std::string first = Register("lab-1");
  const std::string second = Register("lab-2");
  Report(first, Lease(first, "lab-1").at(0), Ok(500), "lab-1");
  const v1::Trial tune = Lease(first, "lab-1").at(0);
  ASSERT_EQ(tune.kind(), v1::TUNE);
  Report(first, tune, Ok(1), "lab-1");  // plausible, but far better than the truth (100)
  const std::string key = codegen::ConfigKey(codegen::FromProto(tune.config()));
  const v1::Job running = *core_->GetJob(job);
  // Not confirmed yet: no record of it answers a later job.
  auto held = store_->FindRecord(running.tasks(0).workload_key(), running.chip_type(), key);
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(held->has_value());

  // The first worker is given other work, never the re-measurement of its own figure.
  std::vector<v1::Trial> own;
  for (auto ts = Lease(first, "lab-1"); !ts.empty(); ts = Lease(first, "lab-1")) {
    EXPECT_NE(ts[0].kind(), v1::REMEASURE);
    own.push_back(ts[0]);
  }
  EXPECT_EQ(own.size(), 2u);  // the rest of the budget
  const v1::Trial again = Lease(second, "lab-2").at(0);
  ASSERT_EQ(again.kind(), v1::REMEASURE);
  EXPECT_EQ(again.exclude_worker_id(), first);
  Report(second, again, Ok(100), "lab-2");
  for (const auto& t : own) Report(first, t, Ok(150 + t.seq()), "lab-1");
  for (auto ts = Lease(second, "lab-2"); !ts.empty(); ts = Lease(second, "lab-2"))
    Report(second, ts[0], Ok(160), "lab-2");

  const v1::Job done = *core_->GetJob(job);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.message();
  EXPECT_GE(done.tasks(0).best().median_us(), 100);
  auto record = store_->FindRecord(done.tasks(0).workload_key(), done.chip_type(), key);
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_DOUBLE_EQ((*record)->measurement().median_us(), 100);  // the second worker's figure
  EXPECT_TRUE((*record)->measurement().demoted());
}

// Which worker may re-measure: one of another credential when there is one (a credential running
// several workers does not confirm its own figures), else another worker, else (alone, or the
// others gone silent) the first one, as with a single worker.
TEST_F(WorkerTrustTest, TheReMeasurementGoesToAnotherCredentialWhenThereIsOne) {
  const std::string job = *core_->SubmitJob(GemmSpec(8, 1));
  const std::string first = Register("lab-1");
  const std::string sibling = Register("lab-1");
  Report(first, Lease(first, "lab-1").at(0), Ok(500), "lab-1");
  Report(first, Lease(first, "lab-1").at(0), Ok(100), "lab-1");
  const std::string other = Register("lab-2");
  EXPECT_TRUE(Lease(first, "lab-1").empty());
  EXPECT_TRUE(Lease(sibling, "lab-1").empty());
  clock_.Advance(6000);  // the other credential's worker goes silent: the sibling may
  v1::HeartbeatRequest hb;
  hb.set_worker_id(sibling);
  ASSERT_TRUE(core_->Heartbeat(hb, "lab-1")->known());
  hb.set_worker_id(first);
  ASSERT_TRUE(core_->Heartbeat(hb, "lab-1")->known());
  EXPECT_TRUE(Lease(first, "lab-1").empty());
  auto again = Lease(sibling, "lab-1");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind(), v1::REMEASURE);
  // Alone, the first worker re-measures its own figure (today's behaviour with one worker).
  ASSERT_EQ(Report(sibling, again[0], Ok(101), "lab-1").accepted(), 1);
  EXPECT_EQ(core_->GetJob(job)->state(), v1::SUCCEEDED);
  const std::string solo_job = *core_->SubmitJob(GemmSpec(16, 1));
  clock_.Advance(6000);  // everyone but `first` silent
  Report(first, Lease(first, "lab-1").at(0), Ok(500), "lab-1");
  Report(first, Lease(first, "lab-1").at(0), Ok(100), "lab-1");
  auto own = Lease(first, "lab-1");
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].kind(), v1::REMEASURE);
  Report(first, own[0], Ok(100), "lab-1");
  EXPECT_EQ(core_->GetJob(solo_job)->state(), v1::SUCCEEDED);
  (void)other;
}

// A step's kernel times weigh the job's tasks (a probe's): figures no timer makes are refused.
TEST(StepFiguresTest, ForgedKernelTimesInAStepAreImplausible) {
  v1::Measurement m = Ok(1000);
  v1::StepResult* st = m.mutable_step();
  st->set_measured(12);
  v1::StepOpTime* t = st->add_op_times();
  t->set_workload_key("gemm M=1");
  t->set_in_step_us(10);
  t->set_isolated_us(20);
  t->set_calls_per_step(22);
  EXPECT_EQ(ImplausibleFigures(m, v1::STEP), "");
  for (double bad : {kNaN, kInf, -1.0}) {
    v1::Measurement f = m;
    f.mutable_step()->mutable_op_times(0)->set_in_step_us(bad);
    EXPECT_NE(ImplausibleFigures(f, v1::STEP).find("op_times"), std::string::npos) << bad;
    f = m;
    f.mutable_step()->mutable_op_times(0)->set_isolated_us(bad);
    EXPECT_NE(ImplausibleFigures(f, v1::STEP).find("op_times"), std::string::npos) << bad;
  }
  v1::Measurement f = m;
  f.mutable_step()->mutable_op_times(0)->set_calls_per_step(-3);
  EXPECT_NE(ImplausibleFigures(f, v1::STEP), "");
}

}  // namespace
}  // namespace kiln::server
