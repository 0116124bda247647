// The vendor library calls a user could make instead of Kiln's kernel: OpenBLAS (sgemm, sgemv,
// in either weight layout), BLIS (its small/skinny "sup" path), oneDNN matmul with its weights
// packed ahead of time (fp32 and bf16) and oneDNN softmax.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "hardware/cpu/gemm_harness.h"

namespace kiln::hardware::cpu_baselines {

// Thread counts of each library's own pool (OpenBLAS: pthreads; oneDNN and BLIS: OpenMP).
void SetOpenBlasThreads(int threads);
void SetOpenMpThreads(int threads);

// C = A*B with B row-major [K,N] ("kn") or stored transposed [N,K] ("nk", nn.Linear's layout;
// use TransposeToNk as the GemmPrepack, a layout chosen once at load time like any packing).
GemmFn OpenBlasSgemm(bool nk);
GemmFn OpenBlasSgemv(bool nk);  // M = 1 only
GemmPrepack TransposeToNk();

// BLIS, loaded at run time with its symbols kept local (it exports the same BLAS and CBLAS names
// as OpenBLAS, which LibTorch and Kiln's own baseline calls must keep resolving to).
absl::StatusOr<GemmFn> BlisSgemm(int threads);

// A oneDNN matmul for one shape and thread count, its weights in the layout oneDNN prefers.
// `bf16`: bf16 weights (packed from bf16 [K,N]) and the fp32 activations converted to bf16 in
// each call (part of the timed work), fp32 output. `plain_weights`: the weights as given, [K,N]
// row-major (Pack copies them), for weights a caller indexes into (one expert's of many).
class OnednnMatmul {
 public:
  static absl::StatusOr<std::unique_ptr<OnednnMatmul>> Create(int M, int N, int K, bool bf16,
                                                              bool plain_weights = false);
  virtual ~OnednnMatmul() = default;
  virtual long PackedBytes() const = 0;
  virtual void Pack(const void* weights_kn, void* packed) = 0;
  virtual void Run(const float* A, const void* packed, float* C) = 0;
};

// oneDNN's softmax over the last axis of a [rows, cols] fp32 matrix (a vendor routine for
// SOFTMAX; oneDNN has no RMS norm or attention primitive in this version).
class OnednnSoftmax {
 public:
  static absl::StatusOr<std::unique_ptr<OnednnSoftmax>> Create(int rows, int cols);
  virtual ~OnednnSoftmax() = default;
  virtual void Run(const float* in, float* out) = 0;
};

}  // namespace kiln::hardware::cpu_baselines
