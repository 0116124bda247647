// The CPU baselines' entry points for binaries built without them (kiln-trial, which only times
// Kiln's own kernels; baselines run in the worker's own binary): no routes.
#include "hardware/cpu/baselines/baselines.h"
#include "hardware/cpu/baselines/vendor_gemm.h"

namespace kiln::hardware::cpu_baselines {

std::vector<Route> Routes(const v1::Workload&, const std::vector<int>&) { return {}; }
void QuietPools() {}
std::string DefaultName(const v1::Workload&) { return "baseline-absent"; }

absl::StatusOr<std::unique_ptr<OnednnMatmul>> OnednnMatmul::Create(int, int, int, bool, bool) {
  return absl::UnavailableError("oneDNN is not linked into this executable");
}

}  // namespace kiln::hardware::cpu_baselines
