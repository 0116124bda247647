// Kiln CUDA C++ template: row softmax out[t,:] = exp(x[t,:] - max) / sum(exp(x[t,:] - max)).
//
// Compile-time constants: DIM_T rows of length DIM_N;
//   TPR     threads per row (threadIdx.x; a multiple of 32)
//   RPB     rows per block (threadIdx.y)
//   VEC     width of loads and stores (1, 2 or 4; DIM_N % VEC == 0)
//   ONLINE  1: one pass keeps a running max and a rescaled sum; 0: a max pass, then a sum pass
// Partials are reduced with warp shuffles, then across the row's warps in shared memory.

#define KILN_NEG_INF (-__int_as_float(0x7f800000))  // NVRTC has no math.h INFINITY

#define NV (DIM_N / VEC)
#define WARPS (TPR / 32)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
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

extern "C" __global__ void __launch_bounds__(TPR * RPB)
    kiln_softmax(const float* __restrict__ x, float* __restrict__ out) {
  const int lx = threadIdx.x, ly = threadIdx.y;
  const int row = blockIdx.x * RPB + ly;
  const vec_t* xr = reinterpret_cast<const vec_t*>(x + (size_t)min(row, DIM_T - 1) * DIM_N);
  float m = KILN_NEG_INF, s = 0.0f;
  for (int i = lx; i < NV; i += TPR) {
    const vec_t v = xr[i];
    const float* f = reinterpret_cast<const float*>(&v);
    float vm = f[0];
#pragma unroll
    for (int e = 1; e < VEC; ++e) vm = fmaxf(vm, f[e]);
#if ONLINE
    const float mn = fmaxf(m, vm);
    s *= __expf(m - mn);
#pragma unroll
    for (int e = 0; e < VEC; ++e) s += __expf(f[e] - mn);
    m = mn;
#else
    m = fmaxf(m, vm);
#endif
  }
#if WARPS > 1
  __shared__ float part[RPB][WARPS];
#endif
  float row_max = warp_max(m);
#if WARPS > 1
  if (lx % 32 == 0) part[ly][lx / 32] = row_max;
  __syncthreads();
  row_max = part[ly][0];
#pragma unroll
  for (int w = 1; w < WARPS; ++w) row_max = fmaxf(row_max, part[ly][w]);
  __syncthreads();  // part is reused for the sums
#endif
#if ONLINE
  s = m == KILN_NEG_INF ? 0.0f : s * __expf(m - row_max);
#else
  for (int i = lx; i < NV; i += TPR) {
    const vec_t v = xr[i];
    const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
    for (int e = 0; e < VEC; ++e) s += __expf(f[e] - row_max);
  }
#endif
  s = warp_sum(s);
#if WARPS > 1
  if (lx % 32 == 0) part[ly][lx / 32] = s;
  __syncthreads();
  s = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) s += part[ly][w];
#endif
  if (row >= DIM_T) return;
  const float inv = 1.0f / s;
  vec_t* o = reinterpret_cast<vec_t*>(out + (size_t)row * DIM_N);
  for (int i = lx; i < NV; i += TPR) {
    vec_t v = xr[i];
    float* f = reinterpret_cast<float*>(&v);
#pragma unroll
    for (int e = 0; e < VEC; ++e) f[e] = __expf(f[e] - row_max) * inv;
    o[i] = v;
  }
}
