// Reference decode attention (GQA over a KV cache) in double precision.
#pragma once

namespace kiln::hardware {

// One new query token per sequence attends over its whole context of L cached positions:
//   q   [B][H][D]          the queries
//   k,v [B][KVH][L][D]     the KV cache; query head h reads kv head h / (H / KVH)
//   out [B][H][D]          softmax(scale * q·k^T) · v
// scale is 1/sqrt(D) for standard attention. Accumulates in double.
void ReferenceAttentionDecode(const float* q, const float* k, const float* v, float* out, int B,
                              int H, int KVH, int D, int L, float scale);

}  // namespace kiln::hardware
