#include "hardware/reference/rmsnorm_reference.h"

#include <cmath>
#include <cstddef>

namespace kiln::hardware {

void ReferenceRmsNorm(const float* x, const float* weight, float* out, int T, int D, float eps) {
  for (int t = 0; t < T; ++t) {
    const float* row = x + static_cast<size_t>(t) * D;
    double sum_sq = 0;
    for (int d = 0; d < D; ++d) sum_sq += double{row[d]} * row[d];
    const double inv = 1.0 / std::sqrt(sum_sq / D + eps);
    float* o = out + static_cast<size_t>(t) * D;
    for (int d = 0; d < D; ++d) o[d] = static_cast<float>(row[d] * inv * weight[d]);
  }
}

}  // namespace kiln::hardware
