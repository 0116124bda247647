// Model jobs in the coordinator core: one task per distinct workload with its count, a baseline
// and a safe first trial per task, the shared budget given by expected gain, then a STEP trial
// whose result becomes the job's measured tokens/s.
#include <prometheus/text_serializer.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include "codegen/knob_space.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/planner/task_scheduler.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using testing::MambaSpec;

class ModelJobTest : public ::testing::Test {
 public:
  // A fresh coordinator on a fresh store in `dir`, with one CPU worker.
  void Restart(const std::string& dir) {
    core_.reset();
    store_ = *OpenStore("", dir);
    core_ = std::make_unique<Coordinator>(store_.get(), &clock_, &metrics_,
                                          CoreOptions{5000, 1000, 1000, 1});
    ASSERT_TRUE(core_->Recover().ok());
    v1::RegisterRequest r;
    *r.mutable_chip() = testing::CpuChip();
    worker_ = core_->Register(r, "")->worker_id();
  }
  Coordinator* core() { return core_.get(); }

  void SetUp() override { Restart(testing::TempDir()); }

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

 protected:
  FakeClock clock_;
  CoordinatorMetrics metrics_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> core_;
  std::string worker_;
};

TEST_F(ModelJobTest, MambaDecodeRunsEveryTaskThenTheStep) {
  v1::JobSpec spec = MambaSpec(30);
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

// What a job run to its end did: TUNE trials per task (all, and after the first STEP trial was
// leased), the STEP trials in lease order, the job.
struct ProbeRun {
  std::map<int, int> tune, tune_after_probe;
  std::vector<v1::Trial> steps;  // in lease order
  v1::Job job;
};

// A mamba-130m decode job of `budget` trials on a fresh store and coordinator (the first job's
// records would answer the second's proposals), run to its end: the baselines report 2000 us
// (the lm_head, task 7) or 20 us, the other trials `alone(trial)`; every STEP trial reports each
// kernel's time inside the step as `in_step(step, task)` times its time alone, the final step 100
// tokens/s.
ProbeRun RunModelJob(ModelJobTest* test, bool probe, int budget,
                     const std::function<double(const v1::Trial&)>& alone,
                     const std::function<double(const v1::Trial&, int)>& in_step) {
  const std::string dir = testing::TempDir() + "/run-" + std::to_string(probe) + "-" +
                          std::to_string(budget) + "-" + std::to_string(std::rand());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  test->Restart(dir);
  v1::JobSpec spec = MambaSpec(budget);
  spec.set_no_step_probe(!probe);
  auto id = test->core()->SubmitJob(spec);
  EXPECT_TRUE(id.ok()) << id.status();
  ProbeRun r;
  for (int guard = 0; guard < 1000; ++guard) {
    auto ts = test->Lease();
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
        o->set_in_step_us(k.isolated_us() * in_step(t, i));
      }
      test->Report(t, m);
      continue;
    }
    if (t.kind() == v1::TUNE) {
      r.tune[t.task_index()]++;
      if (!r.steps.empty()) r.tune_after_probe[t.task_index()]++;
    }
    const double base = t.task_index() == 7 ? 2000 : 20;
    test->Report(t, testing::Ok(t.kind() == v1::BASELINE ? base : alone(t)));
  }
  r.job = *test->core()->GetJob(*id);
  return r;
}

TEST_F(ModelJobTest, ProbeStepMidwayReweighsTasksByTheirTimeInsideTheStep) {
  // Every task reports a constant median (the lm_head, task 7, 1000 us; the others 10 us); the
  // probe finds the lm_head 50x faster inside the step than alone.
  auto run = [&](bool probe, std::map<int, double> in_step) {
    return RunModelJob(
        this, probe, 80, [](const v1::Trial& t) { return t.task_index() == 7 ? 1000.0 : 10.0; },
        [in_step](const v1::Trial&, int task) {
          return in_step.count(task) ? in_step.at(task) : 1.0;
        });
  };
  const ProbeRun plain = run(false, {});
  const ProbeRun probed = run(true, {{7, 0.02}});  // the lm_head runs 50x faster in the step
  EXPECT_EQ(plain.job.state(), v1::SUCCEEDED) << plain.job.message();
  EXPECT_EQ(probed.job.state(), v1::SUCCEEDED) << probed.job.message();
  ASSERT_EQ(plain.steps.size(), 1u);  // --no-step-probe: only the final step
  EXPECT_FALSE(plain.steps[0].step().probe());
  ASSERT_GE(probed.steps.size(), 2u);  // the probe, the step rounds, the final step
  const v1::Trial& probe = probed.steps[0];
  EXPECT_TRUE(probe.step().probe());
  EXPECT_EQ(probe.step().round(), 0);
  EXPECT_FALSE(probed.steps.back().step().probe());
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

// After the final rounds, each task's finalists are timed inside the step in turns; the one
// fastest there becomes the best when it leads the final rounds' winner beyond the noise margin,
// and the final step runs it.
TEST_F(ModelJobTest, StepRoundsChooseTheFinalistFastestInsideTheStep) {
  for (double lead : {0.7, 0.99}) {    // the runner-up alone, inside the step: 30% and 1% faster
    std::map<std::string, int> order;  // the lm_head's configurations in first-reported order
    auto alone = [&](const v1::Trial& t) {
      if (t.task_index() != 7) return 10.0;
      const int n = order
                        .emplace(codegen::ConfigKey(codegen::FromProto(t.config())),
                                 static_cast<int>(order.size()))
                        .first->second;
      return 1000.0 + 10 * n;  // the first configuration is the fastest alone
    };
    std::string second;  // the lm_head's second finalist, known once the rounds start
    ModelJobTest* test = this;
    auto in_step = [&](const v1::Trial& step, int task) {
      if (task != 7 || step.step().round() == 0) return 1.0;
      const v1::Job job = *test->core()->GetJob(step.job_id());
      if (second.empty() && job.tasks(7).finalists_size() >= 2)
        second = codegen::ConfigKey(codegen::FromProto(job.tasks(7).finalists(1).config()));
      const std::string key =
          codegen::ConfigKey(codegen::FromProto(step.step().kernels(7).config()));
      return key == second ? lead : 1.0;
    };
    const ProbeRun r = RunModelJob(this, true, 60, alone, in_step);
    ASSERT_EQ(r.job.state(), v1::SUCCEEDED) << r.job.message();
    const v1::TaskResult& head = r.job.tasks(7);
    ASSERT_GE(head.finalists_size(), 2) << lead;
    ASSERT_FALSE(second.empty());
    // The rounds: 3 variants (the lm_head's finalists) x 2 rounds, the order reversed.
    std::vector<const v1::Trial*> rounds;
    for (const v1::Trial& t : r.steps)
      if (t.step().round() > 0) rounds.push_back(&t);
    ASSERT_EQ(rounds.size(), 2u * head.finalists_size()) << lead;
    EXPECT_EQ(rounds.front()->step().variant(), 0);
    EXPECT_EQ(rounds.back()->step().variant(), 0);
    EXPECT_EQ(rounds.front()->step().round(), 1);
    EXPECT_EQ(rounds.back()->step().round(), 2);
    ASSERT_EQ(head.step_finalists_size(), head.finalists_size());
    const std::string winner = codegen::ConfigKey(codegen::FromProto(head.finalists(0).config()));
    const std::string best = codegen::ConfigKey(codegen::FromProto(head.best_config()));
    const v1::Trial& final_step = r.steps.back();
    EXPECT_FALSE(final_step.step().probe());
    EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(final_step.step().kernels(7).config())), best);
    EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(head.step_finalists(0).config())), second);
    EXPECT_DOUBLE_EQ(head.step_finalists(0).score(), 1.0);
    // (each time inside the step is the finalist's own time alone, 1000-1020 us, times `lead`)
    if (lead < 0.9)
      EXPECT_GT(head.step_finalists(1).score(), 1.3);
    else
      EXPECT_LT(head.step_finalists(1).score(), 1.02);
    if (lead < 0.9) {  // a lead beyond the margin: the best is the runner-up, with its own figure
      EXPECT_EQ(best, second);
      EXPECT_NE(best, winner);
      EXPECT_GT(head.best().median_us(), 1000.0);
      EXPECT_LT(head.best().median_us(), 1030.0);
    } else {  // within the margin: the final rounds' winner stays
      EXPECT_EQ(best, winner);
    }
    // Tasks whose finalists tie inside the step keep their winners.
    for (int i = 0; i < r.job.tasks_size(); ++i)
      if (i != 7 && r.job.tasks(i).finalists_size() > 0) {
        EXPECT_EQ(codegen::ConfigKey(codegen::FromProto(r.job.tasks(i).best_config())),
                  codegen::ConfigKey(codegen::FromProto(r.job.tasks(i).finalists(0).config())))
            << i;
      }
  }
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
