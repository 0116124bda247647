// The live progress line of a running job: rendering, and redraw/throttle rules for TTY or logs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "kiln/v1/tuning_service.pb.h"

namespace kiln::cli {

// "[########----------------]  21/64 trials  2 failed  best 812.5 µs 82.6 GFLOP/s  0m42s  RUNNING"
// `event_best` is used when the job snapshot carries no best yet. `now_ms`: wall clock, for the
// elapsed time of an unfinished job.
std::string RenderProgressLine(const v1::Job& job, int64_t now_ms,
                               const v1::Measurement* event_best = nullptr);

// True for QUEUED/RUNNING's successors: SUCCEEDED, FAILED, CANCELLED.
bool IsTerminal(v1::JobState state);

// Draws progress for a stream of job events. On a TTY the line is redrawn in place with '\r'
// (at most ~10 times a second, padded with spaces; no escape codes). Otherwise a full line is
// printed on the first event, on a new best, on a state change, or every `interval_ms`.
// A job that no live worker can run says so on a line of its own ("kiln: waiting: ...").
class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream& err, bool tty, std::function<int64_t()> now_ms,
                  int64_t interval_ms = 2000);

  void OnEvent(const v1::JobEvent& event);
  // A message on a line of its own, e.g. "connection lost; reconnecting in 2s".
  void Notice(const std::string& text);
  // Ends the in-place line (TTY) so that later output starts on a fresh line.
  void Finish();

 private:
  void Draw(const std::string& line);

  std::ostream& err_;
  bool tty_;
  std::function<int64_t()> now_ms_;
  int64_t interval_ms_;
  std::optional<v1::Measurement> best_;
  std::optional<v1::JobState> last_state_;
  double last_best_us_ = 0;
  int64_t last_draw_ms_ = 0;
  size_t drawn_width_ = 0;  // TTY: width of the line now on screen; 0 if none
  std::string last_line_;
  bool printed_ = false;
  std::string waiting_;  // the job's last Job.waiting, said once per change
};

}  // namespace kiln::cli
