#include "hardware/reference/softmax_reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace kiln::hardware {

void ReferenceSoftmax(const float* x, float* out, int T, int N) {
  std::vector<double> e(N);
  for (int t = 0; t < T; ++t) {
    const float* row = x + static_cast<size_t>(t) * N;
    const double max = *std::max_element(row, row + N);
    double sum = 0;
    for (int n = 0; n < N; ++n) sum += e[n] = std::exp(row[n] - max);
    float* o = out + static_cast<size_t>(t) * N;
    for (int n = 0; n < N; ++n) o[n] = static_cast<float>(e[n] / sum);
  }
}

}  // namespace kiln::hardware
