#include "workers/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "codegen/kernel_template.h"
#include "codegen/model_graph.h"
#include "codegen/workload.h"
#include "common/subprocess.h"
#include "workers/trial_child.h"
#include "workers/worker.h"

namespace kiln::workers {
namespace {

constexpr double kTuneMaxSeconds = 0.4;
// Folders searched for a build tree's root, from the executable's own: build/tests/workers/X
// needs three.
constexpr int kBuildTreeLevels = 4;

#ifndef KILN_TRIAL_DIR_FROM_BINDIR  // set by CMake from the install layout (GNUInstallDirs)
#define KILN_TRIAL_DIR_FROM_BINDIR "../libexec/kiln"
#endif

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

std::string FindTrialExecutable(const std::string& self) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(self).parent_path();
  if (dir.empty()) return "";
  auto usable = [](const fs::path& p) { return access(p.c_str(), X_OK) == 0; };
  // Installed: PREFIX/bin/NAME finds PREFIX/libexec/kiln/kiln-trial.
  fs::path installed = (dir / KILN_TRIAL_DIR_FROM_BINDIR / kTrialExecutableName).lexically_normal();
  if (usable(installed)) return installed.string();
  if (usable(dir / kTrialExecutableName)) return (dir / kTrialExecutableName).string();
  // In a build tree (build/workers/, build/cli/, build/tests/workers/...): its root is the
  // nearest folder above that holds CMakeCache.txt. Found at run time, so that no build path is
  // compiled into binaries that get installed.
  fs::path root = dir;
  for (int up = 0; up < kBuildTreeLevels; ++up, root = root.parent_path()) {
    std::error_code ec;
    if (!fs::exists(root / "CMakeCache.txt", ec)) continue;
    fs::path built = root / "workers" / kTrialExecutableName;
    return usable(built) ? built.string() : "";
  }
  return "";
}

std::string TrialExecutable(v1::TrialKind kind) {
  // Baselines and steps run LibTorch's operators: the hosting binary has it linked.
  if (kind == v1::BASELINE || kind == v1::STEP) return SelfExecutable();
  static const std::string lean = [] {
    if (const char* env = std::getenv("KILN_TRIAL_EXECUTABLE")) return std::string(env);
    const std::string self = SelfExecutable();
    std::string found = FindTrialExecutable(self);
    return found.empty() ? self : found;
  }();
  return lean;
}

namespace {

constexpr size_t kStderrTail = 1500;
constexpr size_t kMaxResultBytes = 16 << 20;  // as RunSandboxed reads at most

// What became of a trial process: its Measurement, or TIMEOUT / CRASHED saying what happened.
v1::Measurement TrialProcessOutcome(const SubprocessResult& r, const SandboxLimits& limits) {
  std::string stderr_tail = Tail(r.stderr_data, kStderrTail);
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

}  // namespace

v1::Measurement RunSandboxed(const v1::SandboxRequest& request, const SandboxLimits& limits) {
  SubprocessOptions opts;
  opts.stdin_data = request.SerializeAsString();
  opts.timeout_seconds = limits.timeout_seconds;
  opts.memory_limit_bytes = limits.memory_bytes;
  opts.max_output_bytes = 16 << 20;
  std::string exe = limits.executable.empty() ? TrialExecutable(request.kind()) : limits.executable;
  return TrialProcessOutcome(RunSubprocess({exe, kTrialChildFlag}, opts), limits);
}

struct TrialServer::Child {
  ChildProcess process;
};

TrialServer::TrialServer(std::string executable)
    : executable_(executable.empty() ? TrialExecutable(v1::TUNE) : std::move(executable)) {}

TrialServer::~TrialServer() { Stop(); }

void TrialServer::Stop() {
  if (!child_) return;
  EndChild(child_->process, /*kill_it=*/true);
  child_.reset();
  served_ = 0;
}

v1::Measurement TrialServer::Run(const v1::SandboxRequest& request, const SandboxLimits& limits) {
  static std::once_flag ignore_sigpipe;  // a write to a server that died must not kill us
  std::call_once(ignore_sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  const std::string& exe = limits.executable.empty() ? executable_ : limits.executable;
  if (child_ && (memory_bytes_ != limits.memory_bytes || running_ != exe)) Stop();
  if (!child_) {
    SubprocessOptions opts;
    opts.memory_limit_bytes = limits.memory_bytes;
    auto child = std::make_unique<Child>();
    child->process = StartChild({exe, kTrialServerFlag}, opts);
    if (child->process.pid < 0)
      return Failed(v1::CRASHED, "cannot start the trial process: " + child->process.error);
    fcntl(child->process.out, F_SETFL, O_NONBLOCK);
    fcntl(child->process.err, F_SETFL, O_NONBLOCK);
    child_ = std::move(child);
    memory_bytes_ = limits.memory_bytes;
    running_ = exe;
    ++started_;
    served_ = 0;
  }
  const bool reused = served_ > 0;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = DeadlineAfter(start, limits.timeout_seconds);
  ChildProcess& p = child_->process;
  SubprocessResult r;  // what RunSandboxed would have seen
  r.started = true;
  char buf[65536];
  if (p.err >= 0)  // what the previous trial printed last is not this one's
    while (read(p.err, buf, sizeof(buf)) > 0) {
    }
  // A tuning request is a few KiB, well inside the pipe's buffer: this write does not block. If
  // it fails, the child is gone, and reading says so.
  WriteFrame(p.in, request.SerializeAsString());
  std::string frame;
  size_t frame_n = 0;
  bool ended = false;
  for (;;) {
    if (frame.size() >= 4) {
      frame_n = FrameLength(frame.data());
      if (frame_n > kMaxResultBytes) {  // not a Measurement: a broken stream
        ended = true;
        break;
      }
      if (frame.size() >= 4 + frame_n) break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd fds[2] = {{p.out, POLLIN, 0}, {p.err, POLLIN, 0}};
    const int nfds = p.err >= 0 ? 2 : 1;
    if (poll(fds, nfds, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 &&
        errno != EINTR) {
      ended = true;  // cannot watch the child any more: end it
      break;
    }
    if (nfds == 2 && fds[1].revents) {
      ssize_t got = read(p.err, buf, sizeof(buf));
      if (got > 0) r.stderr_data = Tail(r.stderr_data + std::string(buf, got), kStderrTail);
      if (got == 0) {
        close(p.err);
        p.err = -1;
      }
    }
    if (fds[0].revents) {
      ssize_t got = read(p.out, buf, sizeof(buf));
      if (got > 0) frame.append(buf, got);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        ended = true;
        break;
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r.timed_out || ended) {
    // Its results pipe closed: it is exiting, or it closed the pipe and hangs, which the trial's
    // deadline bounds.
    const int status =
        r.timed_out ? EndChild(p, /*kill_it=*/true) : EndChildBy(p, deadline, &r.timed_out);
    child_.reset();
    served_ = 0;
    if (!r.timed_out && WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
    if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  } else {
    r.exit_code = 0;
    r.stdout_data = frame.substr(4, frame_n);
  }
  v1::Measurement m = TrialProcessOutcome(r, limits);
  const v1::MeasurementStatus st = m.status();
  if (st != v1::CRASHED && st != v1::WRONG_RESULT && st != v1::TIMEOUT) {
    // OK, or a verdict on the kernel that leaves the process sound (SUSPECT timing, a kernel it
    // could not load or run here).
    ++served_;
    return m;
  }
  Stop();  // the next trial starts clean
  // A crash or a wrong result after earlier trials may be their doing (a kernel that wrote out
  // of bounds and still verified, or the memory kept for reuse): measured again in a fresh
  // process, it is charged to this kernel only if it happens there too.
  if (reused && (m.status() == v1::CRASHED || m.status() == v1::WRONG_RESULT))
    return RunSandboxed(request, limits);
  return m;
}

// A STEP trial: compile every task's best kernel here, then run the composed step,
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
  if (step.layers() <= 0) step.set_layers(codegen::DefaultStepLayers(step.arch(), step.dtype()));
  *req.mutable_step() = step;
  // KILN_STEP_DUMP=DIR keeps each step request, to be replayed by hand with
  // `KILN_STEP_PROFILE=1 kiln-worker --kiln-trial-child < DIR/step-N.pb` (per-operator profile).
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
                      const v1::Trial& trial, const SandboxLimits& limits, TrialServer* server) {
  TrialOutcome out;
  v1::SandboxRequest req;
  req.set_device(device_spec);
  *req.mutable_chip() = device.Fingerprint();
  *req.mutable_workload() = trial.workload();
  req.set_kind(trial.kind());
  req.set_seed(1);
  // A tuning trial only has to rank its kernel: a shorter cap (still dozens of samples for a
  // millisecond kernel, and racing ends a loser sooner), and so does each of a final's rounds
  // (the rounds together time it longer); baselines and re-measurements get the full second.
  // A final round's baseline route gets a final's cap too (it is timed in each round's turn).
  const bool round_trial = trial.kind() == v1::FINAL || trial.has_baseline_route();
  req.set_max_seconds(trial.kind() == v1::TUNE || round_trial ? kTuneMaxSeconds : 1.0);
  if (trial.has_baseline_route()) *req.mutable_baseline_route() = trial.baseline_route();
  if (trial.kind() == v1::TUNE) req.set_race_us(trial.race_us());
  if (trial.kind() == v1::STEP) return RunStepTrial(device, trial, req, limits);
  if (!device.Supports(trial.workload())) {
    out.measurement = Failed(v1::UNSUPPORTED, "this device does not support the workload");
    return out;
  }
  if (trial.kind() == v1::BASELINE) {
    // Every route at every thread count, each timed in full: more than one kernel's share.
    SandboxLimits baseline_limits = limits;
    baseline_limits.timeout_seconds = std::max(limits.timeout_seconds, 600.0);
    out.measurement = RunSandboxed(req, baseline_limits);
    const v1::BaselineRoute* fastest = hardware::FastestRoute(out.measurement);
    out.implementation = fastest ? fastest->name() : device.BaselineName(trial.workload());
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
  // The limit grows with the work: every trial is verified twice against a double-precision
  // reference, which for a prefill GEMM (tens of GFLOP) alone takes longer than a decode
  // kernel's whole trial. 3 s per GFLOP on top of the configured limit.
  SandboxLimits trial_limits = limits;
  trial_limits.timeout_seconds += 3.0 * codegen::WorkloadFlops(trial.workload()) / 1e9;
  out.measurement = server ? server->Run(req, trial_limits) : RunSandboxed(req, trial_limits);
  out.measurement.set_compile_seconds(compiled->compile_seconds);
  return out;
}

}  // namespace kiln::workers
