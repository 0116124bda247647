// Kiln CUDA C++ template: SwiGLU out = silu(gate) * up, element-wise over DIM_T x DIM_F.
//
// Compile-time constants: DIM_T, DIM_F;
//   BLOCK  threads per block
//   VEC    width of loads and stores (1, 2 or 4; DIM_F % VEC == 0)
//   EPT    vectors per thread, strided by BLOCK so a warp's accesses stay contiguous
//   FAST   1: __expf and __fdividef intrinsics; 0: expf and a true divide

#define TOTAL_V ((size_t)DIM_T * DIM_F / VEC)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

__device__ __forceinline__ float silu(float g) {
#if FAST
  return __fdividef(g, 1.0f + __expf(-g));
#else
  return g / (1.0f + expf(-g));
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK)
    kiln_swiglu(const float* __restrict__ gate, const float* __restrict__ up,
                float* __restrict__ out) {
  const size_t base = (size_t)blockIdx.x * BLOCK * EPT + threadIdx.x;
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    const size_t i = base + (size_t)e * BLOCK;
    if (i >= TOTAL_V) return;
    vec_t g = reinterpret_cast<const vec_t*>(gate)[i];
    const vec_t u = reinterpret_cast<const vec_t*>(up)[i];
    float* gf = reinterpret_cast<float*>(&g);
    const float* uf = reinterpret_cast<const float*>(&u);
#pragma unroll
    for (int k = 0; k < VEC; ++k) gf[k] = silu(gf[k]) * uf[k];
    reinterpret_cast<vec_t*>(out)[i] = g;
  }
}
