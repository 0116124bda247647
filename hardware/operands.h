// Operands of every operator the accelerator backends run (sizes, seeded inputs, the check
// against the reference) and the verify-then-time harness over a backend's device buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// The buffers of one accelerator kernel call, in kernel-argument order: every input, then the
// output. They are the operator's verification case (op_cases.h) without the epilogue's
// arguments: the accelerator kernels take fp32 operands and no epilogue.
struct OperandLayout {
  std::vector<std::string> names;  // inputs, then the output
  std::vector<size_t> floats;      // elements of each
  size_t inputs() const { return names.size() - 1; }
  double bytes() const;  // all operands together
};

// UNIMPLEMENTED for an epilogue, a dtype other than fp32, or an operator whose case has other
// than fp32 inputs and one output (rope's in-place x, the router's indices).
absl::StatusOr<OperandLayout> OperandsOf(const v1::Workload& w);

// Deterministic inputs from `seed` (a different stream per operand).
std::vector<std::vector<float>> MakeInputs(const OperandLayout& layout, uint64_t seed);

struct OutputCheck {
  bool ok = false;
  std::string message;   // names the first bad element, the count and max_error
  double max_error = 0;  // largest |out - ref| / max(|ref|, floor) (gemm: CheckGemm's measure)
};

// Verifies `out` by the operator's case (op_cases.h): its double-precision reference computed
// from `inputs` and its tolerance. Every element must be finite (outputs are pre-filled with NaN,
// so unwritten ones fail).
OutputCheck CheckOutput(const v1::Workload& w, const std::vector<std::vector<float>>& inputs,
                        const float* out);

// What a backend provides to MeasureOnDevice: `sets` copies of the operand buffers on the
// device, uploads, the output's download and one synchronous run of the kernel on a set.
struct DeviceOperands {
  std::function<absl::Status(int sets)> allocate;
  std::function<absl::Status(int set, int operand, const float* data)> upload;
  std::function<absl::Status(int set, float* out)> download_output;
  std::function<absl::Status(int set)> run;  // launches and waits for completion
  // Optional: the device-timed duration (e.g. CUDA events) of every run so far, in order;
  // the timed runs' ones then replace the wall-clock samples.
  std::function<std::vector<double>()> device_samples_us;
};

// DESIGN.md §5 on a device: verification inputs (from opts.seed) with the output poisoned with
// NaN, one run, the check against the reference (WRONG_RESULT without timing when it fails);
// then timing inputs in rotating sets (cold: more than the chip's last-level cache) timed by
// TimeRepeated; throughput, roofline guard, cache mode. A failing backend call becomes CRASHED,
// except RESOURCE_EXHAUSTED / INVALID_ARGUMENT from the first run (the device refuses the
// launch: too much local memory, too many registers for the work-group), which is UNSUPPORTED.
v1::Measurement MeasureOnDevice(const v1::Workload& w, const DeviceOperands& dev,
                                const v1::ChipFingerprint& chip, const MeasureOptions& opts);

}  // namespace kiln::hardware
