// The tolerance of a composed model step: Kiln's logits against the LibTorch step's, from the
// same state (StepResult.max_error). Header-only: the coordinator checks every STEP result it
// accepts against it, so a worker cannot skip the check.
#pragma once

#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// A step's max_error is max_i |kiln_i - torch_i| / max_i |torch_i| over the logits: relative to
// the largest logit, so the relative noise of logits near zero does not count. Every operator of
// the step was verified alone: fp32 GEMMs within kGemmRelTol (1e-4 of sum_k |a*b|,
// gemm_reference.h), the element-wise and attention operators within 2e-5..1e-4 relative
// (cpu/op_cases.cc), bf16-weight GEMMs within 1e-2 (activations rounded to bf16). Composed, the
// errors add about linearly over the operators a token passes through (each residual add carries
// the last one's error forward, RMSNorm rescales it without amplifying it), so the step's
// tolerance is an operator's times the handful of operators whose errors survive to the logits:
//   fp32: 1e-3, ten operators' worth. Correct fp32 steps agree within 1e-4 of the largest logit
//         (tests/hardware/step_runner_test.cc); a kernel that is wrong (a misindexed, stale or
//         unwritten element, a lost K slice) moves the logits by order one.
//   bf16: 5e-2, five operators' worth of 1e-2: Kiln may round activations to bf16 where LibTorch
//         keeps them in fp32 (the bound step_runner_test.cc accepts for bf16 weights); a wrong
//         kernel is still off by order one.
inline constexpr double kStepRelTolFp32 = 1e-3;
inline constexpr double kStepRelTolBf16 = 5e-2;

// The step tolerance of a model job's dtype (its GEMM weights); anything narrower than fp32 gets
// bf16's.
inline double StepTolerance(v1::DType dtype) {
  return dtype == v1::FP32 || dtype == v1::DTYPE_UNSPECIFIED ? kStepRelTolFp32 : kStepRelTolBf16;
}

}  // namespace kiln::hardware
