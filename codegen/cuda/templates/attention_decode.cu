// Kiln CUDA C++ template: decode attention with grouped-query heads over a KV cache.
//   q [B][H][D], k and v [B][KVH][L][D], out [B][H][D]; head h reads kv head h / (H / KVH);
//   out = softmax(q . k^T / sqrt(D)) . v
//
// Compile-time constants: DIM_B, DIM_H, DIM_KVH, DIM_D, DIM_L;
//   BLOCK  threads per (sequence, head) block (a multiple of 32)
//   CHUNK  context positions scored per step (scores live in shared memory)
//   VEC    width of the q . k loads (1, 2 or 4; DIM_D % VEC == 0)
//   DPT    (derived) output dimensions per thread, ceil(D / BLOCK)
// Each step: a warp scores positions (lanes split D, shuffle-reduced), an online softmax
// update, then p . v with threads splitting the D dimensions.

#define KILN_NEG_INF (-__int_as_float(0x7f800000))  // NVRTC has no math.h INFINITY

#define GROUP (DIM_H / DIM_KVH)
#define WARPS (BLOCK / 32)

#if VEC == 4
typedef float4 vec_t;
__device__ __forceinline__ float vdot(vec_t a, vec_t b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
#elif VEC == 2
typedef float2 vec_t;
__device__ __forceinline__ float vdot(vec_t a, vec_t b) { return a.x * b.x + a.y * b.y; }
#else
typedef float vec_t;
__device__ __forceinline__ float vdot(vec_t a, vec_t b) { return a * b; }
#endif

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

extern "C" __global__ void __launch_bounds__(BLOCK)
    kiln_attention_decode(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ out) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int bh = blockIdx.x, b = bh / DIM_H, h = bh % DIM_H;
  const size_t kv = ((size_t)b * DIM_KVH + h / GROUP) * DIM_L * DIM_D;
  __shared__ __align__(16) float qs[DIM_D];
  __shared__ float p[CHUNK];
  __shared__ float red[WARPS];
  const float scale = rsqrtf((float)DIM_D);
  for (int d = tid; d < DIM_D; d += BLOCK) qs[d] = q[(size_t)bh * DIM_D + d] * scale;
  __syncthreads();

  float m = KILN_NEG_INF, s = 0.0f, acc[DPT];
#pragma unroll
  for (int t = 0; t < DPT; ++t) acc[t] = 0.0f;
  for (int c0 = 0; c0 < DIM_L; c0 += CHUNK) {
    const int n = min(CHUNK, DIM_L - c0);
    float cmax = KILN_NEG_INF;
    for (int j = warp; j < n; j += WARPS) {  // one warp per position
      const vec_t* kr = reinterpret_cast<const vec_t*>(k + kv + (size_t)(c0 + j) * DIM_D);
      const vec_t* qv = reinterpret_cast<const vec_t*>(qs);
      float sc = 0.0f;
      for (int d = lane; d < DIM_D / VEC; d += 32) sc += vdot(qv[d], kr[d]);
      sc = warp_sum(sc);
      if (lane == 0) p[j] = sc;
      cmax = fmaxf(cmax, sc);
    }
    cmax = warp_max(cmax);
    if (lane == 0) red[warp] = cmax;
    __syncthreads();
    float m_new = m;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) m_new = fmaxf(m_new, red[w]);
    __syncthreads();
    float csum = 0.0f;
    for (int j = tid; j < n; j += BLOCK) {
      const float e = __expf(p[j] - m_new);
      p[j] = e;
      csum += e;
    }
    csum = warp_sum(csum);
    if (lane == 0) red[warp] = csum;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += red[w];
    const float corr = __expf(m - m_new);  // 0 on the first step (m = -inf)
    s = s * corr + total;
    m = m_new;
#pragma unroll
    for (int t = 0; t < DPT; ++t) {
      const int d = tid + t * BLOCK;
      if (d < DIM_D) {
        float a = acc[t] * corr;
        const float* vc = v + kv + (size_t)c0 * DIM_D + d;
        for (int j = 0; j < n; ++j) a = fmaf(p[j], vc[(size_t)j * DIM_D], a);
        acc[t] = a;
      }
    }
    __syncthreads();  // p and red are rewritten by the next step
  }
  const float inv = 1.0f / s;
#pragma unroll
  for (int t = 0; t < DPT; ++t) {
    const int d = tid + t * BLOCK;
    if (d < DIM_D) out[(size_t)bh * DIM_D + d] = acc[t] * inv;
  }
}
