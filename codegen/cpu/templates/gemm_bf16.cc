// Kiln CPU GEMM with bf16 weights and a fused epilogue, register-blocked for prefill-sized M.
//
//   C[M,N] = epilogue(A[M,K] * B[K,N]); A and C fp32 (A rounded to bf16 for the dot products),
//   B bf16. EPI 0 none | 1 bias: + bias[N] | 2 silu | 3 gelu (tanh form) | 4 residual: + R[M,N]
//
// A BLIS-style kernel on AVX512-BF16 dot products (vdpbf16ps: 16 lanes, each the sum of two
// bf16 products added to an fp32 accumulator). The weights are packed ahead of time
// (kiln_op_prepack) into panels of NR columns, each k pair of a column one 32-bit lane:
// panel j holds, for p = 0 .. ceil(K/2)-1, NR lanes (B[2p][n], B[2p+1][n]) (zero past K or N).
// The activations are rounded to bf16 pairs once per call. An MR x NR tile of C lives in
// registers over a KC-deep slice; C is read back only between slices.
// Knobs (compile-time):
//   MR   rows of the register tile (MR * NR/16 accumulators: at most 28 of the 32 registers)
//   NR   columns of the register tile (16 or 32)
//   KC   depth of a slice, in k (even): the B slices of a block stay in L2, the A tile in L1
//   NC   columns per work item (a multiple of NR); items are (row block of MC, column block)
//   MT   register tiles of rows per work item (MC = MT * MR rows)
//   NT   threads over the work items
// Without AVX512-BF16 the same layout runs through portable loops (correct, not fast).
// ABI: kiln_op(dims {M,N,K}, args {A, packed B, bias, R, C}, params {}).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef MR
#define MR 8
#endif
#ifndef NR
#define NR 32
#endif
#ifndef KC
#define KC 256
#endif
#ifndef NC
#define NC 256
#endif
#ifndef MT
#define MT 8
#endif
#define MC (MT * MR)
#ifndef NT
#define NT 1
#endif
#ifndef EPI
#define EPI 0
#endif
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define KB_DOT 1
#else
#define KB_DOT 0
#endif

static_assert(NR == 16 || NR == 32, "NR is 16 or 32");
static_assert(MR >= 1 && MR * (NR / 16) <= 28, "MR x NR accumulators must fit in registers");
static_assert(KC % 2 == 0 && KC >= 2, "KC must be even");
static_assert(NC % NR == 0, "NC must be whole register tiles");
static_assert(MT >= 1, "MT must be >= 1");

namespace {

constexpr int kNV = NR / 16;

inline uint16_t ToBf16(float f) {  // round to nearest even
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float FromBf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

inline float Epi(float x, long i, long j, long N, const float* bias, const float* R) {
  return kiln_rt::Epilogue<EPI>(x, i, j, N, bias, R);
}

// acc[r][c] (+)= sum over pairs p in [0, np) of A pair (row r) . B pair (column c); `a` points
// at row 0's first pair (rows lda pairs apart), `b` at the panel's first pair of the slice.
// acc is MR x NR floats (row-major); `first` starts from zero instead of acc.
void Micro(int mr, long np, const uint32_t* a, long lda, const uint32_t* b, float* acc,
           bool first) {
#if KB_DOT
  __m512 c[MR][kNV];
#pragma GCC unroll 28
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v)
      c[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + r * NR + v * 16);
  for (long p = 0; p < np; ++p) {
    __m512bh bv[kNV];
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * NR + v * 16);
#pragma GCC unroll 28
    for (int r = 0; r < MR; ++r) {
      if (r >= mr) break;
      const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * lda + p]);
#pragma GCC unroll 2
      for (int v = 0; v < kNV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 28
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) _mm512_storeu_ps(acc + r * NR + v * 16, c[r][v]);
#else
  if (first) memset(acc, 0, sizeof(float) * MR * NR);
  for (long p = 0; p < np; ++p)
    for (int r = 0; r < mr; ++r) {
      const uint32_t ap = a[r * lda + p];
      const float a0 = FromBf16((uint16_t)ap), a1 = FromBf16((uint16_t)(ap >> 16));
      for (int n = 0; n < NR; ++n) {
        const uint32_t bp = b[p * NR + n];
        acc[r * NR + n] += a0 * FromBf16((uint16_t)bp) + a1 * FromBf16((uint16_t)(bp >> 16));
      }
    }
#endif
}

}  // namespace

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  (void)params;
  const long M = d[0], N = d[1], K = d[2], KP = (K + 1) / 2;
  const float* A = (const float*)args[0];
  const uint32_t* B = (const uint32_t*)args[1];
  const float* bias = (const float*)args[2];
  const float* R = (const float*)args[3];
  float* C = (float*)args[4];
  // The activations as bf16 pairs, rows of KP pairs (zero past K).
  uint32_t* ap = (uint32_t*)malloc(sizeof(uint32_t) * (size_t)M * KP + 64);
  kiln_rt::ParallelFor(M, NT, [&](long i) {
    for (long p = 0; p < KP; ++p) {
      const float x0 = A[i * K + 2 * p], x1 = 2 * p + 1 < K ? A[i * K + 2 * p + 1] : 0.0f;
      ap[i * KP + p] = ToBf16(x0) | ((uint32_t)ToBf16(x1) << 16);
    }
  });
  const long row_blocks = (M + MC - 1) / MC, col_blocks = (N + NC - 1) / NC;
  kiln_rt::ParallelFor(row_blocks * col_blocks, NT, [&](long item) {
    const long i0 = (item / col_blocks) * MC, j0 = (item % col_blocks) * NC;
    const long i1 = i0 + MC < M ? i0 + MC : M, j1 = j0 + NC < N ? j0 + NC : N;
    const long p0 = j0 / NR, p1 = (j1 + NR - 1) / NR;
    // The block's C tiles, accumulated over the K slices.
    float* tiles = (float*)aligned_alloc(64, sizeof(float) * MC * NC);
    for (long k0 = 0; k0 < KP; k0 += KC / 2) {
      const long np = KP - k0 < KC / 2 ? KP - k0 : KC / 2;
      for (long i = i0; i < i1; i += MR) {
        const int mr = i1 - i < MR ? (int)(i1 - i) : MR;
        for (long p = p0; p < p1; ++p) {
          float* acc = tiles + ((i - i0) / MR * (p1 - p0) + (p - p0)) * MR * NR;
          Micro(mr, np, ap + i * KP + k0, KP, B + (p * KP + k0) * NR, acc, k0 == 0);
        }
      }
    }
    for (long i = i0; i < i1; i += MR) {
      const int mr = i1 - i < MR ? (int)(i1 - i) : MR;
      for (long p = p0; p < p1; ++p) {
        const float* acc = tiles + ((i - i0) / MR * (p1 - p0) + (p - p0)) * MR * NR;
        const long jn = (p + 1) * NR < j1 ? (p + 1) * NR : j1;
        for (int r = 0; r < mr; ++r)
          for (long j = p * NR; j < jn; ++j)
            C[(i + r) * N + j] = Epi(acc[r * NR + (j - p * NR)], i + r, j, N, bias, R);
      }
    }
    free(tiles);
  });
  free(ap);
}

// Bytes of the packed weights: whole panels of NR columns, K rounded up to pairs.
extern "C" long kiln_op_prepack_bytes(const long long* d) {
  return (long)((d[1] + NR - 1) / NR) * NR * ((d[2] + 1) / 2) * 4;
}

// Packs B (bf16, K x N row-major) into panels of k pairs.
extern "C" void kiln_op_prepack(const long long* d, const void* src, void* dst) {
  const long N = d[1], K = d[2], KP = (K + 1) / 2, panels = (N + NR - 1) / NR;
  const uint16_t* B = (const uint16_t*)src;
  uint32_t* P = (uint32_t*)dst;
  kiln_rt::ParallelFor(panels, NT, [&](long j) {
    for (long p = 0; p < KP; ++p)
      for (int c = 0; c < NR; ++c) {
        const long n = j * NR + c;
        uint32_t lo = 0, hi = 0;
        if (n < N) {
          lo = B[2 * p * N + n];
          if (2 * p + 1 < K) hi = B[(2 * p + 1) * N + n];
        }
        P[(j * KP + p) * NR + c] = lo | (hi << 16);
      }
  });
}
