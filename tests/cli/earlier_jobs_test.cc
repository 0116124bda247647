// What a job took from earlier jobs, on the command line: `kiln submit --extend JOB` and the
// results' account of the best known configurations timed again, the trials answered from the
// store, and the job that first found the best.
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/results.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kiln::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ExtendFlagTest, ContinuesAJobWithANewBudgetOnly) {
  Invocation inv;
  ASSERT_TRUE(
      ParseCommandLine({"submit", "--extend", "j-0123456789ab", "--budget", "5"}, nullptr, &inv)
          .ok());
  EXPECT_EQ(inv.spec.extend_job_id(), "j-0123456789ab");
  EXPECT_EQ(inv.spec.budget_trials(), 5);
  EXPECT_TRUE(inv.spec.chip().empty());  // the coordinator copies JOB's
  EXPECT_FALSE(inv.spec.has_workload());

  Invocation again;
  absl::Status s = ParseCommandLine(
      {"submit", "--extend", "j-0123456789ab", "--op", "gemm", "--shape", "M=1,N=2,K=3"}, nullptr,
      &again);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("leave out --op"));
  Invocation local;
  s = ParseCommandLine({"tune", "--local", "--extend", "j-0123456789ab"}, nullptr, &local);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--extend does not apply"));
}

v1::GetResultsResponse Results(int from_earlier, int cached, const std::string& best_from) {
  v1::GetResultsResponse r;
  v1::Job* job = r.mutable_job();
  job->set_id("j-00000000000b");
  job->set_state(v1::SUCCEEDED);
  job->mutable_spec()->set_extend_job_id("j-00000000000a");
  v1::TaskResult* t = job->add_tasks();
  t->set_workload_key("gemm m=8 n=1024 k=1024 fp32");
  t->set_trials_ok(6);
  t->set_trials_budget(6);
  (*t->mutable_best_config()->mutable_knobs())["MR"] = 8;
  t->mutable_best()->set_status(v1::OK);
  t->mutable_best()->set_median_us(200);
  t->mutable_best()->add_samples_us(200);
  t->set_trials_from_earlier_jobs(from_earlier);
  t->set_best_from_job(best_from);
  for (int i = 0; i < 6; ++i) {
    v1::Trial* trial = r.add_trials();
    trial->set_kind(v1::TUNE);
    trial->mutable_measurement()->set_status(v1::OK);
    trial->mutable_measurement()->set_median_us(300 + i);
    trial->mutable_measurement()->set_from_cache(i >= 6 - cached);
  }
  return r;
}

TEST(EarlierJobsResultsTest, TheTableAndJsonSayWhatCameFromEarlierJobs) {
  const v1::GetResultsResponse r = Results(3, 1, "j-00000000000a");
  const std::string table = FormatResultsTable(r);
  EXPECT_THAT(table, HasSubstr("continues job j-00000000000a"));
  EXPECT_THAT(table, HasSubstr("from earlier jobs: 2 best known configurations timed again, 1 "
                               "trials answered from their records; the best was first found by "
                               "job j-00000000000a"));
  const auto json = nlohmann::json::parse(ResultsJson(r));
  EXPECT_EQ(json["extend_job_id"], "j-00000000000a");
  const auto& from = json["tasks"][0]["from_earlier_jobs"];
  EXPECT_EQ(from["answered_from_records"], 1);
  EXPECT_EQ(from["seeded_from_best_known"], 2);
  EXPECT_EQ(from["best_from_job"], "j-00000000000a");

  // A first job: nothing from earlier jobs, no line, nulls in the JSON.
  v1::GetResultsResponse first = Results(0, 0, "");
  first.mutable_job()->mutable_spec()->clear_extend_job_id();
  EXPECT_THAT(FormatResultsTable(first), Not(HasSubstr("earlier jobs")));
  EXPECT_THAT(FormatResultsTable(first), Not(HasSubstr("continues job")));
  const auto none = nlohmann::json::parse(ResultsJson(first));
  EXPECT_TRUE(none["extend_job_id"].is_null());
  EXPECT_EQ(none["tasks"][0]["from_earlier_jobs"]["seeded_from_best_known"], 0);
  EXPECT_TRUE(none["tasks"][0]["from_earlier_jobs"]["best_from_job"].is_null());
}

}  // namespace
}  // namespace kiln::cli
