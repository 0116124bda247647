// The CLI's side of jobs no worker can run (Job.waiting) and of model jobs' figures: the watch's
// notice, `kiln jobs` (waiting lines, tokens/s), model results naming their step, and the
// local store's flags of `kiln tune --local`.
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "cli/results.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kWaiting[] =
    "no live worker matches chip 'opencl'; live: cpu-x86_64-avx512, sim-systolic-128x128";

v1::Job QueuedJob(const std::string& waiting) {
  v1::Job job;
  job.set_id("j-000000000007");
  job.set_state(v1::QUEUED);
  job.mutable_spec()->set_chip("opencl");
  job.mutable_spec()->set_budget_trials(2);
  job.set_waiting(waiting);
  return job;
}

v1::JobEvent Event(const v1::Job& job) {
  v1::JobEvent e;
  e.set_kind(v1::JobEvent::STATE);
  *e.mutable_job() = job;
  return e;
}

google::protobuf::Struct ParseJson(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok()) << text;
  return s;
}

TEST(WaitingTest, TheWatchSaysOncePerChangeWhyTheJobWaits) {
  std::ostringstream err;
  int64_t now = 1'000'000;
  ProgressPrinter printer(err, /*tty=*/false, [&] { return now; });
  printer.OnEvent(Event(QueuedJob(kWaiting)));
  EXPECT_THAT(err.str(), HasSubstr(std::string("kiln: waiting: ") + kWaiting + "\n"));
  err.str("");
  now += 5000;
  printer.OnEvent(Event(QueuedJob(kWaiting)));  // unchanged: not said again
  EXPECT_THAT(err.str(), Not(HasSubstr("waiting")));
  err.str("");
  v1::Job running = QueuedJob("");
  running.set_state(v1::RUNNING);
  printer.OnEvent(Event(running));
  EXPECT_THAT(err.str(), HasSubstr("kiln: a matching worker is live\n"));
  EXPECT_THAT(err.str(), HasSubstr("RUNNING"));
}

TEST(WaitingTest, JobsListsWhyAJobWaits) {
  v1::Job waiting = QueuedJob(kWaiting);
  v1::Job other = QueuedJob("");
  other.set_id("j-000000000008");
  std::string table = FormatJobsTable({waiting, other});
  EXPECT_THAT(table, HasSubstr(std::string("job j-000000000007 waiting: ") + kWaiting + "\n"));
  EXPECT_THAT(table, Not(HasSubstr("j-000000000008 waiting")));
  EXPECT_THAT(table, HasSubstr("BEST (µs)"));  // no model job: the column as before
  auto parsed = ParseJson(JobsJson({waiting}));
  const auto& job = parsed.fields().at("jobs").list_value().values(0).struct_value().fields();
  EXPECT_EQ(job.at("waiting").string_value(), kWaiting);
}

v1::Job ModelJob(double measured, double estimated) {
  v1::Job job;
  job.set_id("j-000000000009");
  job.set_state(v1::SUCCEEDED);
  job.mutable_spec()->set_model("tinyllama-1.1b");
  job.mutable_spec()->set_phase("decode");
  job.mutable_spec()->set_batch(4);
  job.mutable_spec()->set_context(2048);
  job.mutable_spec()->set_dtype(v1::BF16);
  job.mutable_spec()->set_chip("cpu");
  v1::TaskResult* t = job.add_tasks();
  t->set_workload_key("gemm m=4 n=5632 k=2048 bf16");
  t->set_count(44);
  t->mutable_best()->set_status(v1::OK);
  t->mutable_best()->set_median_us(300);
  job.mutable_tokens_per_second()->set_measured(measured);
  job.mutable_tokens_per_second()->set_estimated(estimated);
  return job;
}

TEST(WaitingTest, JobsShowsAModelJobsTokensPerSecond) {
  v1::Job op = QueuedJob("");
  op.set_state(v1::SUCCEEDED);
  op.add_tasks()->mutable_best()->set_median_us(812.5);
  op.mutable_tasks(0)->mutable_best()->set_status(v1::OK);
  std::string table = FormatJobsTable({ModelJob(61.25, 75), op});
  EXPECT_THAT(table, HasSubstr("61.2 tok/s"));
  EXPECT_THAT(table, Not(HasSubstr("13200")));  // not the step time (44 x 300 us)
  EXPECT_THAT(table, HasSubstr("812.5 µs"));
  EXPECT_THAT(table, Not(HasSubstr("BEST (µs)")));
  EXPECT_THAT(FormatJobsTable({ModelJob(0, 75)}), HasSubstr("75.0 tok/s (est.)"));
  auto parsed = ParseJson(JobsJson({ModelJob(61.25, 75)}));
  const auto& job = parsed.fields().at("jobs").list_value().values(0).struct_value().fields();
  EXPECT_DOUBLE_EQ(job.at("tokens_per_second").number_value(), 61.25);
  EXPECT_FALSE(job.at("tokens_per_second_estimated").bool_value());
}

TEST(WaitingTest, ModelResultsNameTheModelAndStep) {
  v1::GetResultsResponse r;
  *r.mutable_job() = ModelJob(61.25, 75);
  std::string table = FormatResultsTable(r);
  EXPECT_THAT(table,
              HasSubstr("model tinyllama-1.1b  phase decode  batch 4  context 2048  dtype bf16\n"));
  auto parsed = ParseJson(ResultsJson(r));
  const auto& model = parsed.fields().at("model").struct_value().fields();
  EXPECT_EQ(model.at("name").string_value(), "tinyllama-1.1b");
  EXPECT_EQ(model.at("phase").string_value(), "decode");
  EXPECT_EQ(model.at("batch").number_value(), 4);
  EXPECT_EQ(model.at("context").number_value(), 2048);
  EXPECT_EQ(model.at("dtype").string_value(), "bf16");
  // A prefill job names its prompt length; an operator job has no model line.
  r.mutable_job()->mutable_spec()->set_phase("prefill");
  r.mutable_job()->mutable_spec()->set_context(0);
  r.mutable_job()->mutable_spec()->set_prefill_tokens(512);
  EXPECT_THAT(FormatResultsTable(r), HasSubstr("phase prefill  batch 4  prompt 512 tokens"));
  v1::GetResultsResponse op;
  *op.mutable_job() = QueuedJob("");
  EXPECT_THAT(FormatResultsTable(op), Not(HasSubstr("model ")));
  EXPECT_EQ(ParseJson(ResultsJson(op)).fields().count("model"), 0u);
}

TEST(WaitingTest, TuneLocalListsAndCancelsTheLocalStore) {
  Invocation jobs;
  ASSERT_TRUE(
      ParseCommandLine({"tune", "--local", "--jobs", "--data-dir", "/tmp/kd"}, nullptr, &jobs)
          .ok());
  EXPECT_TRUE(jobs.local_jobs);
  EXPECT_EQ(jobs.data_dir, "/tmp/kd");
  Invocation cancel;
  ASSERT_TRUE(
      ParseCommandLine({"tune", "--local", "--cancel", "j-000000000001"}, nullptr, &cancel).ok());
  EXPECT_EQ(cancel.local_cancel, "j-000000000001");
  Invocation bad;
  absl::Status both =
      ParseCommandLine({"tune", "--local", "--jobs", "--cancel", "j-1"}, nullptr, &bad);
  EXPECT_THAT(std::string(both.message()), HasSubstr("exclusive"));
  absl::Status with_job = ParseCommandLine(
      {"tune", "--local", "--jobs", "--op", "gemm", "--shape", "M=8,N=8,K=8"}, nullptr, &bad);
  EXPECT_THAT(std::string(with_job.message()), HasSubstr("--op does not apply"));
  absl::Status submit = ParseCommandLine({"submit", "--jobs"}, nullptr, &bad);
  EXPECT_FALSE(submit.ok());
}

}  // namespace
}  // namespace kiln::cli
