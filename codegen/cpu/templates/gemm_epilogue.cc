// Kiln CPU GEMM with a fused epilogue and fp32 or bf16 weights, shaped for decode-sized M.
//
//   C[M,N] = epilogue(A[M,K] * B[K,N]), row-major; A and C fp32, B fp32 or bf16 (WBF16=1).
//   EPI 0 none | 1 bias: + bias[N] | 2 silu | 3 gelu (tanh form) | 4 residual: + R[M,N]
//
// A row-panel streaming kernel: each thread owns column blocks of NB columns and walks B's rows
// front to back (long contiguous runs that the hardware prefetcher streams), accumulating MR rows
// of C in an L1-resident buffer, KU rows of B per pass. Decode GEMMs (M <= MR) read B exactly once.
// Knobs (compile-time): MR, NB, KU, NT; DOT=1 uses AVX512-BF16 dot products (vdpbf16ps, the
// activations rounded to bf16) where the chip has them, DOT=0 widens bf16 to fp32 and uses FMAs.
// PREPACK=1: the weights are packed once, ahead of time (kiln_op_prepack), into column blocks
// of NB stored one after another, so that each block is one contiguous stream (row-major B
// gives NB-wide runs N apart, each on its own page, which the prefetcher streams less well).
// ABI: kiln_op(dims {M,N,K}, args {A, B, bias, R, C}, params {}); with PREPACK, B is the buffer
// kiln_op_prepack filled (kiln_op_prepack_bytes(dims) bytes).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef VW
#define VW 16
#endif
#ifndef MR
#define MR 1
#endif
#ifndef NB
#define NB 512
#endif
#ifndef KU
#define KU 4
#endif
#ifndef NT
#define NT 1
#endif
#ifndef EPI
#define EPI 0
#endif
#ifndef WBF16
#define WBF16 0
#endif
#ifndef DOT
#define DOT 0
#endif
#ifndef PREPACK
#define PREPACK 0
#endif
#if DOT && !(WBF16 && defined(__AVX512BF16__) && VW == 16)
#undef DOT
#define DOT 0  // no AVX512-BF16 here: the widening path is the correct fallback
#endif

static_assert(NB % VW == 0, "NB must be whole vectors");
typedef float Vec __attribute__((vector_size(VW * 4)));
typedef float UVec __attribute__((vector_size(VW * 4), aligned(4), may_alias));
typedef uint16_t HVec __attribute__((vector_size(VW * 2), aligned(2), may_alias));
typedef uint32_t IVec __attribute__((vector_size(VW * 4)));
#if WBF16
typedef uint16_t WT;
#else
typedef float WT;
#endif

namespace {

inline Vec LoadB(const WT* p) {
#if WBF16
  IVec wide = __builtin_convertvector(*reinterpret_cast<const HVec*>(p), IVec) << 16;
  return reinterpret_cast<Vec&>(wide);
#else
  return *reinterpret_cast<const UVec*>(p);
#endif
}
inline float LoadB1(const WT* p) {
#if WBF16
  uint32_t bits = (uint32_t)*p << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
#else
  return *p;
#endif
}

inline float Epi(float x, long i, long j, long N, const float* bias, const float* R) {
  return kiln_rt::Epilogue<EPI>(x, i, j, N, bias, R);
}

#if DOT
inline uint16_t ToBf16(float f) {  // round to nearest even
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
#endif

// acc[MR][nb] (+)= A[i0.., :] * Bb[:, 0:nb] for nb a multiple of VW; Bb is the column block's
// first element, its rows ld elements apart.
void Panel(int mr, int nb, int K, long ld, const float* A, const WT* Bb, int i0, float* acc,
           const uint32_t* apairs) {
  const int nv = nb / VW;
  int k = 0;
#if DOT
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (; k + 2 <= K; k += 2) {
    const WT* b0 = Bb + k * ld;
    for (int v = 0; v < nv; ++v) {
      __m512i both = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(b0 + v * VW))),
          _mm256_loadu_si256((const __m256i*)(b0 + ld + v * VW)), 1);
      __m512bh pairs = (__m512bh)_mm512_permutexvar_epi16(idx, both);
      for (int i = 0; i < mr; ++i) {
        __m512 a = _mm512_castsi512_ps(_mm512_set1_epi32((int)apairs[(long)i * (K / 2) + k / 2]));
        float* c = acc + (long)i * NB + v * VW;
        _mm512_storeu_ps(c, _mm512_dpbf16_ps(_mm512_loadu_ps(c), pairs, (__m512bh)a));
      }
    }
  }
#else
  for (; k + KU <= K; k += KU) {
    const WT* b0 = Bb + k * ld;
    for (int v = 0; v < nv; ++v) {
      Vec b[KU];
#pragma GCC unroll 8
      for (int u = 0; u < KU; ++u) b[u] = LoadB(b0 + u * ld + v * VW);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        if (i >= mr) break;
        const float* a = A + (long)(i0 + i) * K + k;
        Vec s = *reinterpret_cast<UVec*>(acc + (long)i * NB + v * VW);
#pragma GCC unroll 8
        for (int u = 0; u < KU; ++u) s += a[u] * b[u];
        *reinterpret_cast<UVec*>(acc + (long)i * NB + v * VW) = s;
      }
    }
  }
#endif
  for (; k < K; ++k) {
    const WT* b0 = Bb + k * ld;
    for (int v = 0; v < nv; ++v) {
      Vec b = LoadB(b0 + v * VW);
      for (int i = 0; i < mr; ++i) {
        Vec s = *reinterpret_cast<UVec*>(acc + (long)i * NB + v * VW);
        s += A[(long)(i0 + i) * K + k] * b;
        *reinterpret_cast<UVec*>(acc + (long)i * NB + v * VW) = s;
      }
    }
  }
}

}  // namespace

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const int M = (int)d[0], N = (int)d[1], K = (int)d[2];
  const float* A = (const float*)args[0];
  const WT* B = (const WT*)args[1];
  const float* bias = (const float*)args[2];
  const float* R = (const float*)args[3];
  float* C = (float*)args[4];
  uint32_t* apairs = 0;
#if DOT
  apairs = (uint32_t*)malloc(sizeof(uint32_t) * ((size_t)M * (K / 2) + 1));
  for (long i = 0; i < M; ++i)
    for (long k = 0; k + 1 < K; k += 2)
      apairs[i * (K / 2) + k / 2] =
          ToBf16(A[i * K + k]) | ((uint32_t)ToBf16(A[i * K + k + 1]) << 16);
#endif
  const int blocks = (N + NB - 1) / NB;
  kiln_rt::ParallelFor(blocks, NT, [&](long jb) {
    static thread_local float acc[MR * NB] __attribute__((aligned(64)));
    const int j0 = jb * NB, nb = N - j0 < NB ? N - j0 : NB, nbv = nb / VW * VW;
#if PREPACK
    const WT* Bb = B + (long)K * j0;  // the block: K rows of nb
    const long ld = nb;
#else
    const WT* Bb = B + j0;
    const long ld = N;
#endif
    for (int i0 = 0; i0 < M; i0 += MR) {
      const int mr = M - i0 < MR ? M - i0 : MR;
      memset(acc, 0, sizeof(float) * MR * NB);
      if (nbv > 0) Panel(mr, nbv, K, ld, A, Bb, i0, acc, apairs ? apairs + (long)i0 * (K / 2) : 0);
      for (int i = 0; i < mr; ++i)  // ragged columns past the last whole vector
        for (int j = nbv; j < nb; ++j) {
          float s = 0;
          for (int k = 0; k < K; ++k) s += A[(long)(i0 + i) * K + k] * LoadB1(Bb + k * ld + j);
          acc[(long)i * NB + j] = s;
        }
      for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nb; ++j)
          C[(long)(i0 + i) * N + j0 + j] = Epi(acc[(long)i * NB + j], i0 + i, j0 + j, N, bias, R);
    }
  });
  free(apairs);
}

#if PREPACK
// Bytes of the packed weights: the same N x K elements, column block after column block.
extern "C" long kiln_op_prepack_bytes(const long long* d) {
  return (long)(d[1] * d[2] * (long long)sizeof(WT));
}

// Packs B (K x N, row-major) into column blocks of NB: block jb holds B[:, j0:j0+nb] row-major.
extern "C" void kiln_op_prepack(const long long* d, const void* src, void* dst) {
  const long N = d[1], K = d[2];
  const WT* B = (const WT*)src;
  WT* P = (WT*)dst;
  kiln_rt::ParallelFor((N + NB - 1) / NB, NT, [&](long jb) {
    const long j0 = jb * NB, nb = N - j0 < NB ? N - j0 : NB;
    for (long k = 0; k < K; ++k) memcpy(P + K * j0 + k * nb, B + k * N + j0, sizeof(WT) * nb);
  });
}
#endif
