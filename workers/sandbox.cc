#include "workers/sandbox.h"

#include <cstdio>
#include <iostream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "codegen/kernel_template.h"
#include "common/subprocess.h"
#include "workers/worker.h"

namespace kiln::workers {
namespace {

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

v1::Measurement RunSandboxed(const v1::SandboxRequest& request, const SandboxLimits& limits) {
  SubprocessOptions opts;
  opts.stdin_data = request.SerializeAsString();
  opts.timeout_seconds = limits.timeout_seconds;
  opts.memory_limit_bytes = limits.memory_bytes;
  opts.max_output_bytes = 16 << 20;
  std::string exe = limits.executable.empty() ? SelfExecutable() : limits.executable;
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

TrialOutcome RunTrial(hardware::Device& device, const std::string& device_spec,
                      const v1::Trial& trial, const SandboxLimits& limits) {
  TrialOutcome out;
  v1::SandboxRequest req;
  req.set_device(device_spec);
  *req.mutable_chip() = device.Fingerprint();
  *req.mutable_workload() = trial.workload();
  req.set_kind(trial.kind());
  req.set_seed(1);
  req.set_max_seconds(1.0);
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

int TrialChildMain() {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  v1::SandboxRequest req;
  if (!req.ParseFromString(input)) {
    std::fprintf(stderr, "trial child: malformed request on stdin\n");
    return 3;
  }
  auto device = hardware::OpenDevice(req.device(), &req.chip());
  if (!device.ok()) {
    std::fprintf(stderr, "trial child: %s\n", std::string(device.status().message()).c_str());
    return 3;
  }
  hardware::MeasureOptions opts;
  opts.warm = req.warm();
  if (req.max_seconds() > 0) opts.max_seconds = req.max_seconds();
  opts.seed = req.seed();
  v1::Measurement m;
  if (req.kind() == v1::BASELINE) {
    m = (*device)->MeasureBaseline(req.workload(), opts);
  } else {
    hardware::CompiledKernel k;
    k.artifact = req.artifact();
    k.entry = req.entry();
    m = (*device)->Measure(req.workload(), k, opts);
  }
  std::string out = m.SerializeAsString();
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace kiln::workers
