// Kiln CUDA C++ template: RMSNorm out[t,:] = x[t,:] / sqrt(mean(x[t,:]^2) + eps) * weight[:].
//
// Compile-time constants: DIM_T rows of width DIM_D;
//   TPR  threads per row (threadIdx.x; a multiple of 32)
//   RPB  rows per block (threadIdx.y)
//   VEC  width of loads and stores (1, 2 or 4; DIM_D % VEC == 0)
// Sums of squares are reduced with warp shuffles, then across the row's warps in shared memory.

#define KILN_RMSNORM_EPS 1e-5f
#define DV (DIM_D / VEC)
#define WARPS (TPR / 32)

#if VEC == 4
typedef float4 vec_t;
__device__ __forceinline__ float sq(vec_t v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }
__device__ __forceinline__ vec_t mul3(vec_t a, float s, vec_t b) {
  return make_float4(a.x * s * b.x, a.y * s * b.y, a.z * s * b.z, a.w * s * b.w);
}
#elif VEC == 2
typedef float2 vec_t;
__device__ __forceinline__ float sq(vec_t v) { return v.x * v.x + v.y * v.y; }
__device__ __forceinline__ vec_t mul3(vec_t a, float s, vec_t b) {
  return make_float2(a.x * s * b.x, a.y * s * b.y);
}
#else
typedef float vec_t;
__device__ __forceinline__ float sq(vec_t v) { return v * v; }
__device__ __forceinline__ vec_t mul3(vec_t a, float s, vec_t b) { return a * s * b; }
#endif

extern "C" __global__ void __launch_bounds__(TPR * RPB)
    kiln_rmsnorm(const float* __restrict__ x, const float* __restrict__ weight,
                 float* __restrict__ out) {
  const int lx = threadIdx.x, ly = threadIdx.y;
  const int row = blockIdx.x * RPB + ly;
  const vec_t* xr = reinterpret_cast<const vec_t*>(x + (size_t)min(row, DIM_T - 1) * DIM_D);
  const vec_t* wv = reinterpret_cast<const vec_t*>(weight);
  float sum = 0.0f;
  for (int i = lx; i < DV; i += TPR) sum += sq(xr[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#if WARPS > 1
  __shared__ float part[RPB][WARPS];
  if (lx % 32 == 0) part[ly][lx / 32] = sum;
  __syncthreads();
  sum = 0.0f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) sum += part[ly][w];
#endif
  const float inv = rsqrtf(sum / DIM_D + KILN_RMSNORM_EPS);
  if (row >= DIM_T) return;
  vec_t* o = reinterpret_cast<vec_t*>(out + (size_t)row * DIM_D);
  for (int i = lx; i < DV; i += TPR) o[i] = mul3(xr[i], inv, wv[i]);
}
