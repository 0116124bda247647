// Reference SwiGLU in double precision: out = silu(gate) * up, element-wise.
#pragma once

namespace kiln::hardware {

// gate, up and out are T rows of width F (row-major); silu(g) = g / (1 + exp(-g)).
void ReferenceSwiglu(const float* gate, const float* up, float* out, int T, int F);

}  // namespace kiln::hardware
