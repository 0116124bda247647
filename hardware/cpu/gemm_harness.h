// Verify-then-time harness for fp32 GEMM implementations (generated kernels and the baseline).
#pragma once

#include <functional>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// C = A*B, row-major: A is MxK, B is KxN, C is MxN.
using GemmFn = std::function<void(int M, int N, int K, const float* A, const float* B, float* C)>;

// Verifies `fn` on inputs from opts.seed's verification stream (output pre-filled with NaN)
// against the double-precision reference, then times it with TimeRepeated over rotating
// (A, B, C) sets (cold: more than the LLC in total; warm: one set) filled from opts.seed.
// Returns WRONG_RESULT (naming the first bad element) without timing when verification fails;
// otherwise OK or SUSPECT (roofline guard), with samples, statistics and throughput.
v1::Measurement MeasureGemm(const v1::Workload& w, const GemmFn& fn,
                            const v1::ChipFingerprint& chip, const MeasureOptions& opts);

}  // namespace kiln::hardware
