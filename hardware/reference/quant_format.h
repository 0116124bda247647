// Kiln's quantized weight formats (int8 and int4, symmetric, one fp16 scale per 32 weights along
// K) in their plain, unpacked layout: what the step and the verification cases hand a quantized
// GEMM kernel, which packs it into its own layout ahead of time (kiln_op_prepack).
//
// Plain layout of a K x N weight matrix (B[k][n], as the fp32 GEMM takes it), K a multiple of 32:
//   bytes [0, K*N):          q[k*N + n], int8; in [-127, 127] (int8) or [-8, 7] (int4)
//   then G = K/32 rows of N: s[g*N + n], IEEE fp16 bit patterns
// Its value is w[k][n] = q[k][n] * s[k/32][n], exactly representable in fp32 (q has at most 8
// significant bits, s 11), so the reference is the fp32 GEMM on the dequantized matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::hardware {

inline constexpr int kQuantGroup = 32;

// Bytes of the plain layout.
size_t QuantPlainBytes(int64_t K, int64_t N);

// Quantizes B (K x N fp32, row-major) with `bits` (8 or 4): per (group, column) the scale is
// max|w| / 127 (or / 7), rounded to fp16, and q = round(w / scale) clamped to the format's range.
void QuantizeWeights(const float* B, int64_t K, int64_t N, int bits, uint8_t* plain);

// The dequantized matrix (K x N fp32): exact.
std::vector<float> DequantizeWeights(const uint8_t* plain, int64_t K, int64_t N);

// Rows [k0, k1) of the dequantized matrix into out ((k1 - k0) x N fp32).
void DequantizeRows(const uint8_t* plain, int64_t K, int64_t N, int64_t k0, int64_t k1, float* out);

// One dequantized element.
float DequantizedWeight(const uint8_t* plain, int64_t K, int64_t N, int64_t k, int64_t n);

// Activations quantized the way the kernels' AQ=1 path does it: per row and group of 32, scale
// max|x| / 127 (fp32), q = round-half-even(x * (127 / max|x|)) in fp32; returns q * scale per
// element (in fp32: the products a kernel sums, up to rounding of the product).
std::vector<float> QuantizeActivationsLikeKernel(const float* A, int64_t M, int64_t K);

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

}  // namespace kiln::hardware
