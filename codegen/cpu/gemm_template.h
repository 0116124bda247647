// The CPU fp32 GEMM kernel template (cpu/templates/gemm.cc) and its knob space.
#pragma once

#include <memory>
#include <string_view>

#include "codegen/kernel_template.h"

namespace kiln::codegen {

// The exported symbol of every rendered GEMM kernel:
//   extern "C" void kiln_gemm(int M, int N, int K, const float* A, const float* B, float* C)
// computing C = A*B for row-major A (MxK), B (KxN), C (MxN).
inline constexpr char kCpuGemmEntry[] = "kiln_gemm";

// The text of cpu/templates/gemm.cc, embedded at build time.
std::string_view CpuGemmSource();

// Knobs MR, NR, MC, KC, NC, PACK, UNROLL, LOOP_ORDER, NT; VW comes from the chip.
std::unique_ptr<KernelTemplate> NewCpuGemmTemplate();

}  // namespace kiln::codegen
