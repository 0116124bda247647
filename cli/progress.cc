#include "cli/progress.h"

#include <algorithm>
#include <utility>

#include "cli/format.h"
#include "cli/table.h"

namespace kiln::cli {
namespace {

constexpr int kBarWidth = 24;

std::string Bar(int done, int budget) {
  int filled = budget > 0 ? std::clamp(done * kBarWidth / budget, 0, kBarWidth) : 0;
  return "[" + std::string(filled, '#') + std::string(kBarWidth - filled, '-') + "]";
}

}  // namespace

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

std::string RenderProgressLine(const v1::Job& job, int64_t now_ms,
                               const v1::Measurement* event_best) {
  int budget = job.spec().budget_trials();
  std::string line = Bar(job.trials_done(), budget) + "  " + std::to_string(job.trials_done()) +
                     "/" + (budget > 0 ? std::to_string(budget) : "?") + " trials";
  if (job.trials_failed() > 0) line += "  " + std::to_string(job.trials_failed()) + " failed";
  if (job.tasks_size() == 1 && job.tasks(0).final_trials() > 0)  // the final rounds (FINAL)
    line += "  final " + std::to_string(job.tasks(0).final_trials_done()) + "/" +
            std::to_string(job.tasks(0).final_trials());
  const v1::Measurement* best = nullptr;
  if (job.tasks_size() == 1 && job.tasks(0).has_best() && IsUsable(job.tasks(0).best()))
    best = &job.tasks(0).best();
  else if (job.tasks_size() <= 1 && event_best && IsUsable(*event_best))
    best = event_best;
  if (best) {
    line += "  best " + FormatMicros(best->median_us()) + " µs";
    if (best->gflops() > 0) line += " " + FormatFixed(best->gflops(), 1) + " GFLOP/s";
  } else if (job.tasks_size() > 1 && JobBestMicros(job) > 0) {
    line += "  step " + FormatMicros(JobBestMicros(job)) + " µs";
  } else {
    line += "  best -";
  }
  int64_t start = job.started_unix_ms() > 0 ? job.started_unix_ms() : job.created_unix_ms();
  int64_t end = job.finished_unix_ms() > 0 ? job.finished_unix_ms() : now_ms;
  if (start > 0) line += "  " + FormatDuration((end - start) / 1000);
  line += "  " + v1::JobState_Name(job.state());
  return line;
}

ProgressPrinter::ProgressPrinter(std::ostream& err, bool tty, std::function<int64_t()> now_ms,
                                 int64_t interval_ms)
    : err_(err), tty_(tty), now_ms_(std::move(now_ms)), interval_ms_(interval_ms) {}

void ProgressPrinter::OnEvent(const v1::JobEvent& event) {
  // Before the progress line, so that a job stuck in QUEUED is never silent about why.
  const std::string& waiting = event.job().waiting();
  if (waiting != waiting_) {
    if (!waiting.empty())
      Notice("kiln: waiting: " + waiting);
    else if (!IsTerminal(event.job().state()))
      Notice("kiln: a matching worker is live");  // it may never have been: no "again"
    waiting_ = waiting;
    printed_ = false;  // the progress line follows the notice
    last_line_.clear();
  }
  if (event.kind() == v1::JobEvent::NEW_BEST && event.has_best()) best_ = event.best();
  double best_us = JobBestMicros(event.job());
  if (best_us <= 0 && best_ && IsUsable(*best_)) best_us = best_->median_us();
  bool new_best = event.kind() == v1::JobEvent::NEW_BEST || best_us != last_best_us_;
  last_best_us_ = best_us;
  bool state_changed = !last_state_ || *last_state_ != event.job().state();
  last_state_ = event.job().state();
  int64_t now = now_ms_();
  std::string line = RenderProgressLine(event.job(), now, best_ ? &*best_ : nullptr);
  int64_t min_gap = tty_ ? 100 : interval_ms_;
  bool due = !printed_ || new_best || state_changed || now - last_draw_ms_ >= min_gap;
  if (!due || (line == last_line_ && !state_changed)) return;
  last_draw_ms_ = now;
  last_line_ = line;
  printed_ = true;
  Draw(line);
}

void ProgressPrinter::Draw(const std::string& line) {
  if (!tty_) {
    err_ << line << "\n" << std::flush;
    return;
  }
  size_t width = DisplayWidth(line);
  err_ << "\r" << line;
  if (drawn_width_ > width) err_ << std::string(drawn_width_ - width, ' ');
  err_ << std::flush;
  drawn_width_ = width;
}

void ProgressPrinter::Notice(const std::string& text) {
  if (tty_ && drawn_width_ > 0) err_ << "\n";
  drawn_width_ = 0;
  err_ << text << "\n" << std::flush;
}

void ProgressPrinter::Finish() {
  if (tty_ && drawn_width_ > 0) err_ << "\n" << std::flush;
  drawn_width_ = 0;
}

}  // namespace kiln::cli
