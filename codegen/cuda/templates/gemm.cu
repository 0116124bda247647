// Kiln CUDA C++ template: fp32 GEMM C[M,N] = A[M,K] * B[K,N], all row-major.
//
// Compile-time constants (set by the renderer):
//   DIM_M, DIM_N, DIM_K  the shape
//   BM, BN     block tile of C computed by one thread block
//   BK         depth of the A and B slices staged in shared memory per step
//   TM, TN     outputs per thread: rows ty*TM .. +TM, columns tx + j*(BN/TN) (coalesced)
//   VEC        width of B's global loads (1, 2 or 4 floats; DIM_N % VEC == 0)
//   THREADS    (derived) (BM/TM) * (BN/TN)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

extern "C" __global__ void __launch_bounds__(THREADS)
    kiln_gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) {
  __shared__ float As[BK][BM];  // transposed: As[k][row in block]
  __shared__ __align__(16) float Bs[BK][BN];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < DIM_K; k0 += BK) {
    for (int e = tid; e < BM * BK; e += THREADS) {
      const int r = e / BK, kk = e % BK;
      As[kk][r] = (m0 + r < DIM_M && k0 + kk < DIM_K)
                      ? A[(size_t)(m0 + r) * DIM_K + k0 + kk] : 0.0f;
    }
    for (int e = tid; e < BK * (BN / VEC); e += THREADS) {
      const int kk = e / (BN / VEC), c = (e % (BN / VEC)) * VEC;
      vec_t val;
      if (k0 + kk < DIM_K && n0 + c < DIM_N)
        val = *reinterpret_cast<const vec_t*>(B + (size_t)(k0 + kk) * DIM_N + n0 + c);
      else
        val = vec_t{};
      *reinterpret_cast<vec_t*>(&Bs[kk][c]) = val;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + j * (BN / TN)];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + ty * TM + i;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int col = n0 + tx + j * (BN / TN);
      if (row < DIM_M && col < DIM_N) C[(size_t)row * DIM_N + col] = acc[i][j];
    }
  }
}
