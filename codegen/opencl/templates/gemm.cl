// Kiln OpenCL C template: fp32 GEMM C[M,N] = A[M,K] * B[K,N], all row-major.
//
// Compile-time constants (set by the renderer):
//   DIM_M, DIM_N, DIM_K  the shape
//   WGM, WGN   work-group size along M (local y) and N (local x)
//   TM, TN     outputs per work-item along M and N; a work-group computes a BM x BN block
//   VW         vector width of B loads and C stores (TN % VW == 0, DIM_N % VW == 0)
//   KU         unroll factor of the k loop
//   LOCAL      1: stage TK-deep slices of A and B in local memory; 0: read global directly
//   TK         depth of a local-memory slice (8 when LOCAL == 0)
//   RASTER     0: consecutive work-groups walk along N; 1: along M (B panels reused in cache)
// A work-item owns rows ly*TM .. +TM of its block and the VW-wide column vectors
// lx*VW + j*WGN*VW (j < TN/VW), so neighbouring work-items touch neighbouring addresses.

#define BM (WGM * TM)
#define BN (WGN * TN)
#define TNV (TN / VW)
#define MBLOCKS ((DIM_M + BM - 1) / BM)
#define NBLOCKS ((DIM_N + BN - 1) / BN)

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

__kernel __attribute__((reqd_work_group_size(WGN, WGM, 1))) void kiln_gemm(
    __global const float* restrict A, __global const float* restrict B,
    __global float* restrict C) {
  const int lx = get_local_id(0), ly = get_local_id(1);
  const int g = get_group_id(0) + get_group_id(1) * get_num_groups(0);
#if RASTER == 0
  const int mb = g / NBLOCKS, nb = g % NBLOCKS;
#else
  const int mb = g % MBLOCKS, nb = g / MBLOCKS;
#endif
  const int row0 = mb * BM + ly * TM;
  // Out-of-range rows and columns read clamped (valid) addresses; only their stores are skipped.
  int rows[TM], cols[TNV];
#pragma unroll
  for (int i = 0; i < TM; ++i) rows[i] = min(row0 + i, DIM_M - 1);
#pragma unroll
  for (int j = 0; j < TNV; ++j) cols[j] = min(nb * BN + (j * WGN + lx) * VW, DIM_N - VW);

  vec_t acc[TM][TNV];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TNV; ++j) acc[i][j] = (vec_t)(0.0f);

#if LOCAL == 0
  int k = 0;
  for (; k + KU <= DIM_K; k += KU) {
#pragma unroll
    for (int u = 0; u < KU; ++u) {
      vec_t b[TNV];
#pragma unroll
      for (int j = 0; j < TNV; ++j) b[j] = VLOAD(B + (size_t)(k + u) * DIM_N + cols[j]);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float a = A[(size_t)rows[i] * DIM_K + k + u];
#pragma unroll
        for (int j = 0; j < TNV; ++j) acc[i][j] = fma((vec_t)(a), b[j], acc[i][j]);
      }
    }
  }
  for (; k < DIM_K; ++k) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const float a = A[(size_t)rows[i] * DIM_K + k];
#pragma unroll
      for (int j = 0; j < TNV; ++j)
        acc[i][j] = fma((vec_t)(a), VLOAD(B + (size_t)k * DIM_N + cols[j]), acc[i][j]);
    }
  }
#else
  __local float As[TK][BM];  // A slice, transposed: As[k][row in block]
  __local float Bs[TK][BN];
  const int lid = ly * WGN + lx;
  for (int k0 = 0; k0 < DIM_K; k0 += TK) {
    for (int e = lid; e < BM * TK; e += WGM * WGN) {
      const int r = e / TK, kk = e % TK;
      const int row = min(mb * BM + r, DIM_M - 1);
      As[kk][r] = k0 + kk < DIM_K ? A[(size_t)row * DIM_K + k0 + kk] : 0.0f;
    }
    for (int e = lid; e < TK * BN; e += WGM * WGN) {
      const int kk = e / BN, c = e % BN;
      const int col = min(nb * BN + c, DIM_N - 1);
      Bs[kk][c] = k0 + kk < DIM_K ? B[(size_t)(k0 + kk) * DIM_N + col] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k1 = 0; k1 < TK; k1 += KU) {  // TK % KU == 0
#pragma unroll
      for (int u = 0; u < KU; ++u) {
        const int kk = k1 + u;
        vec_t b[TNV];
#pragma unroll
        for (int j = 0; j < TNV; ++j) b[j] = VLOAD(&Bs[kk][(j * WGN + lx) * VW]);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const float a = As[kk][ly * TM + i];
#pragma unroll
          for (int j = 0; j < TNV; ++j) acc[i][j] = fma((vec_t)(a), b[j], acc[i][j]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#endif

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    if (row0 + i >= DIM_M) break;
#pragma unroll
    for (int j = 0; j < TNV; ++j) {
      const int col = nb * BN + (j * WGN + lx) * VW;
      if (col < DIM_N) VSTORE(acc[i][j], C + (size_t)(row0 + i) * DIM_N + col);
    }
  }
}
