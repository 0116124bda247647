// Runs one trial's verification and timing in a child process with a wall-clock timeout and a
// memory limit, so a crashing, hanging or runaway kernel never takes the worker down.
#pragma once

#include <memory>
#include <string>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::workers {

struct SandboxLimits {
  double timeout_seconds = 30;
  long long memory_bytes = 8LL << 30;
  std::string executable;  // binary that handles kTrialChildFlag; default: TrialExecutable()
};

// The binary a trial of `kind` runs in: for tuning trials kiln-trial ($KILN_TRIAL_EXECUTABLE, else
// FindTrialExecutable(this executable)), which starts without loading LibTorch; for baselines and
// steps, and when kiln-trial is not found, this executable.
std::string TrialExecutable(v1::TrialKind kind);

// kiln-trial for the executable at `self`, located from `self` alone so that an installation can
// move: PREFIX/libexec/kiln/kiln-trial when `self` is PREFIX/bin/NAME (the installed layout), else
// beside `self`, else BUILD/workers/kiln-trial when `self` lies in a build tree (BUILD is the
// nearest folder above it holding CMakeCache.txt). Empty when none of them is executable.
std::string FindTrialExecutable(const std::string& self);

// Always returns a Measurement: OK/WRONG_RESULT/SUSPECT from the child, or TIMEOUT/CRASHED
// with a message saying what happened to it.
v1::Measurement RunSandboxed(const v1::SandboxRequest& request, const SandboxLimits& limits);

// A long-lived sandboxed trial process (kiln-trial in kTrialServerFlag mode) that measures tuning
// trials one after another, with the same limits and the same answers as RunSandboxed. It keeps
// its operand memory between trials: a fresh child spends 0.03-0.4 s of every trial faulting in
// its 512+ MiB of rotating operand sets. A trial that crashes, hangs or computes a wrong result
// ends the process (the next trial starts a fresh one), so such a kernel cannot leave it in a
// bad state; a crash or a wrong result in a process that had served earlier trials is run again
// in a one-shot child, so that it is charged to the kernel that causes it. Not thread-safe: one
// per worker.
class TrialServer {
 public:
  // The executable: limits.executable when set, else this, else TrialExecutable(v1::TUNE).
  explicit TrialServer(std::string executable = "");
  ~TrialServer();
  TrialServer(const TrialServer&) = delete;
  TrialServer& operator=(const TrialServer&) = delete;

  v1::Measurement Run(const v1::SandboxRequest& request, const SandboxLimits& limits);
  // Ends the process (it holds its operand memory while idle); the next Run starts another.
  void Stop();
  // Processes started so far, and trials the current one has served (for tests and logs).
  int started() const { return started_; }
  int served() const { return served_; }

 private:
  struct Child;
  std::string executable_;
  std::unique_ptr<Child> child_;
  long long memory_bytes_ = 0;  // the running process's limit
  std::string running_;         // and its executable
  int started_ = 0, served_ = 0;
};

// Renders, compiles (in this process, compiler as a subprocess) and measures (in the sandbox)
// one trial. Compile failures come back as COMPILE_ERROR with the diagnostics.
struct TrialOutcome {
  v1::Measurement measurement;
  std::string implementation;  // "kiln" or the baseline's name
  std::string source_hash;
  std::string toolchain;
};
// Tuning trials are measured by `server` when one is given, else in a one-shot child.
TrialOutcome RunTrial(hardware::Device& device, const std::string& device_spec,
                      const v1::Trial& trial, const SandboxLimits& limits,
                      TrialServer* server = nullptr);

}  // namespace kiln::workers
