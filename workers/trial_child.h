// The sandboxed trial child: reads a SandboxRequest on stdin, verifies and times one kernel (or a
// baseline, or a composed step) and writes a Measurement on stdout. It runs in its own process
// so a crashing or hanging kernel never takes the worker down (workers/sandbox.h).
//
// Two kinds of binary host it: kiln-trial, which links the devices but not LibTorch or gRPC and
// so starts in a few milliseconds (tuning trials, the bulk of the work), and every binary that
// hosts a worker (kiln, kiln-worker, the benchmarks), which call TrialChildMain() first when
// argv[1] == kTrialChildFlag and run the LibTorch baselines and composed steps.
#pragma once

namespace kiln::workers {

inline constexpr char kTrialChildFlag[] = "--kiln-trial-child";
inline constexpr char kTrialExecutableName[] = "kiln-trial";
int TrialChildMain();

}  // namespace kiln::workers
