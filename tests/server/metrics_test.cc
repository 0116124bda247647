// The coordinator's metrics as the core drives them: trials, phases, proposals, registrations,
// per-job progress and best-so-far (dropped an hour after the job ends), and the agent sink.
#include "server/metrics.h"

#include <prometheus/text_serializer.h>

#include <atomic>
#include <memory>
#include <sstream>

#include "codegen/kernel_template.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using testing::CpuChip;
using testing::GemmSpec;
using testing::LeaseRequest;

std::string Text(const CoordinatorMetrics& m) {
  return prometheus::TextSerializer().Serialize(m.registry()->Collect());
}

// The value of the series written exactly as `series` ("name{labels}"), or -1 when absent.
double Value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

// Every leased trial answered OK: the baseline in 200 us, each other one 1 us faster than the
// last (*us counts down).
v1::ReportResultsRequest ReportOf(const std::string& worker,
                                  const google::protobuf::RepeatedPtrField<v1::Trial>& trials,
                                  double* us) {
  v1::ReportResultsRequest report;
  report.set_worker_id(worker);
  for (const auto& t : trials) {
    auto* r = report.add_results();
    r->set_trial_id(t.id());
    r->set_attempt(t.attempt());
    auto* m = r->mutable_measurement();
    m->set_status(v1::OK);
    m->set_median_us(t.kind() == v1::BASELINE ? 200 : (*us)--);
    m->add_samples_us(m->median_us());
    m->set_gflops(5000 / m->median_us());
    m->set_compile_seconds(t.kind() == v1::BASELINE ? 0 : 0.2);
    m->set_measure_seconds(0.1);
  }
  return report;
}

TEST(CoordinatorMetrics, FollowAJobFromSubmitToRetention) {
  CoordinatorMetrics metrics;
  FakeClock clock;
  auto store = *OpenStore("", testing::TempDir());
  Coordinator core(store.get(), &clock, &metrics, CoreOptions{5000, 1000, 1000, 1});
  ASSERT_TRUE(core.Recover().ok());
  v1::JobSpec spec = GemmSpec(8, 5);
  spec.set_strategy("random");
  std::string job = *core.SubmitJob(spec);
  v1::RegisterRequest reg;
  reg.set_name("lab-1");
  *reg.mutable_chip() = CpuChip();
  std::string worker = core.Register(reg, "")->worker_id();
  double us = 100;
  for (int round = 0; round < 50; ++round) {
    v1::LeaseTrialsRequest lease;
    lease.set_worker_id(worker);
    lease.set_max_trials(4);
    auto trials = core.LeaseTrials(lease, "")->trials();
    if (trials.empty()) break;
    ASSERT_TRUE(core.ReportResults(ReportOf(worker, trials, &us), "").ok());
  }
  ASSERT_EQ(core.GetJob(job)->state(), v1::SUCCEEDED);
  std::string text = Text(metrics);
  const std::string id = "{job_id=\"" + job + "\"}";
  const std::string task =
      "{job_id=\"" + job + "\",task=\"" + core.GetJob(job)->tasks(0).workload_key() + "\"}";
  EXPECT_EQ(Value(text, "kiln_job_trials_done" + id), 5);
  EXPECT_EQ(Value(text, "kiln_job_budget_trials" + id), 5);
  EXPECT_EQ(Value(text, "kiln_job_budget_used_ratio" + id), 1);
  double best = core.GetJob(job)->tasks(0).best().median_us();
  EXPECT_EQ(Value(text, "kiln_job_best_median_us" + task), best);
  EXPECT_DOUBLE_EQ(Value(text, "kiln_job_best_gflops" + task), 5000 / best);
  EXPECT_DOUBLE_EQ(Value(text, "kiln_job_speedup_vs_baseline" + task), 200 / best);
  EXPECT_EQ(Value(text, "kiln_jobs{state=\"SUCCEEDED\"}"), 1);
  // The first configurations are the GEMM template's starting ones; the strategy proposed the
  // rest of the budget of 5.
  const auto starts =
      (*codegen::FindTemplate(spec.workload(), "cpu"))
          ->StartingConfigs(spec.workload(), codegen::TraitsFromFingerprint(CpuChip()));
  ASSERT_FALSE(starts.empty());
  const double proposed = 5.0 - starts.size();
  EXPECT_EQ(Value(text, "kiln_agent_proposals_total{strategy=\"random\"}"), proposed);
  // One Propose call a batch: as many as the task had in flight, told every result before it.
  EXPECT_GE(Value(text, "kiln_agent_propose_seconds_count{strategy=\"random\"}"), 1);
  EXPECT_LE(Value(text, "kiln_agent_propose_seconds_count{strategy=\"random\"}"), proposed);
  const std::string chip = "chip_type=\"" + CpuChip().chip_type() + "\"";
  EXPECT_EQ(Value(text, "kiln_worker_registrations_total{" + chip + ",worker=\"lab-1\"}"), 1);
  EXPECT_GE(Value(text, "kiln_trials_total{" + chip + ",status=\"OK\"}"), 6);  // + baseline
  EXPECT_EQ(Value(text, "kiln_trial_phase_seconds_count{" + chip + ",phase=\"compile\"}"),
            Value(text, "kiln_trials_total{" + chip + ",status=\"OK\"}") - 1);
  EXPECT_EQ(Value(text, "kiln_workers{" + chip + ",state=\"alive\"}"), 1);

  clock.Advance(CoordinatorMetrics::kJobSeriesRetentionMs + 1000);
  core.Tick();
  text = Text(metrics);
  EXPECT_EQ(text.find(job), std::string::npos) << "series of an old job are dropped";
  EXPECT_EQ(Value(text, "kiln_jobs{state=\"SUCCEEDED\"}"), 1);
}

// A report makes work for its own job's chip type only: leases parked on another chip type (a
// lab's idle chips) are not woken by it (each would find nothing and park again, on every report).
TEST(CoordinatorMetrics, AReportWakesNoParkedLeaseOfAnotherChipType) {
  CoordinatorMetrics metrics;
  FakeClock clock;
  auto store = *OpenStore("", testing::TempDir());
  auto core = std::make_unique<Coordinator>(store.get(), &clock, &metrics,
                                            CoreOptions{5000, 1000, 1000, 1});
  ASSERT_TRUE(core->Recover().ok());
  v1::JobSpec spec = GemmSpec(8, 40);
  spec.set_strategy("random");
  const std::string job = *core->SubmitJob(spec);
  v1::RegisterRequest reg;
  reg.set_name("busy");
  *reg.mutable_chip() = CpuChip();
  const std::string busy = core->Register(reg, "")->worker_id();
  auto trials = core->LeaseTrials(LeaseRequest(busy, 4), "")->trials();  // binds the job
  ASSERT_FALSE(trials.empty());
  auto answered = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < 8; ++i) {
    reg.set_name("idle-" + std::to_string(i));
    reg.mutable_chip()->set_chip_type("idle-chip");
    v1::LeaseTrialsRequest lease = LeaseRequest(core->Register(reg, "")->worker_id(), 4);
    lease.set_wait_ms(30000);
    core->LeaseTrialsAsync(lease, "", [answered](auto) { ++*answered; });
  }
  int reports = 0;
  for (double us = 100; !trials.empty(); ++reports) {
    ASSERT_TRUE(core->ReportResults(ReportOf(busy, trials, &us), "").ok());
    v1::LeaseTrialsRequest lease = LeaseRequest(busy, 4);
    lease.set_wait_ms(0);
    trials = core->LeaseTrials(lease, "")->trials();
  }
  ASSERT_EQ(core->GetJob(job)->state(), v1::SUCCEEDED);
  EXPECT_GE(reports, 10);
  EXPECT_EQ(*answered, 0);  // still parked: nothing for their chip type came
  EXPECT_LT(Value(Text(metrics), "kiln_lease_wakeups_total{outcome=\"nothing\"}"), 1);
  core.reset();  // answers the parked leases
  EXPECT_EQ(*answered, 8);
}

TEST(CoordinatorMetrics, AgentSinkFeedsThePolicyGauges) {
  auto metrics = std::make_unique<CoordinatorMetrics>();
  auto sink = metrics->AgentSink("j-000000000001");
  sink->Report(agent::kPolicyLoss, 0.5);
  sink->Report(agent::kPolicyEntropy, 1.25);
  sink->Report(agent::kPolicyReward, -0.75);
  sink->Report(agent::kPriorWeight, 0.625);
  sink->Report("kiln_not_in_the_catalogue", 1);
  std::string text = Text(*metrics);
  EXPECT_EQ(Value(text, "kiln_policy_loss{job_id=\"j-000000000001\"}"), 0.5);
  EXPECT_EQ(Value(text, "kiln_policy_entropy{job_id=\"j-000000000001\"}"), 1.25);
  EXPECT_EQ(Value(text, "kiln_policy_reward{job_id=\"j-000000000001\"}"), -0.75);
  EXPECT_EQ(Value(text, "kiln_policy_prior_weight{job_id=\"j-000000000001\"}"), 0.625);
  EXPECT_EQ(text.find("kiln_not_in_the_catalogue"), std::string::npos);
  metrics.reset();
  sink->Report(agent::kPolicyLoss, 0.25);  // outliving the coordinator's metrics is harmless
}

TEST(CoordinatorMetrics, EveryFamilyHasHelpText) {
  CoordinatorMetrics metrics;
  for (const auto& family : metrics.registry()->Collect()) {
    EXPECT_EQ(family.name.rfind("kiln_", 0), 0u) << family.name;
    EXPECT_FALSE(family.help.empty()) << family.name;
  }
}

}  // namespace
}  // namespace kiln::server
