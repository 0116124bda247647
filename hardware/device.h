// The device-backend extension point: fingerprint, Supports, Compile, Measure (+ baseline).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codegen/kernel_template.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

struct MeasureOptions {
  bool warm = false;         // default "cold": rotating buffer sets larger than the LLC
  double max_seconds = 1.0;  // timing cap per measurement
  double target_ci = 0.02;   // stop when the 95% CI half-width < target_ci * median
  int warmup = 2;
  int min_samples = 7;
  int max_samples = 200;
  uint64_t seed = 1;
  // Racing: > 0 stops timing once the median's 95% confidence interval lies wholly above it
  // (the configuration cannot be the new best; the measurement is marked raced) or wholly below
  // it (surely the new best, which the coordinator re-measures in full; marked raced_ahead).
  double race_us = 0;
  // MeasureBaseline only: time just this route at this thread count (0: each of its counts).
  std::string only_route;
  int only_route_threads = 0;
};

struct CompiledKernel {
  std::string artifact;  // path of the compiled object (cpu: shared object)
  std::string entry;
  std::string source_hash;
  std::string toolchain;  // compiler and flags
  double compile_seconds = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // Kind ("cpu"), model, ISA, caches, measured peaks and the chip-type label.
  virtual const v1::ChipFingerprint& Fingerprint() const = 0;
  virtual bool Supports(const v1::Workload& w) const = 0;
  // Compiles in the calling process (the compiler runs as a subprocess with a timeout).
  // A compile failure is an error status whose message carries the compiler's diagnostics.
  virtual absl::StatusOr<CompiledKernel> Compile(const codegen::Kernel& kernel) = 0;
  // Verifies the kernel against the reference on NaN-poisoned outputs, then times it.
  // Meant to run inside the sandboxed trial child: it may crash or hang.
  virtual v1::Measurement Measure(const v1::Workload& w, const CompiledKernel& kernel,
                                  const MeasureOptions& opts) = 0;
  // The fastest route a user could run instead (vendor library calls, layouts, thread counts),
  // timed with the same harness. A backend that times several routes lists them all in
  // baseline_routes and returns the fastest's measurement. BaselineName is the name reported
  // before any route has run.
  virtual std::string BaselineName(const v1::Workload& w) const = 0;
  virtual v1::Measurement MeasureBaseline(const v1::Workload& w, const MeasureOptions& opts) = 0;
  // A model's composed step (StepRequest: the architecture, phase, batch, context and the
  // compiled kernels of its operators) with this device's kernels against the framework's eager
  // step, with the memory-bandwidth bound: tokens/s of both. Runs in the sandboxed child.
  // A backend without a step runner says so.
  virtual absl::StatusOr<v1::StepResult> MeasureStep(const v1::StepRequest& req, uint64_t seed) {
    (void)req;
    (void)seed;
    return absl::UnimplementedError(
        absl::StrCat("the ", Fingerprint().kind(), " backend has no model step runner"));
  }
};

// The fastest OK route of a baseline measurement (nullptr when it lists none that ran OK).
inline const v1::BaselineRoute* FastestRoute(const v1::Measurement& m) {
  const v1::BaselineRoute* best = nullptr;
  for (const auto& r : m.baseline_routes())
    if (r.status() == v1::OK && (!best || r.median_us() < best->median_us())) best = &r;
  return best;
}

// Opens a device from its spec ("cpu"). With `known`, its fingerprint is reused instead of
// probed again (the sandboxed child gets the worker's fingerprint this way).
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& spec,
                                                   const v1::ChipFingerprint* known = nullptr);

}  // namespace kiln::hardware
