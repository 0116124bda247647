// Kiln OpenCL C template: row softmax out[t,:] = exp(x[t,:] - max) / sum(exp(x[t,:] - max)).
//
// Compile-time constants: DIM_T rows of length DIM_N;
//   WG      work-items sharing one row (local x; a power of two)
//   RPG     rows per work-group (local y)
//   VW      vector width of loads and stores (DIM_N % VW == 0)
//   ONLINE  1: one pass computes the running max and the rescaled sum together;
//           0: a max pass, then a sum pass
// Per-row partials are reduced across the WG work-items in local memory.

#define NV (DIM_N / VW)

#if VW == 1
typedef float vec_t;
#define VLOAD(p) (*(p))
#define VSTORE(v, p) (*(p) = (v))
#else
#define KILN_CAT_(a, b) a##b
#define KILN_CAT(a, b) KILN_CAT_(a, b)
typedef KILN_CAT(float, VW) vec_t;
#define VLOAD(p) KILN_CAT(vload, VW)(0, (p))
#define VSTORE(v, p) KILN_CAT(vstore, VW)((v), 0, (p))
#endif

// Horizontal max and sum of a vector.
float hmax(vec_t v) {
#if VW == 1
  return v;
#else
  float m = v.s0;
  const float* e = (const float*)&v;
  for (int i = 1; i < VW; ++i) m = fmax(m, e[i]);
  return m;
#endif
}
float hsum(vec_t v) {
#if VW == 1
  return v;
#else
  float s = 0.0f;
  const float* e = (const float*)&v;
  for (int i = 0; i < VW; ++i) s += e[i];
  return s;
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, RPG, 1))) void kiln_softmax(
    __global const float* restrict x, __global float* restrict out) {
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int row = get_group_id(1) * RPG + ly;
  __global const float* xr = x + (size_t)min(row, DIM_T - 1) * DIM_N;
  float m = -INFINITY, s = 0.0f;
#if ONLINE
  for (int i = lx; i < NV; i += WG) {
    const vec_t v = VLOAD(xr + i * VW);
    const float mv = fmax(m, hmax(v));
    s = s * exp(m - mv) + hsum(exp(v - (vec_t)(mv)));
    m = mv;
  }
#else
  for (int i = lx; i < NV; i += WG) m = fmax(m, hmax(VLOAD(xr + i * VW)));
#endif
#if WG > 1
  __local float rm[RPG][WG], rs[RPG][WG];
  rm[ly][lx] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = WG / 2; h > 0; h >>= 1) {
    if (lx < h) rm[ly][lx] = fmax(rm[ly][lx], rm[ly][lx + h]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float row_max = rm[ly][0];
#else
  const float row_max = m;
#endif
#if ONLINE
  s = m == -INFINITY ? 0.0f : s * exp(m - row_max);  // rescale this work-item's partial sum
#else
  for (int i = lx; i < NV; i += WG) s += hsum(exp(VLOAD(xr + i * VW) - (vec_t)(row_max)));
#endif
#if WG > 1
  rs[ly][lx] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = WG / 2; h > 0; h >>= 1) {
    if (lx < h) rs[ly][lx] += rs[ly][lx + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  s = rs[ly][0];
#endif
  if (row >= DIM_T) return;
  const float inv = 1.0f / s;
  __global float* o = out + (size_t)row * DIM_N;
  for (int i = lx; i < NV; i += WG)
    VSTORE(exp(VLOAD(xr + i * VW) - (vec_t)(row_max)) * inv, o + i * VW);
}
