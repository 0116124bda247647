// Verify-then-time harness for the model operators (every op but plain fp32 GEMM, which has
// gemm_harness): op-specific buffers, NaN-poisoned outputs, the reference check, cold timing.
#pragma once

#include <functional>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// The uniform operator ABI of codegen/cpu/op_templates.h.
using OpFn = std::function<void(const long long* dims, void* const* args, const float* params)>;

// An operator kernel that takes one argument (weights, constant at inference) packed ahead of
// time into its own layout: the harness packs each argument set's copy once (the first packing
// timed as prepack_us) and hands the kernel the packed buffer in that argument's place.
struct OpPrepack {
  int arg = 1;  // which argument (GEMM: the weights B)
  std::function<long(const long long* dims)> bytes;
  std::function<void(const long long* dims, const void* src, void* dst)> pack;
};

// Verifies `fn` on inputs from opts.seed's verification stream (outputs NaN-poisoned, in/out
// state such as a residual or an SSM state given as inputs) against the reference, then times it
// over rotating argument sets (cold: more than the LLC in total). Before every timed run, outside
// the sample, the set's outputs are NaN-poisoned and its in/out arguments restored to the set's
// initial values; after timing the last timed run's outputs are checked again. WRONG_RESULT names
// the first bad element ("output after timing differs" for the second check, without samples);
// otherwise OK or SUSPECT (roofline guard) with samples and statistics.
v1::Measurement MeasureOp(const v1::Workload& w, const OpFn& fn, const v1::ChipFingerprint& chip,
                          const MeasureOptions& opts, const OpPrepack* prepack = nullptr);

}  // namespace kiln::hardware
