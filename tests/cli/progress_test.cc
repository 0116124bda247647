// Tests of the live progress line and its redraw rules.
#include "cli/progress.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Job RunningJob(int done, int failed, double best_us) {
  v1::Job job;
  job.set_id("j");
  job.set_state(v1::RUNNING);
  job.mutable_spec()->set_budget_trials(64);
  job.set_trials_done(done);
  job.set_trials_failed(failed);
  job.set_started_unix_ms(1'000'000);
  v1::TaskResult* task = job.add_tasks();
  if (best_us > 0) {
    task->mutable_best()->set_status(v1::OK);
    task->mutable_best()->set_median_us(best_us);
    task->mutable_best()->set_gflops(82.6);
  }
  return job;
}

v1::JobEvent Event(v1::Job job, v1::JobEvent::Kind kind = v1::JobEvent::PROGRESS) {
  v1::JobEvent e;
  e.set_kind(kind);
  *e.mutable_job() = job;
  return e;
}

TEST(ProgressTest, RendersBarCountsBestElapsedAndState) {
  EXPECT_EQ(RenderProgressLine(RunningJob(16, 2, 812.5), 1'042'000),
            "[######------------------]  16/64 trials  2 failed  best 812.5 µs 82.6 GFLOP/s"
            "  42s  RUNNING");
  EXPECT_EQ(RenderProgressLine(RunningJob(0, 0, 0), 1'000'500),
            "[------------------------]  0/64 trials  best -  0s  RUNNING");
  v1::Job done = RunningJob(64, 0, 700);
  done.set_state(v1::SUCCEEDED);
  done.set_finished_unix_ms(1'187'000);
  EXPECT_THAT(RenderProgressLine(done, 9'999'999'999),
              HasSubstr("[########################]  64/64 trials  best 700.0 µs"));
  EXPECT_THAT(RenderProgressLine(done, 9'999'999'999), HasSubstr("3m07s  SUCCEEDED"));
  // The final rounds, counted after the budget trials.
  v1::Job finals = RunningJob(64, 0, 700);
  finals.mutable_tasks(0)->set_final_trials(9);
  finals.mutable_tasks(0)->set_final_trials_done(4);
  EXPECT_THAT(RenderProgressLine(finals, 1'042'000), HasSubstr("64/64 trials  final 4/9  best"));
  // The event's best is used while the snapshot has none.
  v1::Measurement event_best;
  event_best.set_median_us(900);
  EXPECT_THAT(RenderProgressLine(RunningJob(3, 0, 0), 1'000'000, &event_best),
              HasSubstr("best 900.0 µs"));
}

TEST(ProgressTest, NonTtyPrintsLinesOnNewBestStateChangeOrInterval) {
  std::ostringstream err;
  int64_t now = 1'000'000;
  ProgressPrinter p(
      err, /*tty=*/false, [&] { return now; }, 2000);
  p.OnEvent(Event(RunningJob(1, 0, 0)));  // first: printed
  now += 500;
  p.OnEvent(Event(RunningJob(2, 0, 0)));  // too soon: skipped
  now += 100;
  p.OnEvent(Event(RunningJob(3, 0, 900), v1::JobEvent::NEW_BEST));  // new best: printed
  now += 2000;
  p.OnEvent(Event(RunningJob(4, 0, 900)));  // interval passed: printed
  v1::Job done = RunningJob(4, 0, 900);
  done.set_state(v1::SUCCEEDED);
  now += 10;
  p.OnEvent(Event(done, v1::JobEvent::STATE));  // state change: printed
  p.Finish();
  std::string out = err.str();
  EXPECT_THAT(out, Not(HasSubstr("\r")));
  EXPECT_THAT(out, Not(HasSubstr("\x1b")));
  EXPECT_THAT(out, Not(HasSubstr(" 2/64")));
  EXPECT_THAT(out, HasSubstr(" 1/64"));
  EXPECT_THAT(out, HasSubstr(" 3/64"));
  EXPECT_THAT(out, HasSubstr(" 4/64"));
  EXPECT_THAT(out, HasSubstr("SUCCEEDED\n"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4);
}

TEST(ProgressTest, TtyRedrawsInPlaceAndPadsShorterLines) {
  std::ostringstream err;
  int64_t now = 1'000'000;
  ProgressPrinter p(err, /*tty=*/true, [&] { return now; });
  p.OnEvent(Event(RunningJob(1, 7, 0)));
  now += 200;
  p.OnEvent(Event(RunningJob(2, 0, 0)));
  p.Notice("kiln: reconnecting");
  p.Finish();
  std::string out = err.str();
  EXPECT_EQ(out.rfind("\r[", 0), 0u);
  EXPECT_THAT(out, HasSubstr("RUNNING\r[----"));
  EXPECT_THAT(out, HasSubstr("RUNNING          \nkiln: reconnecting\n"));  // " 7 failed" erased
  EXPECT_THAT(out, Not(HasSubstr("\x1b")));
}

}  // namespace
}  // namespace kiln::cli
