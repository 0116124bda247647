// Results of a model job: per-operator share of the step, and tokens per second (estimated,
// measured, LibTorch's) in the table and in the JSON of DESIGN.md §8.
#include "cli/results.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::GetResultsResponse ModelResults(double measured, double baseline) {
  v1::GetResultsResponse r;
  v1::Job* job = r.mutable_job();
  job->set_id("j-000000000001");
  job->set_state(v1::SUCCEEDED);
  job->mutable_spec()->set_model("tinyllama-1.1b");
  for (auto [key, count, best, base] :
       {std::make_tuple("gemm m=1 n=5632 k=2048 fp32", 44, 300.0, 600.0),
        std::make_tuple("rmsnorm t=1 d=2048 fp32", 45, 2.0, 8.0)}) {
    v1::TaskResult* t = job->add_tasks();
    t->set_workload_key(key);
    t->set_count(count);
    t->mutable_best()->set_status(v1::OK);
    t->mutable_best()->set_median_us(best);
    t->set_baseline_name("libtorch-1.13.0-eager");
    t->mutable_baseline()->set_status(v1::OK);
    t->mutable_baseline()->set_median_us(base);
  }
  v1::StepResult* s = job->mutable_tokens_per_second();
  s->set_estimated(75.0);
  s->set_measured(measured);
  s->set_baseline_name("libtorch-1.13.0-eager");
  s->set_baseline_measured(baseline);
  s->set_note("measured on 6 of 22 layers, layer time scaled by 22/6 (head measured once)");
  s->set_bytes_per_token(4.18e9);
  s->set_read_gbytes_per_s(83.6);
  s->set_bound(20);
  s->set_bound_fraction(0.754);
  s->add_read_gbytes_per_s_samples(83.6);
  return r;
}

TEST(ModelResultsTest, TableShowsShareAndTokensPerSecond) {
  std::string table = FormatResultsTable(ModelResults(60, 20));
  EXPECT_THAT(table, HasSubstr("SHARE"));
  EXPECT_THAT(table, HasSubstr("99.3%"));  // 44*300 of 44*300 + 45*2
  EXPECT_THAT(table, HasSubstr("estimated 75.00 tokens/s"));
  EXPECT_THAT(table, HasSubstr("measured 60.00 tokens/s"));
  EXPECT_THAT(table, HasSubstr("libtorch-1.13.0-eager 20.00 tokens/s  (3.00x)"));
  EXPECT_THAT(table, HasSubstr("6 of 22 layers"));
  EXPECT_THAT(table,
              HasSubstr("bound     20.00 tokens/s at 83.6 GB/s read next to the step "
                        "(4.180 GB a token: weights, KV cache or state): measured is 75% of it"));
  // A micro-benchmark win that loses end to end shows as such.
  EXPECT_THAT(FormatResultsTable(ModelResults(10, 20)), HasSubstr("SLOWER end to end"));
}

TEST(ModelResultsTest, NotesWhichOfEstimateAndStepIsOff) {
  EXPECT_THAT(FormatResultsTable(ModelResults(60, 20)), Not(HasSubstr("note:")));
  // An estimate above the memory bound (75 > 20 tokens/s) is the figure that is off.
  EXPECT_THAT(FormatResultsTable(ModelResults(10, 5)),
              HasSubstr("note: the estimate is above the bound"));
  v1::GetResultsResponse r = ModelResults(10, 5);
  r.mutable_job()->mutable_tokens_per_second()->set_bound(0);  // no bound read
  EXPECT_THAT(FormatResultsTable(r), HasSubstr("note: the measured step is well below"));
  r.mutable_job()->mutable_tokens_per_second()->set_bound(100);  // the estimate within it
  EXPECT_THAT(FormatResultsTable(r), HasSubstr("note: the measured step is well below"));
}

// The measured step's kernels: where its time went, beside each kernel alone, and the tasks'
// in-step factors from the probe step.
TEST(ModelResultsTest, KernelTimesInsideTheStepAreShown) {
  v1::GetResultsResponse r = ModelResults(60, 20);
  v1::StepResult* s = r.mutable_job()->mutable_tokens_per_second();
  s->set_step_us(20000);
  v1::StepOpTime* o = s->add_op_times();
  o->set_workload_key("rmsnorm t=1 d=2048 fp32");
  o->set_roles("input_norm,post_norm");
  o->set_calls_per_step(45);
  o->set_in_step_us(1.5);
  o->set_isolated_us(2.0);
  o = s->add_op_times();
  o->set_workload_key("gemm m=1 n=5632 k=2048 fp32");
  o->set_calls_per_step(44);
  o->set_in_step_us(310);
  r.mutable_job()->mutable_tasks(1)->set_in_step_factor(0.75);
  const std::string table = FormatResultsTable(r);
  EXPECT_THAT(table, HasSubstr("inside the measured step"));
  EXPECT_NE(table.find("68.2%"), std::string::npos) << table;  // 44 * 310 / 20000
  EXPECT_NE(table.find("0.3%"), std::string::npos) << table;   // 45 * 1.5 / 20000
  google::protobuf::Struct j;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ResultsJson(r), &j).ok());
  const auto& ops =
      j.fields().at("tokens_per_second").struct_value().fields().at("op_times").list_value();
  ASSERT_EQ(ops.values_size(), 2);
  const auto& first = ops.values(0).struct_value().fields();
  EXPECT_EQ(first.at("roles").string_value(), "input_norm,post_norm");
  EXPECT_DOUBLE_EQ(first.at("in_step_us").number_value(), 1.5);
  EXPECT_DOUBLE_EQ(first.at("isolated_us").number_value(), 2.0);
  const auto& tasks = j.fields().at("tasks").list_value();
  EXPECT_DOUBLE_EQ(tasks.values(1).struct_value().fields().at("in_step_factor").number_value(),
                   0.75);
  EXPECT_EQ(tasks.values(0).struct_value().fields().at("in_step_factor").kind_case(),
            google::protobuf::Value::kNullValue);
}

// A task whose runner-up in the final rounds was faster inside the step: both lines mark the
// configuration that became the best, and the JSON lists the step's rounds.
TEST(ModelResultsTest, FinalistsChosenInsideTheStepAreShown) {
  v1::GetResultsResponse r = ModelResults(60, 20);
  v1::TaskResult* t = r.mutable_job()->mutable_tasks(0);
  v1::Config a, b;
  (*a.mutable_knobs())["MR"] = 4;
  (*b.mutable_knobs())["MR"] = 8;
  *t->mutable_best_config() = b;
  for (auto [config, score] : {std::make_pair(a, 1.0), std::make_pair(b, 1.02)}) {
    v1::Finalist* f = t->add_finalists();
    *f->mutable_config() = config;
    f->set_score(score);
    f->add_round_median_us(300);
  }
  for (auto [config, score] : {std::make_pair(b, 1.0), std::make_pair(a, 1.414)}) {
    v1::Finalist* f = t->add_step_finalists();
    *f->mutable_config() = config;
    f->set_score(score);
    f->add_round_median_us(280);
  }
  const std::string table = FormatResultsTable(r);
  EXPECT_THAT(table, HasSubstr("final rounds: 2 configurations timed in turns, 1 rounds; time "
                               "over each round's fastest (median): 1.000, 1.020 (best)"));
  EXPECT_THAT(table, HasSubstr("inside the step: 2 configurations timed in turns, 1 rounds; "
                               "time over each round's fastest (median): 1.000 (best), 1.414"));
  google::protobuf::Struct j;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ResultsJson(r), &j).ok());
  const auto& step =
      j.fields().at("tasks").list_value().values(0).struct_value().fields().at("step_finalists");
  ASSERT_EQ(step.list_value().values_size(), 2);
  EXPECT_DOUBLE_EQ(step.list_value().values(1).struct_value().fields().at("score").number_value(),
                   1.414);
}

TEST(ModelResultsTest, JsonHasTokensPerSecond) {
  google::protobuf::Struct s;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ResultsJson(ModelResults(60, 20)), &s).ok());
  const auto& tps = s.fields().at("tokens_per_second").struct_value().fields();
  EXPECT_DOUBLE_EQ(tps.at("estimated").number_value(), 75);
  EXPECT_DOUBLE_EQ(tps.at("measured").number_value(), 60);
  const auto& base = tps.at("baseline").struct_value().fields();
  EXPECT_EQ(base.at("name").string_value(), "libtorch-1.13.0-eager");
  EXPECT_DOUBLE_EQ(base.at("measured").number_value(), 20);
  const auto& bound = tps.at("bound").struct_value().fields();
  EXPECT_DOUBLE_EQ(bound.at("tokens_per_second").number_value(), 20);
  EXPECT_DOUBLE_EQ(bound.at("fraction").number_value(), 0.754);
  EXPECT_DOUBLE_EQ(bound.at("read_gbytes_per_s").number_value(), 83.6);
  EXPECT_EQ(bound.at("read_gbytes_per_s_samples").list_value().values_size(), 1);
  // Operator jobs have no tokens_per_second.
  v1::GetResultsResponse op = ModelResults(60, 20);
  op.mutable_job()->mutable_spec()->clear_model();
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ResultsJson(op), &s).ok());
  EXPECT_FALSE(s.fields().count("tokens_per_second"));
}

}  // namespace
}  // namespace kiln::cli
