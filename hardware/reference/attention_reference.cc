#include "hardware/reference/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace kiln::hardware {

void ReferenceAttentionDecode(const float* q, const float* k, const float* v, float* out, int B,
                              int H, int KVH, int D, int L, float scale) {
  const int group = H / KVH;
  std::vector<double> score(L), acc(D);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const float* qh = q + (static_cast<size_t>(b) * H + h) * D;
      const size_t kv = (static_cast<size_t>(b) * KVH + h / group) * L * D;
      double max = -INFINITY;
      for (int l = 0; l < L; ++l) {
        const float* kl = k + kv + static_cast<size_t>(l) * D;
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += double{qh[d]} * kl[d];
        score[l] = dot * scale;
        max = std::max(max, score[l]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int l = 0; l < L; ++l) {
        const double p = std::exp(score[l] - max);
        sum += p;
        const float* vl = v + kv + static_cast<size_t>(l) * D;
        for (int d = 0; d < D; ++d) acc[d] += p * vl[d];
      }
      float* o = out + (static_cast<size_t>(b) * H + h) * D;
      for (int d = 0; d < D; ++d) o[d] = static_cast<float>(acc[d] / sum);
    }
  }
}

}  // namespace kiln::hardware
