// Reference RMSNorm in double precision: out = x / sqrt(mean(x^2) + eps) * weight, per row.
#pragma once

namespace kiln::hardware {

// The epsilon every RMSNorm kernel and the reference use (Llama's rms_norm_eps).
inline constexpr float kRmsNormEps = 1e-5f;

// x and out are T rows of width D (row-major), weight has D elements. Accumulates in double
// and rounds each output once.
void ReferenceRmsNorm(const float* x, const float* weight, float* out, int T, int D, float eps);

}  // namespace kiln::hardware
