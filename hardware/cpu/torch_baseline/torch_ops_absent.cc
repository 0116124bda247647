// The LibTorch baseline's entry points for binaries built without LibTorch (kiln-trial, which
// only times Kiln's own kernels): every call says the baseline is not here.
#include "hardware/cpu/torch_baseline/torch_ops.h"

namespace kiln::hardware::torch_baseline {

const char* Name() { return "libtorch-absent"; }

void SetThreads(int) {}
void SetPools(int, int) {}

absl::Status RunLinear(const v1::Workload& w, const long long* d, void* const* a) {
  return RunOp(w, d, a, nullptr);
}

absl::Status RunOp(const v1::Workload&, const long long*, void* const*, const float*) {
  return absl::UnavailableError(
      "the LibTorch baseline is not linked into this executable (kiln-trial times Kiln's "
      "kernels only; baselines and steps run in the worker's own binary)");
}

}  // namespace kiln::hardware::torch_baseline
