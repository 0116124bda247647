// LibTorch eager implementations of every model operator on Kiln's operator ABI: the CPU
// baseline of non-GEMM operators and of the composed decode step. The only place outside agent/
// that includes LibTorch headers (it is one translation unit, compiled once; see docs/models.md).
#pragma once

#include "absl/status/status.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware::torch_baseline {

// "libtorch-<version>-eager", e.g. "libtorch-1.13.1-eager".
const char* Name();

// LibTorch's intra-op threads (set to the worker's cores so the baseline is not handicapped).
void SetThreads(int threads);

// Runs workload `w` the way an eager PyTorch program would (F.linear-style matmuls, HF's
// rotate_half, matmul + softmax attention: decode as a grouped matmul of each kv head's query
// heads, no repeated copy of the cache; prefill with HF's repeat_kv; per-expert index_select +
// mm, Mamba's sequential scan), on buffers laid out as codegen/cpu/op_templates.h says. GEMM takes
// args {A, B, bias, R, C}; plain fp32 GEMM ignores bias and R.
absl::Status RunOp(const v1::Workload& w, const long long* dims, void* const* args,
                   const float* params);

}  // namespace kiln::hardware::torch_baseline
