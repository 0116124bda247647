// The end-to-end step runner: a model's composed step (layers in sequence on real buffers with
// random weights, a real KV cache / SSM state) with Kiln's best kernels and with LibTorch eager
// operators, side by side in one process; the measured tokens per second of both.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

struct StepOptions {
  double max_seconds = 20;  // timing cap for both backends together
  int min_samples = 3;
  int max_samples = 30;
  uint64_t seed = 1;
};

// Runs req.layers layers (of req.arch.layers) plus the head. Every request kernel must carry its
// compiled artifact and entry. The step time is (layers time) * arch.layers / req.layers + (head
// time); tokens/s = tokens per step / step time. max_error compares the two backends' logits
// after one step from the same state (relative to the largest logit).
absl::StatusOr<v1::StepResult> RunCpuStep(const v1::StepRequest& req,
                                          const v1::ChipFingerprint& chip, const StepOptions& opts);

// One untimed step with each backend from the same state: the logits [batch, vocab] of Kiln's
// kernels and of LibTorch's operators (for tests).
struct StepOutputs {
  std::vector<float> kiln, torch;
};
absl::StatusOr<StepOutputs> RunCpuStepOnce(const v1::StepRequest& req,
                                           const v1::ChipFingerprint& chip, uint64_t seed = 1);

}  // namespace kiln::hardware
