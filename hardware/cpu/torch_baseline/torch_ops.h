// LibTorch eager implementations of every model operator on Kiln's operator ABI: the CPU
// baseline of non-GEMM operators and of the composed decode step. The only place outside agent/
// that includes LibTorch headers (it is one translation unit, compiled once; see docs/models.md).
#pragma once

#include "absl/status/status.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware::torch_baseline {

// "libtorch-<version>-eager", e.g. "libtorch-1.13.1-eager".
const char* Name();

// LibTorch's intra-op threads (OpenMP).
void SetThreads(int threads);
// LibTorch's threads and those of the BLAS it calls (OpenBLAS's own pthread pool): a baseline
// keeps one of the two at 1 thread, so that two pools never spin on the same cores.
void SetPools(int torch_threads, int blas_threads);

// A GEMM workload as a PyTorch model runs it: weights stored [N,K] (nn.Linear's layout) in
// args[1], F.linear (torch.mv for one fp32 row; bf16 activations and weights for a bf16 workload,
// which LibTorch hands to oneDNN), then the workload's epilogue. Other args as RunOp's GEMM.
absl::Status RunLinear(const v1::Workload& w, const long long* dims, void* const* args);

// Runs workload `w` the way an eager PyTorch program would (F.linear-style matmuls, HF's
// rotate_half, matmul + softmax attention: decode as a grouped matmul of each kv head's query
// heads, no repeated copy of the cache; prefill with HF's repeat_kv; per-expert index_select +
// mm, Mamba's sequential scan), on buffers laid out as codegen/cpu/op_templates.h says. GEMM takes
// args {A, B, bias, R, C}; plain fp32 GEMM ignores bias and R.
absl::Status RunOp(const v1::Workload& w, const long long* dims, void* const* args,
                   const float* params);

}  // namespace kiln::hardware::torch_baseline
