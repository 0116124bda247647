// Runs one trial's verification and timing in a child process with a wall-clock timeout and a
// memory limit, so a crashing, hanging or runaway kernel never takes the worker down.
#pragma once

#include <string>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::workers {

struct SandboxLimits {
  double timeout_seconds = 30;
  long long memory_bytes = 8LL << 30;
  std::string executable;  // binary that handles kTrialChildFlag; default: TrialExecutable()
};

// The binary a trial of `kind` runs in: for tuning trials kiln-trial (KILN_TRIAL_EXECUTABLE, or
// beside this executable, or in the build tree), which starts without loading LibTorch; for
// baselines and steps, and when kiln-trial is not found, this executable.
std::string TrialExecutable(v1::TrialKind kind);

// Always returns a Measurement: OK/WRONG_RESULT/SUSPECT from the child, or TIMEOUT/CRASHED
// with a message saying what happened to it.
v1::Measurement RunSandboxed(const v1::SandboxRequest& request, const SandboxLimits& limits);

// Renders, compiles (in this process, compiler as a subprocess) and measures (in the sandbox)
// one trial. Compile failures come back as COMPILE_ERROR with the diagnostics.
struct TrialOutcome {
  v1::Measurement measurement;
  std::string implementation;  // "kiln" or the baseline's name
  std::string source_hash;
  std::string toolchain;
};
TrialOutcome RunTrial(hardware::Device& device, const std::string& device_spec,
                      const v1::Trial& trial, const SandboxLimits& limits);

}  // namespace kiln::workers
