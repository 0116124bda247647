// Verify-then-time of an OpenCL kernel (a rendered template, or CLBlast's SGEMM) on an
// operator's operands in device buffers.
#pragma once

#include "codegen/device_template.h"
#include "hardware/device.h"
#include "hardware/opencl/cl_runtime.h"

namespace kiln::hardware {

// Runs `kernel` with the operator's operands as arguments (inputs, then the output) over
// `launch`. UNSUPPORTED when the built kernel allows fewer work-items per group than the launch
// needs (the compiler ran out of registers) or the device refuses the launch.
v1::Measurement MeasureClKernel(ClRuntime& rt, const v1::Workload& w, cl_kernel kernel,
                                const codegen::Launch& launch, const v1::ChipFingerprint& chip,
                                const MeasureOptions& opts);

// Whether this build links CLBlast (the OpenCL GEMM baseline).
bool HaveClBlast();
// CLBlast builds its kernels on first use, which takes PoCL tens of seconds: longer than a
// trial's timeout, and every trial child would pay it. This starts a detached, low-priority
// process (forked before this process touches OpenCL) that runs CLBlast's SGEMM paths once on
// device `index`, filling the runtime's on-disk kernel cache (PoCL's kcache). No-op without
// CLBlast.
void WarmClBlastInBackground(int index);
// CLBlast's row-major SGEMM on the same operands and harness; UNSUPPORTED without CLBlast.
v1::Measurement MeasureClBlastGemm(ClRuntime& rt, const v1::Workload& w,
                                   const v1::ChipFingerprint& chip, const MeasureOptions& opts);

}  // namespace kiln::hardware
