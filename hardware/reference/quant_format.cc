#include "hardware/reference/quant_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::hardware {

uint16_t FloatToHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

float HalfToFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

size_t QuantPlainBytes(int64_t K, int64_t N) {
  return static_cast<size_t>(K * N) +
         2 * static_cast<size_t>((K + kQuantGroup - 1) / kQuantGroup * N);
}

void QuantizeWeights(const float* B, int64_t K, int64_t N, int bits, uint8_t* plain) {
  const int qmax = bits == 4 ? 7 : 127, qmin = bits == 4 ? -8 : -127;
  int8_t* q = reinterpret_cast<int8_t*>(plain);
  uint16_t* s = reinterpret_cast<uint16_t*>(plain + K * N);
  const int64_t G = (K + kQuantGroup - 1) / kQuantGroup;
  std::vector<float> amax(N);
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * kQuantGroup, k1 = std::min(K, k0 + kQuantGroup);
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t n = 0; n < N; ++n) amax[n] = std::max(amax[n], std::fabs(B[k * N + n]));
    for (int64_t n = 0; n < N; ++n) {
      const uint16_t h = FloatToHalf(amax[n] / qmax);
      s[g * N + n] = h;
      const float scale = HalfToFloat(h), inv = scale > 0 ? 1.0f / scale : 0.0f;
      for (int64_t k = k0; k < k1; ++k) {
        const long v = std::lrint(B[k * N + n] * inv);
        q[k * N + n] = static_cast<int8_t>(std::clamp<long>(v, qmin, qmax));
      }
    }
  }
}

float DequantizedWeight(const uint8_t* plain, int64_t K, int64_t N, int64_t k, int64_t n) {
  const int8_t q = static_cast<int8_t>(plain[k * N + n]);
  uint16_t h;
  std::memcpy(&h, plain + K * N + 2 * ((k / kQuantGroup) * N + n), 2);
  return static_cast<float>(q) * HalfToFloat(h);
}

void DequantizeRows(const uint8_t* plain, int64_t K, int64_t N, int64_t k0, int64_t k1,
                    float* out) {
  const int8_t* q = reinterpret_cast<const int8_t*>(plain);
  std::vector<float> scale(static_cast<size_t>(N));  // the group's scales, converted once
  for (int64_t k = k0; k < k1; ++k) {
    if (k == k0 || k % kQuantGroup == 0)
      for (int64_t n = 0; n < N; ++n) {
        uint16_t h;
        std::memcpy(&h, plain + K * N + 2 * ((k / kQuantGroup) * N + n), 2);
        scale[n] = HalfToFloat(h);
      }
    for (int64_t n = 0; n < N; ++n)
      out[(k - k0) * N + n] = static_cast<float>(q[k * N + n]) * scale[n];
  }
}

std::vector<float> DequantizeWeights(const uint8_t* plain, int64_t K, int64_t N) {
  std::vector<float> w(static_cast<size_t>(K * N));
  DequantizeRows(plain, K, N, 0, K, w.data());
  return w;
}

std::vector<float> QuantizeActivationsLikeKernel(const float* A, int64_t M, int64_t K) {
  std::vector<float> out(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k0 = 0; k0 < K; k0 += kQuantGroup) {
      const int64_t k1 = std::min(K, k0 + kQuantGroup);
      float amax = 0;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(A[m * K + k]));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
      for (int64_t k = k0; k < k1; ++k) out[m * K + k] = std::nearbyint(A[m * K + k] * inv) * scale;
    }
  return out;
}

}  // namespace kiln::hardware
