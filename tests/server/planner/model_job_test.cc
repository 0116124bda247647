// Model jobs in the coordinator core: one task per distinct workload with its count, a baseline
// and a safe first trial per task, the shared budget given by expected gain, then a STEP trial
// whose result becomes the job's measured tokens/s.
#include <prometheus/text_serializer.h>

#include <filesystem>
#include <map>

#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/planner/task_scheduler.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

class ModelJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *OpenStore("", testing::TempDir());
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, &metrics_,
                                          CoreOptions{5000, 1000, 1000, 1});
    ASSERT_TRUE(core_->Recover().ok());
    v1::RegisterRequest r;
    *r.mutable_chip() = testing::CpuChip();
    worker_ = core_->Register(r, "")->worker_id();
  }

  std::vector<v1::Trial> Lease() {
    v1::LeaseTrialsRequest r;
    r.set_worker_id(worker_);
    r.set_max_trials(1);
    auto resp = core_->LeaseTrials(r, "");
    EXPECT_TRUE(resp.ok()) << resp.status();
    return {resp->trials().begin(), resp->trials().end()};
  }

  void Report(const v1::Trial& t, v1::Measurement m) {
    ASSERT_TRUE(core_->ReportResults(testing::ReportRequest(worker_, t, std::move(m)), "").ok());
  }

  FakeClock clock_;
  CoordinatorMetrics metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> core_;
  std::string worker_;
};

TEST_F(ModelJobTest, MambaDecodeRunsEveryTaskThenTheStep) {
  v1::JobSpec spec;
  spec.set_model("mamba-130m");
  spec.set_chip("cpu");
  spec.set_budget_trials(30);
  spec.set_context(16);
  auto id = core_->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  auto job = core_->GetJob(*id);
  ASSERT_EQ(job->tasks_size(), 9);
  EXPECT_EQ(job->tasks(0).count(), 24 + 1);  // each layer's input norm and the final norm
  EXPECT_EQ(job->spec().arch().parameters(), 129135360);
  std::map<int, int> tune;
  v1::Trial step;
  for (int guard = 0; guard < 500; ++guard) {
    auto ts = Lease();
    if (ts.empty()) break;
    const v1::Trial& t = ts[0];
    if (t.kind() == v1::STEP) {
      step = t;
      v1::Measurement m = testing::Ok(1000);
      m.mutable_step()->set_measured(123);
      m.mutable_step()->set_baseline_measured(45);
      m.mutable_step()->set_baseline_name("libtorch");
      m.mutable_step()->set_bound_fraction(0.875);
      Report(t, m);
      continue;
    }
    if (t.kind() == v1::TUNE) tune[t.task_index()]++;
    // The lm_head (task 7) is slow: the scheduler should spend more there.
    Report(t, testing::Ok(t.task_index() == 7 ? 5000.0 / (1 + tune[7]) : 10));
  }
  job = core_->GetJob(*id);
  EXPECT_EQ(job->state(), v1::SUCCEEDED) << job->message();
  EXPECT_EQ(step.kind(), v1::STEP);
  EXPECT_EQ(step.step().kernels_size(), 9);
  int total = 0;
  for (int i = 0; i < 9; ++i) {
    EXPECT_GE(tune[i], 1) << i;
    EXPECT_TRUE(job->tasks(i).has_best()) << i;
    total += tune[i];
  }
  EXPECT_EQ(total, 30);
  for (int i = 0; i < 9; ++i) {  // the expected-gain rule favours the task dominating the step
    if (i != 7) {
      EXPECT_GT(tune[7], 2 * tune[i]) << i;
    }
  }
  EXPECT_DOUBLE_EQ(job->tokens_per_second().measured(), 123);
  EXPECT_DOUBLE_EQ(job->tokens_per_second().baseline_measured(), 45);
  EXPECT_GT(job->tokens_per_second().estimated(), 0);
  // The measured figures reach the job's gauges.
  const std::string text = prometheus::TextSerializer().Serialize(metrics_.registry()->Collect());
  EXPECT_THAT(text,
              ::testing::HasSubstr("kiln_job_best_tokens_per_second{job_id=\"" + *id + "\"} 123"));
  EXPECT_THAT(text, ::testing::HasSubstr("kiln_job_bandwidth_bound_fraction{job_id=\"" + *id +
                                         "\"} 0.875"));
}

// What a job run to its end did: TUNE trials per task (all, and after the probe step was
// leased), the STEP trials in lease order, the job.
struct ProbeRun {
  std::map<int, int> tune, tune_after_probe;
  std::vector<v1::Trial> steps;  // in lease order
  v1::Job job;
};

TEST_F(ModelJobTest, ProbeStepMidwayReweighsTasksByTheirTimeInsideTheStep) {
  // A mamba-130m decode job: every task reports a constant median (the lm_head, task 7, 1000 us;
  // the others 10 us), a probe step reports each kernel's time inside the step as its time alone
  // times in_step[task] (1 where absent), the final step 100 tokens/s.
  auto run = [&](bool probe, std::map<int, double> in_step) {
    // A fresh store each time: the first job's records would answer the second's proposals.
    const std::string dir = testing::TempDir() + (probe ? "/probe" : "/plain");
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    core_.reset();
    store_ = *OpenStore("", dir);
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, &metrics_,
                                          CoreOptions{5000, 1000, 1000, 1});
    EXPECT_TRUE(core_->Recover().ok());
    v1::RegisterRequest reg;
    *reg.mutable_chip() = testing::CpuChip();
    worker_ = core_->Register(reg, "")->worker_id();
    v1::JobSpec spec;
    spec.set_model("mamba-130m");
    spec.set_chip("cpu");
    spec.set_budget_trials(80);
    spec.set_context(16);
    spec.set_no_step_probe(!probe);
    auto id = core_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    ProbeRun r;
    for (int guard = 0; guard < 500; ++guard) {
      auto ts = Lease();
      if (ts.empty()) break;
      const v1::Trial& t = ts[0];
      if (t.kind() == v1::STEP) {
        r.steps.push_back(t);
        v1::Measurement m = testing::Ok(1000);
        v1::StepResult* st = m.mutable_step();
        st->set_measured(t.step().probe() ? 50 : 100);
        st->set_probe(t.step().probe());
        for (int i = 0; i < t.step().kernels_size(); ++i) {
          const v1::StepKernel& k = t.step().kernels(i);
          v1::StepOpTime* o = st->add_op_times();
          o->set_workload_key(codegen::WorkloadKey(k.workload()));
          o->set_isolated_us(k.isolated_us());
          o->set_in_step_us(k.isolated_us() * (in_step.count(i) ? in_step[i] : 1.0));
        }
        Report(t, m);
        continue;
      }
      if (t.kind() == v1::TUNE) {
        r.tune[t.task_index()]++;
        if (!r.steps.empty()) r.tune_after_probe[t.task_index()]++;
      }
      Report(t, testing::Ok(t.task_index() == 7 ? 1000 : 10));
    }
    r.job = *core_->GetJob(*id);
    return r;
  };
  const ProbeRun plain = run(false, {});
  const ProbeRun probed = run(true, {{7, 0.02}});  // the lm_head runs 50x faster in the step
  EXPECT_EQ(plain.job.state(), v1::SUCCEEDED) << plain.job.message();
  EXPECT_EQ(probed.job.state(), v1::SUCCEEDED) << probed.job.message();
  ASSERT_EQ(plain.steps.size(), 1u);  // --no-step-probe: only the final step
  EXPECT_FALSE(plain.steps[0].step().probe());
  ASSERT_EQ(probed.steps.size(), 2u);
  const v1::Trial& probe = probed.steps[0];
  EXPECT_TRUE(probe.step().probe());
  EXPECT_FALSE(probed.steps[1].step().probe());
  ASSERT_EQ(probe.step().kernels_size(), 9);
  EXPECT_DOUBLE_EQ(probe.step().kernels(7).isolated_us(), 1000);  // its best alone when asked
  // Half the budget had been spent when the probe was asked for; every TUNE trial still ran.
  int before = 0, total = 0;
  for (const auto& [task, n] : probed.tune) total += n;
  auto count = [](const std::map<int, int>& m, int task) {
    auto it = m.find(task);
    return it == m.end() ? 0 : it->second;
  };
  for (const auto& [task, n] : probed.tune) before += n - count(probed.tune_after_probe, task);
  EXPECT_EQ(total, 80);
  EXPECT_GE(2 * before, 80);
  EXPECT_LT(before, 80);
  // The factor is clamped to 0.1, the others stay 1 (measured) ...
  EXPECT_DOUBLE_EQ(probed.job.tasks(7).in_step_factor(), 0.1);
  EXPECT_DOUBLE_EQ(probed.job.tasks(0).in_step_factor(), 1.0);
  EXPECT_DOUBLE_EQ(plain.job.tasks(7).in_step_factor(), 0);
  // ... so after it the lm_head gets fewer of the trials than it does without the probe, and
  // the others more.
  const double share_plain = count(plain.tune, 7) / 80.0;
  const double share_after = count(probed.tune_after_probe, 7) / (80.0 - before);
  EXPECT_LT(share_after, 0.6 * share_plain) << share_after << " vs " << share_plain;
  // The probe's figures are not the job's: tokens/s comes from the final step only.
  EXPECT_DOUBLE_EQ(probed.job.tokens_per_second().measured(), 100);
}

TEST_F(ModelJobTest, BadModelSpecsAreRefused) {
  v1::JobSpec spec;
  spec.set_chip("cpu");
  spec.set_hf_config_json(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,)");
  auto s = core_->SubmitJob(spec);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  spec.clear_hf_config_json();
  spec.set_model("tinyllama-1.1b");
  spec.set_phase("training");
  EXPECT_EQ(core_->SubmitJob(spec).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->ListJobs(10)->empty());
}

}  // namespace
}  // namespace kiln::server
