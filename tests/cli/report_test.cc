// `kiln report`: the HTML page made from a GetResults answer is self-contained, escapes what
// the job says, and draws its plots (convergence, roofline, and for model jobs share and tokens/s).
#include "cli/report.h"

#include <cstdlib>
#include <regex>
#include <string>

#include "cli/flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// KILN_REPORT_TEST_OUT=DIR keeps the pages rendered here, to look at them in a browser.
void Keep(const std::string& html, const std::string& name) {
  if (const char* dir = std::getenv("KILN_REPORT_TEST_OUT")) {
    ASSERT_TRUE(WriteReportFile(html, std::string(dir) + "/" + name).ok());
  }
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The i-th <svg>...</svg> of the page ("" when there are fewer).
std::string Svg(const std::string& html, size_t i) {
  size_t at = 0;
  for (size_t k = 0; k <= i; ++k) {
    at = html.find("<svg", k == 0 ? 0 : at + 1);
    if (at == std::string::npos) return "";
  }
  const size_t end = html.find("</svg>", at);
  return end == std::string::npos ? "" : html.substr(at, end + 6 - at);
}

bool HasRemoteReference(const std::string& html) {
  return std::regex_search(
      html, std::regex(R"re((src|href)\s*=\s*["']?\s*(https?:)?//)re", std::regex::icase));
}

v1::Measurement Ok(double us, double gflops, double gbytes) {
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(us);
  m.set_gflops(gflops);
  m.set_gbytes_per_s(gbytes);
  return m;
}

void AddTrial(v1::GetResultsResponse* r, int task, v1::TrialKind kind, int64_t mr,
              const v1::Measurement& m) {
  v1::Trial* t = r->add_trials();
  t->set_id("t" + std::to_string(r->trials_size()));
  t->set_task_index(task);
  t->set_kind(kind);
  t->set_state(v1::DONE);
  t->set_seq(r->trials_size());
  (*t->mutable_config()->mutable_knobs())["MR"] = mr;
  *t->mutable_measurement() = m;
  t->set_source_hash("sha256-" + std::to_string(mr));
  t->set_toolchain("g++ 12.2 -O3 -march=native");
  t->set_worker_id("w-1");
}

// One GEMM task: 8 measured configurations (MR 1..8, faster as MR grows), a compile error whose
// message carries markup, a wrong result, and the baseline.
v1::GetResultsResponse OperatorJob() {
  v1::GetResultsResponse r;
  v1::Job* job = r.mutable_job();
  job->set_id("j-000000000007");
  job->set_state(v1::SUCCEEDED);
  job->set_chip_type("cpu-x86_64-avx512");
  job->mutable_spec()->set_chip("cpu");
  job->mutable_spec()->set_budget_trials(10);
  job->set_message("done <b>bold</b>");
  v1::ChipFingerprint* chip = job->mutable_chip();
  chip->set_chip_type("cpu-x86_64-avx512");
  chip->set_kind("cpu");
  chip->set_model("Test CPU");
  chip->set_cores(8);
  chip->set_peak_gflops(800);
  chip->set_read_gbytes_per_s(40);
  chip->set_compiler("g++ 12.2");
  v1::TaskResult* task = job->add_tasks();
  task->set_workload_key("gemm m=8 n=1024 k=1024 fp32");
  task->set_count(1);
  task->set_trials_ok(8);
  task->set_trials_failed(2);
  task->set_trials_budget(10);
  for (int mr = 1; mr <= 8; ++mr) {
    const double us = 400.0 / mr + (mr % 3) * 20;
    AddTrial(&r, 0, v1::TUNE, mr, Ok(us, 16.8e6 / us / 1e3, 4.2e6 / us / 1e3 * 1.1));
    if (mr == 4) {
      v1::Measurement bad;
      bad.set_status(v1::COMPILE_ERROR);
      bad.set_message("error: <script>alert(1)</script> & 'quoted' \"text\"");
      AddTrial(&r, 0, v1::TUNE, 16, bad);
      bad.set_status(v1::WRONG_RESULT);
      bad.set_message("max error 0.5 <img src=\"https://evil.example/x.png\">");
      AddTrial(&r, 0, v1::TUNE, 32, bad);
    }
  }
  (*task->mutable_best_config()->mutable_knobs())["MR"] = 8;
  *task->mutable_best() = Ok(50, 336, 92);
  task->set_baseline_name("openblas-sgemv");
  *task->mutable_baseline() = Ok(120, 140, 38);
  AddTrial(&r, 0, v1::BASELINE, 0, Ok(120, 140, 38));
  return r;
}

TEST(ReportTest, HtmlEscapeEscapesMarkupAndDropsControls) {
  EXPECT_EQ(HtmlEscape("a<b>&\"'\x01z\n"), "a&lt;b&gt;&amp;&quot;&#39;z\n");
}

TEST(ReportTest, OperatorJobDrawsConvergenceAndRoofline) {
  const std::string html = ReportHtml(OperatorJob());
  Keep(html, "operator.html");
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_EQ(Count(html, "<svg"), 2u);  // one convergence plot (one task) and the roofline
  EXPECT_EQ(Count(html, "<svg"), Count(html, "</svg>"));
  // Everything from the job is escaped: no markup of its own comes through.
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("<img")));
  EXPECT_THAT(html, Not(HasSubstr("<b>bold")));
  EXPECT_THAT(html, HasSubstr("error: &lt;script&gt;alert(1)&lt;/script&gt; &amp; &#39;quoted&#39; "
                              "&quot;text&quot;"));
  EXPECT_FALSE(HasRemoteReference(html));
  EXPECT_THAT(html, HasSubstr("default-src 'none'"));  // a viewer fetches nothing

  const std::string convergence = Svg(html, 0);
  EXPECT_THAT(convergence, HasSubstr("<title>convergence of gemm m=8 n=1024 k=1024 fp32"));
  EXPECT_EQ(Count(convergence, "<circle"), 8u + 1);  // the trials, and the legend's
  EXPECT_EQ(Count(convergence, "class=\"refused\""), 2u + 1);
  EXPECT_EQ(Count(convergence, "class=\"best\""), 1u + 1);
  EXPECT_EQ(Count(convergence, "<path") - Count(convergence, "class=\"refused\""),
            2u + 2u);  // baseline line and reported best, each with its legend mark
  EXPECT_THAT(convergence, HasSubstr("openblas-sgemv 120.0 µs"));
  EXPECT_GE(Count(convergence, "class=\"ticklabel\""), 6u);  // both axes have figures
  EXPECT_THAT(convergence, HasSubstr("trial (in proposal order)"));

  const std::string roofline = Svg(html, 1);
  EXPECT_THAT(roofline, HasSubstr("<title>roofline"));
  EXPECT_EQ(Count(roofline, "class=\"cfg\""), 8u + 1);
  EXPECT_EQ(Count(roofline, "class=\"taskbest\""), 1u + 1);
  EXPECT_EQ(Count(roofline, "class=\"base\""), 1u + 1);
  EXPECT_EQ(Count(roofline, "class=\"roof\""), 2u + 1);  // bandwidth, peak, legend
  EXPECT_THAT(roofline, HasSubstr("peak 800 GFLOP/s"));
  EXPECT_THAT(roofline, HasSubstr("read 40 GB/s"));
  EXPECT_THAT(roofline, HasSubstr("arithmetic intensity (FLOP/byte, log)"));
  EXPECT_THAT(roofline, HasSubstr(">gemm m=8 n=1024 k=1024 fp32</text>"));  // legend
  EXPECT_GE(Count(html, "<path") + Count(html, "<polyline") + Count(html, "<circle") +
                Count(html, "<rect"),
            20u);

  // Refused trials by status with their first message; provenance.
  EXPECT_THAT(html, HasSubstr("<td>COMPILE_ERROR</td><td>1</td>"));
  EXPECT_THAT(html, HasSubstr("<td>WRONG_RESULT</td><td>1</td>"));
  EXPECT_THAT(html, HasSubstr("&lt;img src=&quot;https://evil.example/x.png&quot;&gt;"));
  EXPECT_THAT(html, HasSubstr("<td>sha256-8</td>"));  // the best kernel's source hash
  EXPECT_THAT(html, HasSubstr("g++ 12.2 -O3 -march=native"));
  EXPECT_THAT(html, HasSubstr("800.0 GFLOP/s"));
  EXPECT_THAT(html, HasSubstr("&quot;budgetTrials&quot;: 10"));  // the job spec
  EXPECT_THAT(html, Not(HasSubstr("id=\"model\"")));
}

TEST(ReportTest, ModelJobShowsShareAndTokensPerSecond) {
  v1::GetResultsResponse r;
  v1::Job* job = r.mutable_job();
  job->set_id("j-000000000009");
  job->set_state(v1::SUCCEEDED);
  job->mutable_spec()->set_model("tiny<llama>");
  job->mutable_spec()->set_batch(1);
  job->mutable_spec()->set_context(512);
  int task_index = 0;
  for (auto [key, count, best] : {std::make_tuple("gemm m=1 n=5632 k=2048 fp32", 44, 300.0),
                                  std::make_tuple("rmsnorm t=1 d=2048 fp32", 45, 2.0)}) {
    v1::TaskResult* t = job->add_tasks();
    t->set_workload_key(key);
    t->set_count(count);
    *t->mutable_best() = Ok(best, 1, 1);
    (*t->mutable_best_config()->mutable_knobs())["MR"] = 2;
    for (int mr = 1; mr <= 3; ++mr) AddTrial(&r, task_index, v1::TUNE, mr, Ok(best * mr, 2, 1));
    ++task_index;
  }
  v1::StepResult* s = job->mutable_tokens_per_second();
  s->set_estimated(75);
  s->set_measured(60);
  s->set_baseline_name("libtorch-1.13.0-eager");
  s->set_baseline_measured(20);
  s->set_bound(80);
  s->set_read_gbytes_per_s(83.6);
  s->set_bound_fraction(0.75);
  const std::string html = ReportHtml(r);
  Keep(html, "model.html");
  // Two convergence plots, the roofline, the share and the tokens/s charts.
  EXPECT_EQ(Count(html, "<svg"), 5u);
  EXPECT_THAT(html, HasSubstr("id=\"model\""));
  EXPECT_THAT(html, HasSubstr("Model <b>tiny&lt;llama&gt;</b>"));
  EXPECT_THAT(html, Not(HasSubstr("<llama>")));
  const std::string share = Svg(html, 3);
  EXPECT_THAT(share, HasSubstr("<title>share of the step per operator"));
  EXPECT_EQ(Count(share, "class=\"bar\""), 2u);
  EXPECT_THAT(share, HasSubstr("99.3%"));  // 44*300 of 44*300 + 45*2, the largest first
  EXPECT_LT(share.find("gemm m=1"), share.find("rmsnorm t=1"));
  const std::string tps = Svg(html, 4);
  EXPECT_EQ(Count(tps, "class=\"bar\""), 4u);  // bound, measured, estimated, baseline
  EXPECT_THAT(tps, HasSubstr("80.00 tokens/s"));
  EXPECT_THAT(tps, HasSubstr("libtorch-1.13.0-eager"));
  EXPECT_THAT(html, HasSubstr("75% of the memory bound"));
  EXPECT_THAT(html, HasSubstr("No trial was refused."));
  EXPECT_THAT(html, HasSubstr("no measured peak or read bandwidth"));  // no chip fingerprint
  EXPECT_FALSE(HasRemoteReference(html));
  // With the measured step's kernel times: a chart of where the measured step went.
  s->set_step_us(16000);
  v1::StepOpTime* o = s->add_op_times();
  o->set_workload_key("rmsnorm t=1 d=2048 fp32");
  o->set_calls_per_step(45);
  o->set_in_step_us(1.5);
  o = s->add_op_times();
  o->set_workload_key("gemm m=1 n=5632 k=2048 fp32");
  o->set_calls_per_step(44);
  o->set_in_step_us(320);
  o->set_isolated_us(300);
  const std::string with = ReportHtml(r);
  EXPECT_EQ(Count(with, "<svg"), 6u);
  const std::string measured = Svg(with, 4);
  EXPECT_THAT(measured, HasSubstr("<title>share of the measured step per kernel"));
  EXPECT_THAT(measured, HasSubstr("88.0%  (320.0 µs a call, alone 300.0)"));  // 44*320/16000
  EXPECT_LT(measured.find("gemm m=1"), measured.find("rmsnorm t=1"));
}

TEST(ReportTest, EmptyJobStillRenders) {
  v1::GetResultsResponse r;
  r.mutable_job()->set_id("j-1");
  r.mutable_job()->set_state(v1::QUEUED);
  const std::string html = ReportHtml(r);
  EXPECT_THAT(html, HasSubstr("No tasks."));
  EXPECT_THAT(html, HasSubstr("</html>"));
}

TEST(ReportTest, CommandLine) {
  Invocation inv;
  ASSERT_TRUE(ParseCommandLine({"report", "j-1", "--out", "r.html"}, nullptr, &inv).ok());
  EXPECT_EQ(inv.command, "report");
  EXPECT_EQ(inv.job_id, "j-1");
  EXPECT_EQ(inv.out, "r.html");
  Invocation missing;
  EXPECT_THAT(ParseCommandLine({"report"}, nullptr, &missing).message(), HasSubstr("missing JOB"));
  Invocation bad;
  EXPECT_THAT(ParseCommandLine({"report", "j-1", "--wait"}, nullptr, &bad).message(),
              HasSubstr("does not apply"));
  EXPECT_EQ(DefaultReportPath("j-1"), "kiln-report-j-1.html");
}

}  // namespace
}  // namespace kiln::cli
