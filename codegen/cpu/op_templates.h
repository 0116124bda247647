// CPU kernel templates for the model operators (every OpKind but plain fp32 GEMM) and their ABI.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernel_template.h"

namespace kiln::codegen {

// Every template here exports one entry with one signature:
//   extern "C" void kiln_op(const long long* dims, void* const* args, const float* params)
// dims: the workload's dimensions in workload.cc's order (e.g. T,H,D for rope); args: the
// operator's buffers in the order documented at the top of its template file (and in
// docs/models.md); params: the operator's scalars (eps, rope theta, attention scale, ...).
inline constexpr char kCpuOpEntry[] = "kiln_op";
using CpuOpFn = void (*)(const long long* dims, void* const* args, const float* params);
// Optional, for kernels that take their weights (args[1]) packed ahead of time:
//   extern "C" long kiln_op_prepack_bytes(const long long* dims)
//   extern "C" void kiln_op_prepack(const long long* dims, const void* weights, void* packed)
inline constexpr char kCpuOpPrepackBytes[] = "kiln_op_prepack_bytes";
inline constexpr char kCpuOpPrepack[] = "kiln_op_prepack";

// One template per operator: gemm with an epilogue or bf16 weights, rmsnorm, rope,
// attention_decode, attention_prefill, softmax, swiglu, moe_router, moe_gemm, ssm_scan, conv1d.
std::vector<std::unique_ptr<KernelTemplate>> NewCpuOpTemplates();

// The GEMM templates' EPI code of a workload's epilogue: 0 none, 1 bias, 2 silu, 3 gelu,
// 4 residual; -1 for any other.
int64_t EpilogueCode(const std::string& epilogue);

// The text of a rendered CPU kernel: the kernels' runtime (templates/parallel.h: the one thread
// pool, a vectorizable exp) followed by `source`, the template file named `file`.
std::string WithCpuRuntime(std::string_view file, std::string_view source);

}  // namespace kiln::codegen
