// Kiln OpenCL C template: decode attention with grouped-query heads over a KV cache.
//   q [B][H][D], k and v [B][KVH][L][D], out [B][H][D]; head h reads kv head h / (H / KVH);
//   out = softmax(q . k^T / sqrt(D)) . v
//
// Compile-time constants: DIM_B, DIM_H, DIM_KVH, DIM_D, DIM_L;
//   WG     work-items per (sequence, head) work-group (a power of two)
//   CHUNK  context positions scored per step (scores live in local memory)
//   VW     vector width of the q . k dot products (DIM_D % VW == 0)
//   DPT    (derived) output dimensions per work-item, ceil(D / WG)
// Each step scores CHUNK positions (work-items split the positions), updates the running max
// and sum of an online softmax, then accumulates p . v (work-items split the D dimensions).

#define GROUP (DIM_H / DIM_KVH)

#if VW == 1
typedef float vec_t;
#define VLOAD(p) (*(p))
#else
#define KILN_CAT_(a, b) a##b
#define KILN_CAT(a, b) KILN_CAT_(a, b)
typedef KILN_CAT(float, VW) vec_t;
#define VLOAD(p) KILN_CAT(vload, VW)(0, (p))
#endif

float vdot(vec_t a, vec_t b) {
#if VW == 1
  return a * b;
#elif VW <= 4
  return dot(a, b);
#elif VW == 8
  return dot(a.lo, b.lo) + dot(a.hi, b.hi);
#else
  return dot(a.lo.lo, b.lo.lo) + dot(a.lo.hi, b.lo.hi) + dot(a.hi.lo, b.hi.lo) +
         dot(a.hi.hi, b.hi.hi);
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void kiln_attention_decode(
    __global const float* restrict q, __global const float* restrict k,
    __global const float* restrict v, __global float* restrict out) {
  const int lx = get_local_id(0);
  const int bh = get_group_id(0);  // b * H + h
  const int b = bh / DIM_H, h = bh % DIM_H;
  const size_t kv = ((size_t)b * DIM_KVH + h / GROUP) * DIM_L * DIM_D;
  __local float qs[DIM_D];
  __local float p[CHUNK];
  __local float red[WG];
  const float scale = rsqrt((float)DIM_D);
  for (int d = lx; d < DIM_D; d += WG) qs[d] = q[(size_t)bh * DIM_D + d] * scale;
  barrier(CLK_LOCAL_MEM_FENCE);

  float m = -INFINITY, s = 0.0f, acc[DPT];
  for (int t = 0; t < DPT; ++t) acc[t] = 0.0f;
  for (int c0 = 0; c0 < DIM_L; c0 += CHUNK) {
    const int n = min(CHUNK, DIM_L - c0);
    float cmax = -INFINITY;
    for (int j = lx; j < n; j += WG) {
      __global const float* kr = k + kv + (size_t)(c0 + j) * DIM_D;
      float sc = 0.0f;
      for (int d = 0; d < DIM_D; d += VW) sc += vdot(VLOAD(qs + d), VLOAD(kr + d));
      p[j] = sc;
      cmax = fmax(cmax, sc);
    }
    red[lx] = cmax;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = WG / 2; r > 0; r >>= 1) {
      if (lx < r) red[lx] = fmax(red[lx], red[lx + r]);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float m_new = fmax(m, red[0]);
    barrier(CLK_LOCAL_MEM_FENCE);
    float csum = 0.0f;
    for (int j = lx; j < n; j += WG) {
      const float e = exp(p[j] - m_new);
      p[j] = e;
      csum += e;
    }
    red[lx] = csum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = WG / 2; r > 0; r >>= 1) {
      if (lx < r) red[lx] += red[lx + r];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float corr = exp(m - m_new);  // 0 on the first step (m = -inf)
    s = s * corr + red[0];
    m = m_new;
    for (int t = 0; t < DPT; ++t) {
      const int d = lx + t * WG;
      if (d < DIM_D) {
        float a = acc[t] * corr;
        __global const float* vc = v + kv + (size_t)c0 * DIM_D + d;
        for (int j = 0; j < n; ++j) a = fma(p[j], vc[(size_t)j * DIM_D], a);
        acc[t] = a;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // p and red are rewritten by the next step
  }
  const float inv = 1.0f / s;
  for (int t = 0; t < DPT; ++t) {
    const int d = lx + t * WG;
    if (d < DIM_D) out[(size_t)bh * DIM_D + d] = acc[t] * inv;
  }
}
