// Kiln OpenCL C template: RMSNorm out[t,:] = x[t,:] / sqrt(mean(x[t,:]^2) + eps) * weight[:].
//
// Compile-time constants: DIM_T rows of width DIM_D;
//   WG   work-items sharing one row (local x; a power of two)
//   RPG  rows per work-group (local y)
//   VW   vector width of loads and stores (DIM_D % VW == 0)
// A row's sum of squares is reduced across its WG work-items in local memory.

#define KILN_RMSNORM_EPS 1e-5f
#define DV (DIM_D / VW)

#if VW == 1
typedef float vec_t;
#define VLOAD(p) (*(p))
#define VSTORE(v, p) (*(p) = (v))
#define VSUM(v) (v)
#else
#define KILN_CAT_(a, b) a##b
#define KILN_CAT(a, b) KILN_CAT_(a, b)
typedef KILN_CAT(float, VW) vec_t;
#define VLOAD(p) KILN_CAT(vload, VW)(0, (p))
#define VSTORE(v, p) KILN_CAT(vstore, VW)((v), 0, (p))
#endif

#if VW == 2
#define VSUM(v) ((v).s0 + (v).s1)
#elif VW == 4
#define VSUM(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3)
#elif VW == 8
#define VSUM(v) (VSUM4((v).lo) + VSUM4((v).hi))
#define VSUM4(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3)
#elif VW == 16
#define VSUM(v) (VSUM8((v).lo) + VSUM8((v).hi))
#define VSUM8(v) (VSUM4((v).lo) + VSUM4((v).hi))
#define VSUM4(v) ((v).s0 + (v).s1 + (v).s2 + (v).s3)
#endif

__kernel __attribute__((reqd_work_group_size(WG, RPG, 1))) void kiln_rmsnorm(
    __global const float* restrict x, __global const float* restrict weight,
    __global float* restrict out) {
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int row = get_group_id(1) * RPG + ly;
  __global const float* xr = x + (size_t)min(row, DIM_T - 1) * DIM_D;
  vec_t ss = (vec_t)(0.0f);
  for (int i = lx; i < DV; i += WG) {
    const vec_t v = VLOAD(xr + i * VW);
    ss = fma(v, v, ss);
  }
  float sum = VSUM(ss);
#if WG > 1
  __local float red[RPG][WG];
  red[ly][lx] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = WG / 2; s > 0; s >>= 1) {
    if (lx < s) red[ly][lx] += red[ly][lx + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  sum = red[ly][0];
#endif
  const float inv = rsqrt(sum / DIM_D + KILN_RMSNORM_EPS);
  if (row >= DIM_T) return;
  __global float* o = out + (size_t)row * DIM_D;
  for (int i = lx; i < DV; i += WG)
    VSTORE(VLOAD(xr + i * VW) * inv * VLOAD(weight + i * VW), o + i * VW);
}
