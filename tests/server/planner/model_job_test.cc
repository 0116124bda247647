// Model jobs in the coordinator core: one task per distinct workload with its count, a baseline
// and a safe first trial per task, the shared budget given by expected gain, then a STEP trial
// whose result becomes the job's measured tokens/s.
#include <prometheus/text_serializer.h>

#include <map>

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
