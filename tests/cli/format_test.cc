// Tests of the kiln client's JSON text, tables and results rendering.
#include "cli/format.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cli/results.h"
#include "cli/table.h"
#include "common/json_text.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;
using ::testing::Not;

Struct ParseJson(const std::string& text) {
  Struct parsed;
  auto status = google::protobuf::util::JsonStringToMessage(text, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return parsed;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value* missing = new Value();
  auto it = s.fields().find(key);
  EXPECT_TRUE(it != s.fields().end()) << "missing key " << key;
  return it == s.fields().end() ? *missing : it->second;
}

TEST(JsonTextTest, EscapesStringsAndWritesNonFiniteNumbersAsNull) {
  nlohmann::ordered_json value = {{"text", "quote \" backslash \\ newline \n tab \t bell \x07 µs"},
                                  {"nan", std::nan("")},
                                  {"inf", std::numeric_limits<double>::infinity()},
                                  {"list", {82.6, -3, true, nullptr}},
                                  {"empty", nlohmann::ordered_json::object()}};
  const std::string text = JsonText(value);
  EXPECT_EQ(text,
            "{\"text\":\"quote \\\" backslash \\\\ newline \\n tab \\t bell \\u0007 µs\","
            "\"nan\":null,\"inf\":null,\"list\":[82.6,-3,true,null],\"empty\":{}}");
  Struct parsed = ParseJson(text);
  EXPECT_EQ(Field(parsed, "text").string_value(),
            "quote \" backslash \\ newline \n tab \t bell \x07 µs");
}

TEST(JsonTextTest, NumbersRoundTripShortest) {
  EXPECT_EQ(JsonText(812.5), "812.5");
  EXPECT_EQ(JsonText(82.6), "82.6");
  EXPECT_EQ(JsonText(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(JsonText(1e300), "1e+300");
  EXPECT_EQ(JsonText(std::nan("")), "null");
  EXPECT_EQ(JsonText(-std::numeric_limits<double>::infinity()), "null");
}

TEST(JsonTextTest, InvalidUtf8IsReplacedNotThrown) {
  // A message cut inside a multi-byte character, as a worker's compiler output can be.
  const std::string cut = std::string("error: \xC2") + " and \xFF";
  std::string text;
  ASSERT_NO_THROW(text = JsonText({{"message", cut}}));
  EXPECT_EQ(Field(ParseJson(text), "message").string_value(),
            "error: \xEF\xBF\xBD"
            " and \xEF\xBF\xBD");
}

TEST(TableTest, AlignsColumnsCountingUtf8AsOneColumn) {
  std::string table =
      FormatTable({"A", "BEST (µs)", "C"}, {{"long-value", "1.0", ""}, {"x", "22.50", "z"}});
  EXPECT_EQ(table,
            "A           BEST (µs)  C\n"
            "long-value  1.0\n"
            "x           22.50      z\n");
  EXPECT_EQ(FormatMicros(812.54), "812.5");
  EXPECT_EQ(FormatMicros(0.8125), "0.812");
  EXPECT_EQ(FormatMicros(12345.6), "12346");
  EXPECT_EQ(FormatMicros(0), "-");
  EXPECT_EQ(FormatDuration(42), "42s");
  EXPECT_EQ(FormatDuration(187), "3m07s");
  EXPECT_EQ(FormatDuration(7500), "2h05m");
}

v1::Measurement Meas(double median, double gflops) {
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(median);
  m.set_p10_us(median * 0.98);
  m.set_p90_us(median * 1.03);
  m.set_cv(0.01);
  m.set_gflops(gflops);
  m.set_gbytes_per_s(gflops / 4);
  m.set_max_error(1e-6);
  m.add_samples_us(median);
  m.add_samples_us(median * 1.01);
  return m;
}

v1::GetResultsResponse SampleResults() {
  v1::GetResultsResponse r;
  v1::Job* job = r.mutable_job();
  job->set_id("job-42");
  job->set_state(v1::SUCCEEDED);
  job->set_chip_type("cpu-x86_64-avx512");
  job->set_message("budget reached");
  job->mutable_spec()->set_chip("cpu");
  job->mutable_spec()->set_budget_trials(64);
  job->set_trials_done(64);
  job->set_trials_failed(4);
  v1::TaskResult* t = job->add_tasks();
  t->set_workload_key("gemm m=8 n=4096 k=4096 fp32");
  t->set_count(1);
  t->set_trials_ok(60);
  t->set_trials_failed(4);
  t->set_trials_budget(64);
  (*t->mutable_best_config()->mutable_knobs())["MR"] = 8;
  (*t->mutable_best_config()->mutable_knobs())["KC"] = 256;
  *t->mutable_best() = Meas(812.5, 82.6);
  t->set_baseline_name("openblas");
  *t->mutable_baseline() = Meas(1650.0, 40.7);
  // A second task with no measurements at all.
  v1::TaskResult* empty = job->add_tasks();
  empty->set_workload_key("gemm m=8 n=1024 k=4096 fp32");
  empty->set_count(2);
  empty->set_trials_failed(3);
  return r;
}

TEST(ResultsTest, JsonHasTheShapeOfTheDesign) {
  v1::ChipFingerprint chip;
  chip.set_chip_type("cpu-x86_64-avx512");
  chip.set_model("Xeon \"Gold\"");
  chip.add_isa_features("avx2");
  chip.add_isa_features("avx512f");
  chip.set_peak_gflops(1200.5);
  chip.set_read_gbytes_per_s(std::nan(""));
  chip.set_compiler("g++ 12.2");
  std::string json = ResultsJson(SampleResults(), &chip);
  EXPECT_THAT(json, Not(HasSubstr("\n")));
  Struct root = ParseJson(json);
  EXPECT_EQ(Field(root, "job_id").string_value(), "job-42");
  EXPECT_EQ(Field(root, "state").string_value(), "SUCCEEDED");
  EXPECT_EQ(Field(root, "chip_type").string_value(), "cpu-x86_64-avx512");
  EXPECT_EQ(Field(root, "message").string_value(), "budget reached");
  const auto& tasks = Field(root, "tasks").list_value();
  ASSERT_EQ(tasks.values_size(), 2);

  const Struct& task = tasks.values(0).struct_value();
  EXPECT_EQ(Field(task, "workload").string_value(), "gemm m=8 n=4096 k=4096 fp32");
  EXPECT_EQ(Field(task, "count").number_value(), 1);
  const Struct& trials = Field(task, "trials").struct_value();
  EXPECT_EQ(Field(trials, "ok").number_value(), 60);
  EXPECT_EQ(Field(trials, "failed").number_value(), 4);
  EXPECT_EQ(Field(trials, "budget").number_value(), 64);
  const Struct& best = Field(task, "best").struct_value();
  EXPECT_EQ(Field(Field(best, "config").struct_value(), "MR").number_value(), 8);
  EXPECT_EQ(Field(Field(best, "config").struct_value(), "KC").number_value(), 256);
  EXPECT_EQ(Field(best, "median_us").number_value(), 812.5);
  EXPECT_EQ(Field(best, "gflops").number_value(), 82.6);
  for (const char* key : {"p10_us", "p90_us", "cv", "gbytes_per_s", "max_error"})
    EXPECT_GT(Field(best, key).number_value(), 0) << key;
  EXPECT_EQ(Field(best, "samples_us").list_value().values_size(), 2);
  const Struct& baseline = Field(task, "baseline").struct_value();
  EXPECT_EQ(Field(baseline, "name").string_value(), "openblas");
  EXPECT_EQ(Field(baseline, "median_us").number_value(), 1650.0);
  EXPECT_EQ(Field(baseline, "samples_us").list_value().values_size(), 2);
  EXPECT_NEAR(Field(task, "speedup_vs_baseline").number_value(), 1650.0 / 812.5, 1e-12);

  const Struct& none = tasks.values(1).struct_value();
  EXPECT_EQ(Field(none, "count").number_value(), 2);
  EXPECT_EQ(Field(none, "best").kind_case(), Value::kNullValue);
  EXPECT_EQ(Field(none, "baseline").kind_case(), Value::kNullValue);
  EXPECT_EQ(Field(none, "speedup_vs_baseline").kind_case(), Value::kNullValue);

  const Struct& c = Field(root, "chip").struct_value();
  EXPECT_EQ(Field(c, "model").string_value(), "Xeon \"Gold\"");
  EXPECT_EQ(Field(c, "isa_features").list_value().values_size(), 2);
  EXPECT_EQ(Field(c, "peak_gflops").number_value(), 1200.5);
  EXPECT_EQ(Field(c, "read_gbytes_per_s").kind_case(), Value::kNullValue);
  EXPECT_EQ(Field(c, "compiler").string_value(), "g++ 12.2");

  Struct no_chip = ParseJson(ResultsJson(SampleResults()));
  EXPECT_EQ(no_chip.fields().count("chip"), 0u);
}

TEST(ResultsTest, BestAndBaselineFallBackToTrials) {
  v1::GetResultsResponse r;
  r.mutable_job()->set_id("j");
  r.mutable_job()->add_tasks()->set_workload_key("gemm m=1 n=2 k=3 fp32");
  auto add_trial = [&](v1::TrialKind kind, double median, v1::MeasurementStatus status) {
    v1::Trial* t = r.add_trials();
    t->set_kind(kind);
    t->set_task_index(0);
    *t->mutable_measurement() = Meas(median, 1);
    t->mutable_measurement()->set_status(status);
    (*t->mutable_config()->mutable_knobs())["MR"] = static_cast<int64_t>(median);
  };
  add_trial(v1::TUNE, 50, v1::OK);
  add_trial(v1::TUNE, 10, v1::WRONG_RESULT);
  add_trial(v1::TUNE, 40, v1::OK);
  add_trial(v1::BASELINE, 80, v1::OK);
  auto tasks = SummarizeTasks(r);
  ASSERT_EQ(tasks.size(), 1u);
  ASSERT_TRUE(tasks[0].best.has_value());
  EXPECT_EQ(tasks[0].best->median_us(), 40);
  EXPECT_EQ(tasks[0].best_config.knobs().at("MR"), 40);
  ASSERT_TRUE(tasks[0].baseline.has_value());
  EXPECT_EQ(tasks[0].baseline_name, "baseline");
  EXPECT_DOUBLE_EQ(*tasks[0].speedup, 2.0);
}

TEST(ResultsTest, TableShowsJobTasksBaselineAndConfig) {
  std::string table = FormatResultsTable(SampleResults());
  EXPECT_THAT(table, HasSubstr("job job-42  SUCCEEDED  chip cpu-x86_64-avx512\n"));
  EXPECT_THAT(table, HasSubstr("budget reached\n"));
  EXPECT_THAT(table, HasSubstr("WORKLOAD"));
  EXPECT_THAT(table, HasSubstr("BEST (µs)"));
  EXPECT_THAT(table, HasSubstr("gemm m=8 n=4096 k=4096 fp32  1      60/4       812.5"));
  EXPECT_THAT(table, HasSubstr("82.6"));
  EXPECT_THAT(table, HasSubstr("openblas 1650.0"));
  EXPECT_THAT(table, HasSubstr("2.03x"));
  EXPECT_THAT(table, HasSubstr("best config (gemm m=8 n=4096 k=4096 fp32): KC=256 MR=8\n"));
  EXPECT_THAT(table, HasSubstr("gemm m=8 n=1024 k=4096 fp32  2      0/3        -"));
}

// The final rounds: scores under the best configuration, every finalist in the JSON.
TEST(ResultsTest, FinalRoundsAreShownWithTheirScores) {
  v1::GetResultsResponse r = SampleResults();
  r.mutable_job()->mutable_tasks()->DeleteSubrange(1, 1);
  v1::TaskResult* t = r.mutable_job()->mutable_tasks(0);
  auto add = [&](int64_t mr, double score, bool failed, std::vector<double> rounds) {
    v1::Finalist* f = t->add_finalists();
    (*f->mutable_config()->mutable_knobs())["MR"] = mr;
    f->set_score(score);
    f->set_failed(failed);
    for (double us : rounds) f->add_round_median_us(us);
  };
  add(8, 1.0, false, {812.5, 1600, 820});
  add(4, 1.05, false, {870, 1700, 860});
  add(6, 0, true, {900, 0, 905});
  EXPECT_THAT(FormatResultsTable(r),
              HasSubstr("best config: KC=256 MR=8\n  final rounds: 3 configurations timed in "
                        "turns, 3 rounds; time over each round's fastest (median): 1.000 (best), "
                        "1.050, failed\n"));
  Struct root = ParseJson(ResultsJson(r));
  const Struct& task = Field(root, "tasks").list_value().values(0).struct_value();
  const auto& finalists = Field(task, "finalists").list_value();
  ASSERT_EQ(finalists.values_size(), 3);
  const Struct& second = finalists.values(1).struct_value();
  EXPECT_EQ(Field(Field(second, "config").struct_value(), "MR").number_value(), 4);
  EXPECT_EQ(Field(second, "score").number_value(), 1.05);
  EXPECT_EQ(Field(second, "round_median_us").list_value().values(1).number_value(), 1700);
  EXPECT_TRUE(Field(finalists.values(2).struct_value(), "failed").bool_value());
  Struct none = ParseJson(ResultsJson(SampleResults()));
  EXPECT_EQ(Field(Field(none, "tasks").list_value().values(0).struct_value(), "finalists")
                .list_value()
                .values_size(),
            0);
}

// Refused trials say why: each status's count and the latest few messages, one line each, in the
// table; the latest 20 with config, kind, status and message (cut) in the JSON, and how many more.
// The composed step's refusal is the job's, not a task's.
TEST(ResultsTest, RefusedTrialsSayWhy) {
  v1::GetResultsResponse r = SampleResults();
  auto add = [&](v1::TrialKind kind, v1::MeasurementStatus status, int64_t mr,
                 const std::string& message) {
    v1::Trial* t = r.add_trials();
    t->set_kind(kind);
    t->set_task_index(0);
    t->set_state(v1::DONE);
    (*t->mutable_config()->mutable_knobs())["MR"] = mr;
    t->mutable_measurement()->set_status(status);
    t->mutable_measurement()->set_message(message);
    return t;
  };
  add(v1::TUNE, v1::OK, 8, "");
  for (int i = 0; i < 20; ++i)
    add(v1::TUNE, v1::COMPILE_ERROR, i,
        "error: 'vfmadd' was not declared\n" + std::string(900, 'x'));
  add(v1::TUNE, v1::SUSPECT, 21, "median 1 us is faster than physically possible");
  add(v1::REMEASURE, v1::OK, 22, "demoted: re-measured 812.5 us vs 760.1 us first (+6.9%)")
      ->mutable_measurement()
      ->set_demoted(true);
  add(v1::REMEASURE, v1::OK, 23, "");  // confirmed: not refused
  add(v1::FINAL, v1::WRONG_RESULT, 24, "wrong result: out[3] = nan, want 0.5");
  add(v1::STEP, v1::WRONG_RESULT, 0, "step refused: max_error 0.2 > tolerance 0.001");

  const std::string table = FormatResultsTable(r);
  EXPECT_THAT(table,
              HasSubstr("refused (gemm m=8 n=4096 k=4096 fp32): 23 trials (COMPILE_ERROR 20, "
                        "DEMOTED 1, SUSPECT 1, WRONG_RESULT 1); the latest 3:\n"
                        "  SUSPECT MR=21: median 1 us is faster than physically possible\n"
                        "  DEMOTED (REMEASURE) MR=22: demoted: re-measured 812.5 us vs 760.1 us "
                        "first (+6.9%)\n"
                        "  WRONG_RESULT (FINAL) MR=24: wrong result: out[3] = nan, want 0.5\n"));
  EXPECT_THAT(table, Not(HasSubstr("max_error 0.2")));
  EXPECT_THAT(table, Not(HasSubstr("xxxx")));  // one line per refusal

  Struct root = ParseJson(ResultsJson(r));
  const auto& tasks = Field(root, "tasks").list_value();
  const Struct& task = tasks.values(0).struct_value();
  const auto& failed = Field(task, "failed_trials").list_value();
  ASSERT_EQ(failed.values_size(), 20);
  EXPECT_EQ(Field(task, "failed_trials_omitted").number_value(), 3);
  const Struct& by_status = Field(task, "failed_trials_by_status").struct_value();
  EXPECT_EQ(Field(by_status, "COMPILE_ERROR").number_value(), 20);
  EXPECT_EQ(Field(by_status, "DEMOTED").number_value(), 1);
  EXPECT_EQ(by_status.fields().count("OK"), 0u);
  const Struct& compile = failed.values(0).struct_value();  // the 4th of 20 compile errors
  EXPECT_EQ(Field(Field(compile, "config").struct_value(), "MR").number_value(), 3);
  EXPECT_EQ(Field(compile, "kind").string_value(), "TUNE");
  EXPECT_EQ(Field(compile, "status").string_value(), "COMPILE_ERROR");
  const std::string message = Field(compile, "message").string_value();
  EXPECT_EQ(message.size(), 500u);
  EXPECT_THAT(message, HasSubstr("error: 'vfmadd' was not declared\nxxx"));
  EXPECT_EQ(message.substr(497), "...");
  const Struct& last = failed.values(19).struct_value();
  EXPECT_EQ(Field(last, "kind").string_value(), "FINAL");
  EXPECT_EQ(Field(last, "status").string_value(), "WRONG_RESULT");
  EXPECT_EQ(Field(last, "message").string_value(), "wrong result: out[3] = nan, want 0.5");
  // The task without trials refuses none; the existing fields are all still there.
  const Struct& none = tasks.values(1).struct_value();
  EXPECT_EQ(Field(none, "failed_trials").list_value().values_size(), 0);
  EXPECT_EQ(Field(none, "failed_trials_omitted").number_value(), 0);
  EXPECT_THAT(FormatResultsTable(SampleResults()), Not(HasSubstr("refused")));
}

v1::Job SampleJob() { return SampleResults().job(); }

TEST(FormatTest, JobsTable) {
  EXPECT_EQ(FormatJobsTable({}), "ID  STATE  CHIP  WORKLOAD/MODEL  TRIALS  BEST (µs)  CREATED\n");
  v1::Job job = SampleJob();
  job.mutable_tasks()->RemoveLast();
  job.set_created_unix_ms(0);
  std::string table = FormatJobsTable({job});
  EXPECT_THAT(table, HasSubstr("job-42  SUCCEEDED  cpu-x86_64-avx512  gemm m=8 n=4096 k=4096 fp32"
                               "  64/64   812.5      -\n"));
  Struct parsed = ParseJson(JobsJson({job, job}));
  EXPECT_EQ(Field(parsed, "jobs").list_value().values_size(), 2);
}

TEST(FormatTest, WorkersTableAndJson) {
  v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_name("lab-box-cpu");
  w.set_state("alive");
  w.set_trials_done(17);
  w.set_last_heartbeat_unix_ms(1'000'000);
  w.mutable_chip()->set_chip_type("cpu-x86_64-avx2");
  w.mutable_chip()->set_model("EPYC 7B13");
  w.mutable_chip()->set_cores(16);
  v1::WorkerInfo never;
  never.set_id("w-2");
  EXPECT_EQ(FormatWorkersTable({w, never}, 1'003'500),
            "NAME         ID   CHIP TYPE        MODEL      CORES  STATE  LAST HEARTBEAT  TRIALS\n"
            "lab-box-cpu  w-1  cpu-x86_64-avx2  EPYC 7B13  16     alive  3s ago          17\n"
            "-            w-2  -                -          -      -      never           0\n");
  Struct parsed = ParseJson(WorkersJson({w, never}, 1'003'500));
  const auto& list = Field(parsed, "workers").list_value();
  ASSERT_EQ(list.values_size(), 2);
  EXPECT_EQ(Field(list.values(0).struct_value(), "heartbeat_age_s").number_value(), 3);
  EXPECT_EQ(
      Field(Field(list.values(0).struct_value(), "chip").struct_value(), "cores").number_value(),
      16);
  EXPECT_EQ(Field(list.values(1).struct_value(), "heartbeat_age_s").kind_case(), Value::kNullValue);
}

}  // namespace
}  // namespace kiln::cli
