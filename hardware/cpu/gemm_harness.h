// Verify-then-time harness for fp32 GEMM implementations (generated kernels and the baseline).
#pragma once

#include <functional>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// C = A*B, row-major: A is MxK, B is KxN, C is MxN.
using GemmFn = std::function<void(int M, int N, int K, const float* A, const float* B, float* C)>;

// Weights packed once ahead of time into the kernel's layout (constant at inference, as
// oneDNN and llama.cpp do): `fn` then receives the packed buffer in place of B.
struct GemmPrepack {
  std::function<long(int N, int K)> floats;  // size of the packed buffer
  std::function<void(int N, int K, const float* B, float* packed)> pack;
};

// Verifies `fn` on inputs from opts.seed's verification stream (output pre-filled with NaN)
// against the double-precision reference, then times it with TimeRepeated over rotating
// (A, B, C) sets (cold: more than the LLC in total; warm: one set) filled from opts.seed.
// Returns WRONG_RESULT (naming the first bad element) without timing when verification fails.
// C is NaN-poisoned before every timed run (outside the sample) and the last timed run's C is
// verified again after timing: WRONG_RESULT ("output after timing differs", no samples) when it
// fails; otherwise OK or SUSPECT (roofline guard), with samples, statistics and throughput.
// With `prepack`, B is packed before the call (verification and every timing set) and the
// packing time is reported separately in prepack_us, not in the kernel's samples.
v1::Measurement MeasureGemm(const v1::Workload& w, const GemmFn& fn,
                            const v1::ChipFingerprint& chip, const MeasureOptions& opts,
                            const GemmPrepack* prepack = nullptr);

}  // namespace kiln::hardware
