// The CPU baselines: every route a user could run instead of Kiln's kernel (vendor library calls,
// weight layouts, thread counts), as callables for the measurement harness to time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "hardware/cpu/gemm_harness.h"
#include "hardware/cpu/op_harness.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware::cpu_baselines {

// What the harness times for one route at one thread count: a GEMM callable (fp32 GEMM's
// harness) or an operator callable (the operator harness), with the weights' packing or layout
// change done ahead of time, as Kiln's own kernels get it.
struct RouteCall {
  GemmFn gemm;
  std::optional<GemmPrepack> gemm_pack;
  OpFn op;
  std::optional<OpPrepack> op_pack;
  std::shared_ptr<void> state;           // what the callables use (a oneDNN primitive)
  std::shared_ptr<absl::Status> failed;  // an error the callable hit while running
};

struct Route {
  std::string name;   // "openblas-sgemv", "onednn-packed", "libtorch-1.13.0-eager", ...
  std::string dtype;  // what it computes in: "fp32", "bf16"
  std::vector<int> threads;
  // Sets the thread pools the route uses (every other one at 1 thread) and builds its call.
  std::function<absl::StatusOr<RouteCall>(int threads)> prepare;
};

// The routes that fit `w`, each to be timed at `threads` (1 and all cores) unless it says less.
std::vector<Route> Routes(const v1::Workload& w, const std::vector<int>& threads);

// Every library's pool at one thread, after a pause long enough for pools that spin after their
// last call (OpenBLAS, OpenMP) to sleep: one pool at a time on the cores.
void QuietPools();

// The name reported before any route has run (the route that usually wins).
std::string DefaultName(const v1::Workload& w);

}  // namespace kiln::hardware::cpu_baselines
