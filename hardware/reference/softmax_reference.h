// Reference row softmax in double precision: out = exp(x - max) / sum(exp(x - max)), per row.
#pragma once

namespace kiln::hardware {

// x and out are T rows of length N (row-major).
void ReferenceSoftmax(const float* x, float* out, int T, int N);

}  // namespace kiln::hardware
