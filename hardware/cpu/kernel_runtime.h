// The thread pool that CPU kernels run their loops on (kernel_runtime.cc), exported by every
// process that loads them.
#pragma once

#include <functional>

#include "absl/status/status.h"

namespace kiln::hardware {

// OK when this process exports kiln_rt_parallel_for_v1. Kernels compiled by the CPU device
// (-DKILN_RT_HOSTED=1) have no pool of their own: loaded elsewhere they would run every loop on
// one thread and be timed at a fraction of their speed, so loading them there is refused with a
// FAILED_PRECONDITION that says how to link the executable.
absl::Status CheckKernelHost();

// Runs body(i) for i in [0, n) on up to nt threads of that same pool: for host code that must
// use the cores the way the kernels do (the read sweep that measures their bandwidth roof).
void RunOnKernelPool(long n, int nt, const std::function<void(long)>& body);

}  // namespace kiln::hardware
