#include "workers/sandbox.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "codegen/kernel_template.h"
#include "common/subprocess.h"
#include "hardware/cpu/step_runner.h"
#include "workers/worker.h"

namespace kiln::workers {
namespace {

constexpr double kTuneMaxSeconds = 0.4;

std::string Tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

}  // namespace

std::string TrialExecutable(v1::TrialKind kind) {
  // Baselines and steps run LibTorch's operators: the hosting binary has it linked.
  if (kind == v1::BASELINE || kind == v1::STEP) return SelfExecutable();
  static const std::string lean = [] {
    if (const char* env = std::getenv("KILN_TRIAL_EXECUTABLE")) return std::string(env);
    const std::string self = SelfExecutable();
    const std::string beside = self.substr(0, self.rfind('/') + 1) + kTrialExecutableName;
    if (access(beside.c_str(), X_OK) == 0) return beside;
#ifdef KILN_TRIAL_BUILD_PATH
    if (access(KILN_TRIAL_BUILD_PATH, X_OK) == 0) return std::string(KILN_TRIAL_BUILD_PATH);
#endif
    return self;
  }();
  return lean;
}

v1::Measurement RunSandboxed(const v1::SandboxRequest& request, const SandboxLimits& limits) {
  SubprocessOptions opts;
  opts.stdin_data = request.SerializeAsString();
  opts.timeout_seconds = limits.timeout_seconds;
  opts.memory_limit_bytes = limits.memory_bytes;
  opts.max_output_bytes = 16 << 20;
  std::string exe = limits.executable.empty() ? TrialExecutable(request.kind()) : limits.executable;
  SubprocessResult r = RunSubprocess({exe, kTrialChildFlag}, opts);
  std::string stderr_tail = Tail(r.stderr_data, 1500);
  if (!r.started) return Failed(v1::CRASHED, "cannot start the trial process: " + r.error);
  if (r.timed_out)
    return Failed(v1::TIMEOUT,
                  absl::StrCat("kernel did not finish within the ", limits.timeout_seconds,
                               " s wall-clock limit; the trial process was killed"));
  if (r.term_signal != 0)
    return Failed(v1::CRASHED, absl::StrCat("trial process ", r.Describe(), " (memory limit ",
                                            limits.memory_bytes >> 20, " MiB)",
                                            stderr_tail.empty() ? "" : ": " + stderr_tail));
  v1::Measurement m;
  if (r.exit_code != 0 || !m.ParseFromString(r.stdout_data) || m.status() == v1::STATUS_UNSPECIFIED)
    return Failed(v1::CRASHED, absl::StrCat("trial process ", r.Describe(), " without a result",
                                            stderr_tail.empty() ? "" : ": " + stderr_tail));
  return m;
}

// A STEP trial (issue 4): compile every task's best kernel here, then run the composed step,
// Kiln's kernels and LibTorch's side by side, in the sandboxed child.
TrialOutcome RunStepTrial(hardware::Device& device, const v1::Trial& trial, v1::SandboxRequest req,
                          const SandboxLimits& limits) {
  TrialOutcome out;
  out.implementation = "kiln-step";
  const v1::ChipFingerprint& chip = device.Fingerprint();
  if (chip.kind() != "cpu") {
    out.measurement = Failed(v1::UNSUPPORTED, "the step runner exists for the cpu device only");
    return out;
  }
  v1::StepRequest step = trial.step();
  double compile_seconds = 0;
  for (v1::StepKernel& k : *step.mutable_kernels()) {
    auto tmpl = codegen::FindTemplate(k.workload(), chip.kind());
    if (!tmpl.ok()) {
      out.measurement = Failed(v1::UNSUPPORTED, std::string(tmpl.status().message()));
      return out;
    }
    auto kernel = (*tmpl)->Render(k.workload(), codegen::FromProto(k.config()),
                                  codegen::TraitsFromFingerprint(chip));
    auto compiled = kernel.ok() ? device.Compile(*kernel)
                                : absl::StatusOr<hardware::CompiledKernel>(kernel.status());
    if (!compiled.ok()) {
      out.measurement = Failed(v1::COMPILE_ERROR, std::string(compiled.status().message()));
      return out;
    }
    k.set_artifact(compiled->artifact);
    k.set_entry(compiled->entry);
    compile_seconds += compiled->compile_seconds;
  }
  if (step.layers() <= 0) step.set_layers(hardware::DefaultStepLayers(step.arch(), step.dtype()));
  *req.mutable_step() = step;
  // KILN_STEP_DUMP=DIR keeps each step request, to be replayed by hand with
  // `KILN_STEP_PROFILE=1 kiln-worker --trial-child < DIR/step-N.pb` (per-operator profile).
  if (const char* dir = std::getenv("KILN_STEP_DUMP")) {
    static int dumped = 0;
    std::ofstream(absl::StrCat(dir, "/step-", ++dumped, ".pb"), std::ios::binary)
        << req.SerializeAsString();
  }
  SandboxLimits step_limits = limits;  // a step holds N layers of weights and runs both backends
  step_limits.timeout_seconds = std::max(limits.timeout_seconds, 900.0);
  step_limits.memory_bytes = std::max<long long>(limits.memory_bytes, 64LL << 30);
  out.measurement = RunSandboxed(req, step_limits);
  out.measurement.set_compile_seconds(compile_seconds);
  return out;
}

TrialOutcome RunTrial(hardware::Device& device, const std::string& device_spec,
                      const v1::Trial& trial, const SandboxLimits& limits) {
  TrialOutcome out;
  v1::SandboxRequest req;
  req.set_device(device_spec);
  *req.mutable_chip() = device.Fingerprint();
  *req.mutable_workload() = trial.workload();
  req.set_kind(trial.kind());
  req.set_seed(1);
  // A tuning trial only has to rank its kernel: a shorter cap (still dozens of samples for a
  // millisecond kernel, and racing ends a loser sooner); baselines get the full second.
  req.set_max_seconds(trial.kind() == v1::TUNE ? kTuneMaxSeconds : 1.0);
  if (trial.kind() == v1::TUNE) req.set_race_us(trial.race_us());
  if (trial.kind() == v1::STEP) return RunStepTrial(device, trial, req, limits);
  if (!device.Supports(trial.workload())) {
    out.measurement = Failed(v1::UNSUPPORTED, "this device does not support the workload");
    return out;
  }
  if (trial.kind() == v1::BASELINE) {
    out.implementation = device.BaselineName(trial.workload());
    out.measurement = RunSandboxed(req, limits);
    return out;
  }
  out.implementation = "kiln";
  const v1::ChipFingerprint& chip = device.Fingerprint();
  auto tmpl = codegen::FindTemplate(trial.workload(), chip.kind());
  if (!tmpl.ok()) {
    out.measurement = Failed(v1::UNSUPPORTED, std::string(tmpl.status().message()));
    return out;
  }
  auto kernel = (*tmpl)->Render(trial.workload(), codegen::FromProto(trial.config()),
                                codegen::TraitsFromFingerprint(chip));
  if (!kernel.ok()) {
    out.measurement =
        Failed(v1::COMPILE_ERROR, absl::StrCat("render: ", kernel.status().message()));
    return out;
  }
  out.source_hash = kernel->Hash();
  auto compiled = device.Compile(*kernel);
  if (!compiled.ok()) {
    out.measurement = Failed(v1::COMPILE_ERROR, std::string(compiled.status().message()));
    return out;
  }
  out.toolchain = compiled->toolchain;
  req.set_artifact(compiled->artifact);
  req.set_entry(compiled->entry);
  out.measurement = RunSandboxed(req, limits);
  out.measurement.set_compile_seconds(compiled->compile_seconds);
  return out;
}

}  // namespace kiln::workers
