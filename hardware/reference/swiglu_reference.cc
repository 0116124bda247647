#include "hardware/reference/swiglu_reference.h"

#include <cmath>
#include <cstddef>

namespace kiln::hardware {

void ReferenceSwiglu(const float* gate, const float* up, float* out, int T, int F) {
  const size_t n = static_cast<size_t>(T) * F;
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

}  // namespace kiln::hardware
