// Kiln OpenCL C template: SwiGLU out = silu(gate) * up, element-wise over DIM_T x DIM_F.
//
// Compile-time constants: DIM_T, DIM_F;
//   WG   work-group size (local x)
//   VW   vector width (DIM_F % VW == 0)
//   EPT  vectors per work-item, strided by WG * VW elements so neighbours stay adjacent
//   FAST 1: native_exp / native_divide (hardware approximations); 0: exp and a true divide

#define TOTAL_V ((DIM_T * DIM_F) / VW)

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

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void kiln_swiglu(
    __global const float* restrict gate, __global const float* restrict up,
    __global float* restrict out) {
  const size_t base = get_group_id(0) * (size_t)(WG * EPT) + get_local_id(0);
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    const size_t v = base + (size_t)e * WG;
    if (v >= TOTAL_V) return;
    const vec_t g = VLOAD(gate + v * VW);
#if FAST
    const vec_t silu = native_divide(g, (vec_t)(1.0f) + native_exp(-g));
#else
    const vec_t silu = g / ((vec_t)(1.0f) + exp(-g));
#endif
    VSTORE(silu * VLOAD(up + v * VW), out + v * VW);
  }
}
