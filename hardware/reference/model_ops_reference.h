// Double-precision reference operators for the model operators: GEMM epilogues and
// bf16 weights, rope, causal prefill attention, MoE router and grouped GEMM, Mamba selective
// scan, causal depthwise conv1d. Layouts are the kernels' (see docs/models.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::hardware {

// bf16 <-> fp32: the top 16 bits of an fp32, rounded to nearest even.
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);
// out[i] = Bf16ToFloat(in[i]) for n values: bf16 weights as a model loaded in fp32 holds them.
void WidenBf16(const uint16_t* in, size_t n, float* out);

// C[M,N] = epilogue(A[M,K] * B[K,N]); B is fp32 (b32) or bf16 (b16, when b32 is null).
// epilogue: "", "bias" (+bias[N]), "silu", "gelu" (tanh form), "residual" (+R[M,N]).
// mag[M,N] = sum_k |a*b| + |bias| + |R|, which scales the tolerance.
void ReferenceGemmEpilogue(int M, int N, int K, const float* A, const float* b32,
                           const uint16_t* b16, const float* bias, const float* R,
                           const std::string& epilogue, double* out, double* mag);

// x[T,H,D] rotated in place by HF's rotate_half rule at positions pos[T], base theta.
void ReferenceRope(int T, int H, int D, const float* x, const int32_t* pos, float theta,
                   double* out);

// Causal attention: q[B,S,H,D], k/v[B,S,KVH,D] -> out[B,S,H,D].
void ReferenceAttentionPrefill(int B, int H, int KVH, int D, int S, const float* q, const float* k,
                               const float* v, float scale, double* out);

// Decode attention over a KV cache: q[B,H,D], k/v[B,KVH,L,D] -> out[B,H,D].
void ReferenceAttentionDecodeGqa(int B, int H, int KVH, int D, int L, const float* q,
                                 const float* k, const float* v, float scale, double* out);

// Router: probs = softmax(x[T,D] * W[D,E]); top-k (ties: lower index), renormalised.
void ReferenceMoeRouter(int T, int D, int E, int TOPK, const float* x, const float* W,
                        double* weights, int32_t* experts, double* probs);

// y[r] = x[r] * W[experts[r]] for r < T*TOPK; W is E x K x N, fp32 or bf16.
void ReferenceMoeGemm(int T, int E, int TOPK, int N, int K, const float* x, const float* w32,
                      const uint16_t* w16, const int32_t* experts, double* y, double* mag);

// Mamba selective scan (see codegen/cpu/templates/ssm_scan.cc); h[B,D,S] is advanced in place.
void ReferenceSsmScan(int B, int T, int D, int S, const float* u, const float* delta,
                      const float* A, const float* Bm, const float* Cm, const float* Dp,
                      const float* z, bool softplus, double* h, double* y);

// Causal depthwise conv1d with a carried state[B,W-1,D] (advanced in place), optional SiLU.
void ReferenceConv1d(int B, int T, int D, int W, const float* x, const float* w, const float* bias,
                     bool silu, double* state, double* out);

// RMSNorm of x[T,D] with weight w (eps), and row softmax / SwiGLU, in double.
void ReferenceRmsNormD(int T, int D, const float* x, const float* w, float eps, double* out);
void ReferenceSoftmaxD(int T, int N, const float* x, double* out);
void ReferenceSwigluD(int64_t n, const float* gate, const float* up, double* out);

}  // namespace kiln::hardware
