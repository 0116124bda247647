// Runs a child process with piped stdin/stdout/stderr, a wall-clock timeout and resource limits.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct SubprocessOptions {
  std::string stdin_data;
  double timeout_seconds = 60;
  int64_t memory_limit_bytes = 0;      // RLIMIT_AS; 0 = none
  size_t max_output_bytes = 1 << 20;   // per stream; the rest is dropped
  std::vector<std::string> extra_env;  // "NAME=value", added to the inherited environment
};

struct SubprocessResult {
  bool started = false;    // false: fork/exec failed (see error)
  bool timed_out = false;  // killed after timeout_seconds
  int exit_code = -1;      // valid when term_signal == 0
  int term_signal = 0;     // signal that ended the child, 0 if it exited
  std::string stdout_data;
  std::string stderr_data;
  std::string error;
  double seconds = 0;
  bool ok() const { return started && !timed_out && term_signal == 0 && exit_code == 0; }
  // One line describing how the child ended, for error messages.
  std::string Describe() const;
};

SubprocessResult RunSubprocess(const std::vector<std::string>& argv, const SubprocessOptions& opts);

// A started child in its own process group, with the parent's ends of its stdin, stdout and
// stderr pipes (close-on-exec). For long-lived children that RunSubprocess's one-shot contract
// does not fit; opts.extra_env and opts.memory_limit_bytes apply, the rest is the caller's.
struct ChildProcess {
  int pid = -1;  // -1: not started (see error)
  int in = -1, out = -1, err = -1;
  std::string error;
};
ChildProcess StartChild(const std::vector<std::string>& argv, const SubprocessOptions& opts);

// Closes the pipes, kills the child's process group when `kill_it`, and reaps it. Returns the
// wait status (see waitpid), or -1 when there was no child.
int EndChild(ChildProcess& child, bool kill_it);

// Closes the pipes and reaps the child when it exits by itself before `deadline`; past it, kills
// its process group and sets *killed. Returns the wait status. For a child that closed its
// output and may or may not be exiting.
int EndChildBy(ChildProcess& child, std::chrono::steady_clock::time_point deadline, bool* killed);

// `seconds` after `start`, on the steady clock.
std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point start,
                                                    double seconds);

// Path of the running executable (/proc/self/exe).
std::string SelfExecutable();

}  // namespace kiln
