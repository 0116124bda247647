// Kiln CPU GEMM with bf16 weights and a fused epilogue, register-blocked for prefill-sized M.
//
//   C[M,N] = epilogue(A[M,K] * B[K,N]); A and C fp32 (A rounded to bf16 for the dot products),
//   B bf16. EPI 0 none | 1 bias: + bias[N] | 2 silu | 3 gelu (tanh form) | 4 residual: + R[M,N]
//
// A BLIS-style kernel on AVX512-BF16 dot products (vdpbf16ps: 16 lanes, each the sum of two
// bf16 products added to an fp32 accumulator). The weights are packed ahead of time
// (kiln_op_prepack) into panels of NR columns, each k pair of a column one 32-bit lane:
// panel j holds, for p = 0 .. ceil(K/2)-1, NR lanes (B[2p][n], B[2p+1][n]) (zero past K or N).
// The activations are rounded to bf16 pairs once per call and packed into panels of MR rows,
// pair-major: panel i holds, for each p, the MR rows' pairs side by side (zero past M or K). The
// micro-kernel then reads both operands as two forward streams: per pair, NR/16 vectors of B and
// MR broadcasts of A from one MR*4-byte run (rows of pairs one after another would be MR streams
// 2K bytes apart: for K = 2048 or 4096 all in one L1 set, more rows than it has ways when MR > 8).
// An MR x NR tile of C lives in registers over a KC-deep slice; partial sums go to a per-item
// buffer only between slices, and the last slice applies the epilogue in registers and stores C
// (masked at the edges).
// Knobs (compile-time):
//   MR   rows of the register tile (MR * NR/16 accumulators: at most 28 of the 32 registers)
//   NR   columns of the register tile (16 or 32)
//   KC   depth of a slice, in k (even): the A panel's slice stays in L1, the item's B slices in L2
//   NC   columns per work item (a multiple of NR); items are (row block of MC, column block)
//   MT   register tiles of rows per work item (MC = MT * MR rows)
//   NT   threads over the work items
// AVX2 hosts (no AVX512-BF16) read the same packed weights 8 lanes at a time, each pair split
// into its even and odd k as fp32 (a shift and a mask: a bf16 is the top half of its float) for
// two FMAs, with the activations packed as pairs of fp32 (still rounded to bf16, the same sums)
// so that each is one broadcast: MR * NR/8 accumulators of 16 registers, so NR = 16 and MR <= 5
// there. Other hosts run portable loops (correct, not fast).
// ABI: kiln_op(dims {M,N,K}, args {A, packed B, bias, R, C}, params {}).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
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
#define KB_AVX2 0
#elif defined(__AVX2__) && defined(__FMA__)
#define KB_DOT 0
#define KB_AVX2 1
#else
#define KB_DOT 0
#define KB_AVX2 0
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

// One k pair of one row of the packed activations: two bf16 in 32 bits, or (AVX2) the two
// bf16 values as floats, ready to broadcast.
#if KB_AVX2
struct APair {
  float even, odd;
};
inline APair MakePair(float x0, float x1) { return {FromBf16(ToBf16(x0)), FromBf16(ToBf16(x1))}; }
#else
typedef uint32_t APair;
inline APair MakePair(float x0, float x1) { return ToBf16(x0) | ((uint32_t)ToBf16(x1) << 16); }
#endif

// Row `i` of A (K floats) as bf16 pairs into column r of an MR-row panel (pair p at dst[p * MR]).
void PackRow(const float* a, long K, APair* dst) {
  const long KP = (K + 1) / 2;
  long p = 0;
#if KB_DOT
  uint32_t t[16];
  for (; p < KP; p += 16) {
    const long left = K - 2 * p;  // floats left in the row
    const __mmask16 m0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
    const __mmask16 m1 = left >= 32   ? 0xffff
                         : left <= 16 ? 0
                                      : (__mmask16)((1u << (left - 16)) - 1);
    const __m512 lo = _mm512_maskz_loadu_ps(m0, a + 2 * p);
    const __m512 hi = _mm512_maskz_loadu_ps(m1, a + 2 * p + 16);
    _mm512_storeu_si512(t, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));  // pairs, low half even k
    const int n = KP - p < 16 ? (int)(KP - p) : 16;
    for (int q = 0; q < n; ++q) dst[(p + q) * MR] = t[q];
  }
#endif
  for (; p < KP; ++p) {
    const float x0 = a[2 * p], x1 = 2 * p + 1 < K ? a[2 * p + 1] : 0.0f;
    dst[p * MR] = MakePair(x0, x1);
  }
}

#if KB_DOT
// The epilogue on 16 lanes of row i, columns j .. j+15 (the lanes of `m`).
inline __m512 EpiV(__m512 x, __mmask16 m, long i, long j, long N, const float* bias,
                   const float* R) {
  (void)m, (void)i, (void)j, (void)N, (void)bias, (void)R;
  if (EPI == 1) return _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, bias + j));
  if (EPI == 4) return _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, R + i * N + j));
  if (EPI == 2 || EPI == 3) {              // x * sigmoid(s): silu s = x; tanh-form gelu s = 2u
    const kiln_rt::VF v = (kiln_rt::VF)x;  // 16 lanes: this path is AVX-512's
    const kiln_rt::VF s = EPI == 2 ? v : 1.5957691216057308f * (v + 0.044715f * v * v * v);
    return (__m512)(v / (1.0f + kiln_rt::ExpVF(-s)));
  }
  return x;
}
#endif

#if KB_AVX2
// The epilogue on nc <= NR values t of row i from column j, written to out: whole vectors
// (kiln_rt::VF) at a time, the rest one by one.
inline void EpiRow(const float* t, int nc, long i, long j, long N, const float* bias,
                   const float* R, float* out) {
  int n = 0;
  for (; n + kiln_rt::kVF <= nc; n += kiln_rt::kVF) {
    kiln_rt::VF v = kiln_rt::LoadVF(t + n);
    if (EPI == 1) v += kiln_rt::LoadVF(bias + j + n);
    if (EPI == 4) v += kiln_rt::LoadVF(R + i * N + j + n);
    if (EPI == 2 || EPI == 3) {  // as EpiV
      const kiln_rt::VF s = EPI == 2 ? v : 1.5957691216057308f * (v + 0.044715f * v * v * v);
      v = v / (1.0f + kiln_rt::ExpVF(-s));
    }
    kiln_rt::StoreVF(out + n, v);
  }
  for (; n < nc; ++n) out[n] = kiln_rt::Epilogue<EPI>(t[n], i, j + n, N, bias, R);
}
#endif

// One MR x NR tile over the pairs [0, np) of a slice: `a` the A panel's first pair of the slice
// (MR lanes a pair), `b` the B panel's (NR lanes a pair). `acc` (MR x NR, row-major) holds the
// partial sums between slices: read unless `first`; written unless `last`, which instead applies
// the epilogue and stores the tile's mr x nc corner at C (row i, column j; rows N apart).
void Micro(long np, const APair* a, const uint32_t* b, float* acc, bool first, bool last, float* C,
           int mr, int nc, long i, long j, long N, const float* bias, const float* R) {
#if KB_DOT
  __m512 c[MR][kNV];
#pragma GCC unroll 28
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v)
      c[r][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * NR + v * 16);
  for (long p = 0; p < np; ++p) {
    __m512bh bv[kNV];
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * NR + v * 16);
#pragma GCC unroll 28
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[p * MR + r]);
#pragma GCC unroll 2
      for (int v = 0; v < kNV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], av, bv[v]);
    }
  }
  if (!last) {
#pragma GCC unroll 28
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < kNV; ++v) _mm512_store_ps(acc + r * NR + v * 16, c[r][v]);
    return;
  }
  __mmask16 m[kNV];
  for (int v = 0; v < kNV; ++v) {
    const int left = nc - v * 16;
    m[v] = left >= 16 ? 0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
  }
#pragma GCC unroll 28
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
#pragma GCC unroll 2
    for (int v = 0; v < kNV; ++v)
      _mm512_mask_storeu_ps(C + (i + r) * N + j + v * 16, m[v],
                            EpiV(c[r][v], m[v], i + r, j + v * 16, N, bias, R));
  }
#elif KB_AVX2
  constexpr int kV8 = NR / 8;
  __m256 c[MR][kV8];
#pragma GCC unroll 28
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kV8; ++v)
      c[r][v] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + r * NR + v * 8);
  const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
  for (long p = 0; p < np; ++p) {
    __m256 even[kV8], odd[kV8];
#pragma GCC unroll 4
    for (int v = 0; v < kV8; ++v) {
      const __m256i bv = _mm256_loadu_si256((const __m256i*)(b + p * NR + v * 8));
      even[v] = _mm256_castsi256_ps(_mm256_slli_epi32(bv, 16));
      odd[v] = _mm256_castsi256_ps(_mm256_and_si256(bv, high));
    }
#pragma GCC unroll 28
    for (int r = 0; r < MR; ++r) {
      const __m256 a0 = _mm256_broadcast_ss(&a[p * MR + r].even);
      const __m256 a1 = _mm256_broadcast_ss(&a[p * MR + r].odd);
#pragma GCC unroll 4
      for (int v = 0; v < kV8; ++v)
        c[r][v] = _mm256_fmadd_ps(odd[v], a1, _mm256_fmadd_ps(even[v], a0, c[r][v]));
    }
  }
  if (!last) {
#pragma GCC unroll 28
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kV8; ++v) _mm256_store_ps(acc + r * NR + v * 8, c[r][v]);
    return;
  }
  // Stored with constant indices first: a register array indexed by the run-time row count
  // would make the compiler keep the whole tile in memory, storing it on every k pair.
  float t[MR * NR] __attribute__((aligned(32)));
#pragma GCC unroll 28
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kV8; ++v) _mm256_store_ps(t + r * NR + v * 8, c[r][v]);
  for (int r = 0; r < mr; ++r) EpiRow(t + r * NR, nc, i + r, j, N, bias, R, C + (i + r) * N + j);
#else
  float local[MR * NR];
  if (!acc) acc = local;  // one slice: no buffer kept between slices
  if (first) memset(acc, 0, sizeof(float) * MR * NR);
  for (long p = 0; p < np; ++p)
    for (int r = 0; r < MR; ++r) {
      const uint32_t ap = a[p * MR + r];
      const float a0 = FromBf16((uint16_t)ap), a1 = FromBf16((uint16_t)(ap >> 16));
      for (int n = 0; n < NR; ++n) {
        const uint32_t bp = b[p * NR + n];
        acc[r * NR + n] += a0 * FromBf16((uint16_t)bp) + a1 * FromBf16((uint16_t)(bp >> 16));
      }
    }
  if (last)
    for (int r = 0; r < mr; ++r)
      for (int n = 0; n < nc; ++n)
        C[(i + r) * N + j + n] = kiln_rt::Epilogue<EPI>(acc[r * NR + n], i + r, j + n, N, bias, R);
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
  // The activations as bf16 pairs in panels of MR rows (rows past M zero).
  const long panels = (M + MR - 1) / MR;
  APair* ap = (APair*)aligned_alloc(64, sizeof(APair) * ((size_t)panels * KP * MR + 16));
  kiln_rt::ParallelFor(panels, NT, [&](long ip) {
    APair* dst = ap + ip * KP * MR;
    for (int r = 0; r < MR; ++r) {
      const long i = ip * MR + r;
      if (i < M) {
        PackRow(A + i * K, K, dst + r);
      } else {
        for (long p = 0; p < KP; ++p) dst[p * MR + r] = APair{};
      }
    }
  });
  const long row_blocks = (M + MC - 1) / MC, col_blocks = (N + NC - 1) / NC;
  const bool sliced = KP > KC / 2;  // partial sums kept between slices
  kiln_rt::ParallelFor(row_blocks * col_blocks, NT, [&](long item) {
    // Column-block-major: consecutive items (on either thread) share one block of weights, read
    // from memory once and then from the caches; the packed activations are the smaller operand.
    const long i0 = (item % row_blocks) * MC, j0 = (item / row_blocks) * NC;
    const long i1 = i0 + MC < M ? i0 + MC : M, j1 = j0 + NC < N ? j0 + NC : N;
    const long q0 = j0 / NR, q1 = (j1 + NR - 1) / NR;
    float* tiles = sliced ? (float*)aligned_alloc(64, sizeof(float) * MC * NC) : nullptr;
    for (long k0 = 0; k0 < KP; k0 += KC / 2) {
      const long np = KP - k0 < KC / 2 ? KP - k0 : KC / 2;
      const bool first = k0 == 0, last = k0 + np == KP;
      for (long i = i0; i < i1; i += MR) {
        const int mr = i1 - i < MR ? (int)(i1 - i) : MR;
        const APair* a = ap + (i / MR) * KP * MR + k0 * MR;
        for (long q = q0; q < q1; ++q) {
          float* acc = tiles ? tiles + ((i - i0) / MR * (q1 - q0) + (q - q0)) * MR * NR : nullptr;
          const long j = q * NR;
          const int nc = j1 - j < NR ? (int)(j1 - j) : NR;
          Micro(np, a, B + (q * KP + k0) * NR, acc, first, last, C, mr, nc, i, j, N, bias, R);
        }
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
