// Kiln CPU GEMM with quantized weights (int8 or int4, one fp16 scale per 32 weights along K) and a
// fused epilogue, shaped for decode-sized M and usable at any M; with MOE=1 the same kernel runs
// the grouped expert GEMM of a mixture of experts.
//
//   MOE 0: C[M,N] = epilogue(A[M,K] * W[K,N]); A and C fp32; W quantized (QBITS 8 or 4), K % 32 ==
//   0.
//          EPI 0 none | 1 bias: + bias[N] | 2 silu | 3 gelu (tanh form) | 4 residual: + R[M,N]
//   MOE 1: y[r] = x[r] * W[experts[r]] for the T*TOPK rows r of x (one per token and slot); W is
//          E experts of K x N, quantized as one (E*K) x N matrix (groups never cross an expert,
//          K being whole groups). Rows are grouped by expert, so each selected expert's weights
//          stream once per MR rows; unselected experts are never read.
//
// The weights come in Kiln's plain quantized layout (hardware/reference/quant_format.h) and are
// packed ahead of time (kiln_op_prepack), expert by expert, into strips of 16 columns, one 32-bit
// lane per column:
// per strip and group of 32 k, int8: 8 chunks of 64 bytes, chunk c lane l holding
// W[g*32+4c .. +3][16j+l] as u8 = q + 128; int4: 4 chunks, chunk c lane l byte s holding
// W[g*32+4c+s] in its low nibble and W[g*32+16+4c+s] in its high one, as q + 8; then the group's
// 16 fp16 scales. A strip is one contiguous stream; so is a block of NB/16 strips.
//
// Knobs (compile-time):
//   AQ   1: activations quantized on the fly to int8 per row and group of 32 (scale max|x|/127),
//        the products summed exactly in int32 by VNNI dot products (vpdpbusd: u8 weights times
//        s8 activations; the weights' offset removed with the group's activation sum; AVX2:
//        vpmaddubsw, below), one float multiply-add per group; 0: the weights widened to fp32
//        in registers and FMAs on the fp32 activations (exact activations, ~5 instructions per
//        16 products)
//   NB   columns per work item (a multiple of 16)
//   MR   rows of A per pass over a strip (1, 2, 4): more rows reuse each loaded weight chunk
//   NT   threads over the column blocks (MOE: over (selected expert, column block) items)
//   PF   bytes ahead of the current chunk that the weight stream is prefetched (0: none)
// AVX2 hosts (no VNNI) run the same layout as two 8-lane halves per strip with vpmaddubsw, which
// multiplies u8 by s8 and sums pairs into saturating int16: int8 weights enter as their magnitudes,
// their signs moved onto the activations (127 * 128 * 2 fits int16; the offset weights would not),
// and int4 products of a whole group are summed in int16 before widening (15 * 127 * 16 fits).
// Older hosts run portable loops the compiler vectorizes: correct, not tuned.
// ABI, MOE 0: kiln_op(dims {M,N,K}, args {A, packed W, bias, R, C}, params {}).
//      MOE 1: kiln_op(dims {T,E,TOPK,N,K}, args {x, packed W, experts(int32)[T*TOPK], y}, {}).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#ifndef QBITS
#define QBITS 8
#endif
#ifndef AQ
#define AQ 1
#endif
#ifndef NB
#define NB 64
#endif
#ifndef MR
#define MR 1
#endif
#ifndef NT
#define NT 1
#endif
#ifndef PF
#define PF 0
#endif
#ifndef EPI
#define EPI 0
#endif
#ifndef MOE
#define MOE 0
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#define KQ_AVX512 1
#define KQ_AVX2 0
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KQ_AVX512 0
#define KQ_AVX2 1
#else
#define KQ_AVX512 0
#define KQ_AVX2 0
#endif

static_assert(QBITS == 8 || QBITS == 4, "QBITS is 8 or 4");
static_assert(NB % 16 == 0 && NB >= 16, "NB must be a multiple of 16 columns");
static_assert(MR >= 1 && MR <= 4, "MR must be in 1..4");
static_assert(PF >= 0 && PF % 64 == 0, "PF must be a whole number of 64-byte lines");

namespace {

constexpr int kG = 32;                           // weights per group along K
constexpr int kLanes = 16;                       // columns per strip
constexpr int kChunks = QBITS == 8 ? 8 : 4;      // 64-byte chunks of weights per group
constexpr long kGroupBytes = kChunks * 64 + 32;  // weights + 16 fp16 scales
constexpr int kOffset = QBITS == 8 ? 128 : 8;    // stored value = q + kOffset

inline float Half(uint16_t h) {
  _Float16 f;
  memcpy(&f, &h, 2);
  return (float)f;
}

inline float Epi(float x, long i, long j, long N, const float* bias, const float* R) {
  return kiln_rt::Epilogue<EPI>(x, i, j, N, bias, R);
}

// The stored (offset) weight of strip-local lane l, group-local k, from one group's bytes.
inline int Stored(const uint8_t* grp, int l, int k) {
#if QBITS == 8
  return grp[(k / 4) * 64 + 4 * l + k % 4];
#else
  const int hi = k >= 16, kk = k - 16 * hi;
  const uint8_t b = grp[(kk / 4) * 64 + 4 * l + kk % 4];
  return hi ? b >> 4 : b & 15;
#endif
}

// Activations of AQ=1: per row and group, int8 values, the fp32 scale, and the int32 sum of the
// values times the weights' offset (what the u8 x s8 dot product over-counts).
struct QuantA {
  int8_t* q = nullptr;
  float* scale = nullptr;
  int32_t* offset_sum = nullptr;
};

void QuantizeRows(const float* A, int M, int K, QuantA* out) {
  const int G = K / kG;
  for (long i = 0; i < M; ++i)
    for (int g = 0; g < G; ++g) {
      const float* x = A + i * K + g * kG;
      float amax = 0;
      for (int k = 0; k < kG; ++k) amax = fmaxf(amax, fabsf(x[k]));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int k = 0; k < kG; ++k) {
        const int v = (int)nearbyintf(x[k] * inv);
        out->q[i * K + g * kG + k] = (int8_t)v;
        sum += v;
      }
      out->scale[i * G + g] = amax / 127.0f;
      out->offset_sum[i * G + g] = kOffset * sum;
    }
}

// acc[r][0..15] = sum over K of A[rows[r]] * W[:, strip] for r < mr; `strip` is the strip's
// first group, its groups kGroupBytes apart.
void Strip(int mr, int K, const float* A, const QuantA& qa, const uint8_t* strip, const int* rows,
           float acc[MR][kLanes]) {
  const int G = K / kG;
#if KQ_AVX512
  __m512 facc[MR];
  for (int r = 0; r < MR; ++r) facc[r] = _mm512_setzero_ps();
  for (int g = 0; g < G; ++g) {
    const uint8_t* grp = strip + g * kGroupBytes;
#if PF
    for (int c = 0; c < kChunks; ++c) _mm_prefetch((const char*)grp + PF + c * 64, _MM_HINT_T0);
#endif
    const __m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(grp + kChunks * 64)));
#if AQ
    __m512i w[8];
#if QBITS == 8
    for (int c = 0; c < 8; ++c) w[c] = _mm512_loadu_si512(grp + c * 64);
#else
    const __m512i lo = _mm512_set1_epi8(15);
    for (int c = 0; c < 4; ++c) {
      const __m512i b = _mm512_loadu_si512(grp + c * 64);
      w[c] = _mm512_and_si512(b, lo);
      w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(b, 4), lo);
    }
#endif
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      if (r >= mr) break;
      const long row = rows[r];
      const int8_t* xq = qa.q + row * K + g * kG;
      // Two dependency chains of four dot products each, not one of eight: at MR=1 the chain's
      // latency, not the loads, would bound a group.
      __m512i isum = _mm512_set1_epi32(-qa.offset_sum[row * G + g]), isum2 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int c = 0; c < 8; c += 2) {
        int32_t x4, y4;
        memcpy(&x4, xq + 4 * c, 4);
        memcpy(&y4, xq + 4 * c + 4, 4);
        isum = _mm512_dpbusd_epi32(isum, w[c], _mm512_set1_epi32(x4));
        isum2 = _mm512_dpbusd_epi32(isum2, w[c + 1], _mm512_set1_epi32(y4));
      }
      isum = _mm512_add_epi32(isum, isum2);
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                _mm512_mul_ps(ws, _mm512_set1_ps(qa.scale[row * G + g])), facc[r]);
    }
#else  // AQ == 0: widen the weights to fp32
    __m512 gacc[MR];
    for (int r = 0; r < MR; ++r) gacc[r] = _mm512_setzero_ps();
    const __m512i byte = _mm512_set1_epi32(QBITS == 8 ? 255 : 15);
    const __m512 off = _mm512_set1_ps((float)kOffset);
    for (int c = 0; c < kChunks; ++c) {
      const __m512i b = _mm512_loadu_si512(grp + c * 64);
#pragma GCC unroll 8
      for (int h = 0; h < (QBITS == 8 ? 1 : 2); ++h)
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
          const int shift = QBITS == 8 ? 8 * s : 8 * s + 4 * h;
          const __m512 wf = _mm512_sub_ps(
              _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(b, shift), byte)), off);
          const int k = QBITS == 8 ? 4 * c + s : 16 * h + 4 * c + s;
#pragma GCC unroll 4
          for (int r = 0; r < MR; ++r) {
            if (r >= mr) break;
            gacc[r] =
                _mm512_fmadd_ps(wf, _mm512_set1_ps(A[(long)rows[r] * K + g * kG + k]), gacc[r]);
          }
        }
    }
    for (int r = 0; r < MR; ++r) facc[r] = _mm512_fmadd_ps(gacc[r], ws, facc[r]);
#endif  // AQ
  }
  for (int r = 0; r < MR; ++r) _mm512_storeu_ps(acc[r], facc[r]);
#elif KQ_AVX2  // two 8-lane halves per strip: half h of a chunk holds lanes 8h .. 8h+7
  __m256 facc[MR][2];
  for (int r = 0; r < MR; ++r) facc[r][0] = facc[r][1] = _mm256_setzero_ps();
  for (int g = 0; g < G; ++g) {
    const uint8_t* grp = strip + g * kGroupBytes;
#if PF
    for (int c = 0; c < kChunks; ++c) _mm_prefetch((const char*)grp + PF + c * 64, _MM_HINT_T0);
#endif
    __m256 ws[2];
    for (int h = 0; h < 2; ++h)
      ws[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(grp + kChunks * 64 + 16 * h)));
#if AQ
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i isum[MR][2];
#if QBITS == 8
    const __m256i flip = _mm256_set1_epi8((char)0x80);  // stored u8 (q + 128) back to s8 q
    for (int r = 0; r < MR; ++r) isum[r][0] = isum[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i w[2], mag[2];
      for (int h = 0; h < 2; ++h) {
        w[h] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i*)(grp + c * 64 + 32 * h)), flip);
        mag[h] = _mm256_abs_epi8(w[h]);  // -128 becomes 0x80, read as u8 128
      }
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        if (r >= mr) break;
        int32_t x4;
        memcpy(&x4, qa.q + (long)rows[r] * K + g * kG + 4 * c, 4);
        const __m256i xb = _mm256_set1_epi32(x4);
        for (int h = 0; h < 2; ++h)
          isum[r][h] = _mm256_add_epi32(
              isum[r][h],
              _mm256_madd_epi16(_mm256_maddubs_epi16(mag[h], _mm256_sign_epi8(xb, w[h])), ones));
      }
    }
#else  // QBITS == 4: u8 nibbles times s8 activations, a group's pair sums kept in int16
    const __m256i lo = _mm256_set1_epi8(15);
    __m256i s16[MR][2];
    for (int r = 0; r < MR; ++r) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i wl[2], wh[2];
      for (int h = 0; h < 2; ++h) {
        const __m256i b = _mm256_loadu_si256((const __m256i*)(grp + c * 64 + 32 * h));
        wl[h] = _mm256_and_si256(b, lo);
        wh[h] = _mm256_and_si256(_mm256_srli_epi16(b, 4), lo);
      }
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        if (r >= mr) break;
        const int8_t* xq = qa.q + (long)rows[r] * K + g * kG;
        int32_t xl, xh;
        memcpy(&xl, xq + 4 * c, 4);
        memcpy(&xh, xq + 16 + 4 * c, 4);
        const __m256i bl = _mm256_set1_epi32(xl), bh = _mm256_set1_epi32(xh);
        for (int h = 0; h < 2; ++h)
          s16[r][h] = _mm256_add_epi16(
              s16[r][h],
              _mm256_add_epi16(_mm256_maddubs_epi16(wl[h], bl), _mm256_maddubs_epi16(wh[h], bh)));
      }
    }
    for (int r = 0; r < MR; ++r) {
      if (r >= mr) break;
      const __m256i off = _mm256_set1_epi32(qa.offset_sum[(long)rows[r] * G + g]);
      for (int h = 0; h < 2; ++h)
        isum[r][h] = _mm256_sub_epi32(_mm256_madd_epi16(s16[r][h], ones), off);
    }
#endif
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      if (r >= mr) break;
      const __m256 as = _mm256_set1_ps(qa.scale[(long)rows[r] * G + g]);
      for (int h = 0; h < 2; ++h)
        facc[r][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h]), _mm256_mul_ps(ws[h], as), facc[r][h]);
    }
#else  // AQ == 0: widen the weights to fp32
    __m256 gacc[MR][2];
    for (int r = 0; r < MR; ++r) gacc[r][0] = gacc[r][1] = _mm256_setzero_ps();
    const __m256i byte = _mm256_set1_epi32(QBITS == 8 ? 255 : 15);
    const __m256 off = _mm256_set1_ps((float)kOffset);
    for (int c = 0; c < kChunks; ++c)
      for (int h = 0; h < 2; ++h) {
        const __m256i b = _mm256_loadu_si256((const __m256i*)(grp + c * 64 + 32 * h));
#pragma GCC unroll 8
        for (int hh = 0; hh < (QBITS == 8 ? 1 : 2); ++hh)
#pragma GCC unroll 4
          for (int s = 0; s < 4; ++s) {
            const int shift = QBITS == 8 ? 8 * s : 8 * s + 4 * hh;
            const __m256 wf = _mm256_sub_ps(
                _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b, shift), byte)), off);
            const int k = QBITS == 8 ? 4 * c + s : 16 * hh + 4 * c + s;
#pragma GCC unroll 4
            for (int r = 0; r < MR; ++r) {
              if (r >= mr) break;
              gacc[r][h] = _mm256_fmadd_ps(wf, _mm256_set1_ps(A[(long)rows[r] * K + g * kG + k]),
                                           gacc[r][h]);
            }
          }
      }
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) facc[r][h] = _mm256_fmadd_ps(gacc[r][h], ws[h], facc[r][h]);
#endif  // AQ
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(acc[r], facc[r][0]);
    _mm256_storeu_ps(acc[r] + 8, facc[r][1]);
  }
#else   // portable: the same arithmetic, lane by lane
  for (int r = 0; r < MR; ++r)
    for (int l = 0; l < kLanes; ++l) acc[r][l] = 0;
  for (int g = 0; g < G; ++g) {
    const uint8_t* grp = strip + g * kGroupBytes;
    float ws[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      uint16_t h;
      memcpy(&h, grp + kChunks * 64 + 2 * l, 2);
      ws[l] = Half(h);
    }
    for (int r = 0; r < mr; ++r) {
      const long row = rows[r];
      for (int l = 0; l < kLanes; ++l) {
#if AQ
        int32_t s = -qa.offset_sum[row * G + g];
        for (int k = 0; k < kG; ++k) s += Stored(grp, l, k) * (int)qa.q[row * K + g * kG + k];
        acc[r][l] += (float)s * (ws[l] * qa.scale[row * G + g]);
#else
        float s = 0;
        for (int k = 0; k < kG; ++k)
          s += (float)(Stored(grp, l, k) - kOffset) * A[row * K + g * kG + k];
        acc[r][l] += s * ws[l];
#endif
      }
    }
  }
#endif
  (void)A;
  (void)qa;
}

// Activations quantized per row and group for AQ=1 (nothing for AQ=0); free() the result.
void* QuantizeActivations(const float* A, int rows, int K, QuantA* qa) {
  void* scratch = 0;
#if AQ
  const int G = K / kG;
  scratch = malloc((size_t)rows * K + 8 * (size_t)rows * G + 64);
  qa->scale = (float*)scratch;
  qa->offset_sum = (int32_t*)(qa->scale + (size_t)rows * G);
  qa->q = (int8_t*)(qa->offset_sum + (size_t)rows * G);
  QuantizeRows(A, rows, K, qa);
#else
  (void)A, (void)rows, (void)K, (void)qa;
#endif
  return scratch;
}

// The strips [s_begin, s_end) times the `count` rows listed in `rows`, written through `store`.
template <typename Store>
void Strips(int s_begin, int s_end, int N, int K, const float* A, const QuantA& qa,
            const uint8_t* W, const int* rows, int count, Store store) {
  const long strip_bytes = (long)(K / kG) * kGroupBytes;
  float acc[MR][kLanes] __attribute__((aligned(64)));
  for (int s = s_begin; s < s_end; ++s) {
    const uint8_t* strip = W + s * strip_bytes;
    const int j0 = s * kLanes, nl = N - j0 < kLanes ? N - j0 : kLanes;
    for (int p = 0; p < count; p += MR) {
      const int mr = count - p < MR ? count - p : MR;
      Strip(mr, K, A, qa, strip, rows + p, acc);
      for (int r = 0; r < mr; ++r)
        for (int l = 0; l < nl; ++l) store(rows[p + r], j0 + l, acc[r][l]);
    }
  }
}

// Bytes of one packed K x N matrix: whole strips (N rounded up to 16 columns, zero-padded).
long PackedBytes(long N, long K) { return (N + kLanes - 1) / kLanes * (K / kG) * kGroupBytes; }

// Packs one K x N matrix, given by its int8 values q[K][N] and fp16 scales sc[K/32][N], into
// strips.
void Pack(long N, long K, const int8_t* q, const uint16_t* sc, uint8_t* P) {
  const long G = K / kG, strips = (N + kLanes - 1) / kLanes;
  kiln_rt::ParallelFor(strips, NT, [&](long s) {
    for (long g = 0; g < G; ++g) {
      uint8_t* grp = P + (s * G + g) * kGroupBytes;
      memset(grp, 0, kGroupBytes);
      for (int l = 0; l < kLanes; ++l) {
        const long n = s * kLanes + l;
        if (n >= N) continue;  // padding columns: zero weights (stored offset) and zero scales
        for (int k = 0; k < kG; ++k) {
          const int v = q[(g * kG + k) * N + n] + kOffset;
#if QBITS == 8
          grp[(k / 4) * 64 + 4 * l + k % 4] = (uint8_t)v;
#else
          const int hi = k >= 16, kk = k - 16 * hi;
          grp[(kk / 4) * 64 + 4 * l + kk % 4] |= (uint8_t)(hi ? v << 4 : v);
#endif
        }
        memcpy(grp + kChunks * 64 + 2 * l, sc + g * N + n, 2);
      }
    }
  });
}

}  // namespace

#if !MOE
extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  (void)params;
  const int M = (int)d[0], N = (int)d[1], K = (int)d[2];
  const float* A = (const float*)args[0];
  const uint8_t* W = (const uint8_t*)args[1];
  const float* bias = (const float*)args[2];
  const float* R = (const float*)args[3];
  float* C = (float*)args[4];
  QuantA qa;
  void* scratch = QuantizeActivations(A, M, K, &qa);
  int* rows = (int*)malloc(sizeof(int) * (size_t)M);
  for (int i = 0; i < M; ++i) rows[i] = i;
  const int strips = (N + kLanes - 1) / kLanes, per_block = NB / kLanes;
  const int blocks = (strips + per_block - 1) / per_block;
  kiln_rt::ParallelFor(blocks, NT, [&](long jb) {
    const int s_end = (int)(jb + 1) * per_block < strips ? (int)(jb + 1) * per_block : strips;
    Strips((int)jb * per_block, s_end, N, K, A, qa, W, rows, M,
           [&](int i, int j, float v) { C[(long)i * N + j] = Epi(v, i, j, N, bias, R); });
  });
  free(rows);
  free(scratch);
}

extern "C" long kiln_op_prepack_bytes(const long long* d) { return PackedBytes(d[1], d[2]); }

// Packs the plain layout (int8 q[K][N], then fp16 scales [K/32][N]) into strips.
extern "C" void kiln_op_prepack(const long long* d, const void* src, void* dst) {
  const long N = d[1], K = d[2];
  const int8_t* q = (const int8_t*)src;
  Pack(N, K, q, (const uint16_t*)((const uint8_t*)src + K * N), (uint8_t*)dst);
}
#else
extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  (void)params;
  const int T = (int)d[0], E = (int)d[1], TOPK = (int)d[2], N = (int)d[3], K = (int)d[4];
  const int rows_total = T * TOPK;
  const float* x = (const float*)args[0];
  const uint8_t* W = (const uint8_t*)args[1];
  const int32_t* experts = (const int32_t*)args[2];
  float* y = (float*)args[3];
  QuantA qa;
  void* scratch = QuantizeActivations(x, rows_total, K, &qa);
  // Rows grouped by expert (a counting sort): order[start[e] .. start[e+1]) are expert e's.
  int* start = (int*)calloc((size_t)E + 1, sizeof(int));
  int* order = (int*)malloc(sizeof(int) * ((size_t)rows_total + 1));
  int* fill = (int*)malloc(sizeof(int) * ((size_t)E + 1));
  int* selected = (int*)malloc(sizeof(int) * ((size_t)E + 1));
  for (int r = 0; r < rows_total; ++r) start[experts[r] + 1]++;
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  for (int e = 0; e <= E; ++e) fill[e] = start[e];
  for (int r = 0; r < rows_total; ++r) order[fill[experts[r]]++] = r;
  int n_selected = 0;
  for (int e = 0; e < E; ++e)
    if (start[e + 1] > start[e]) selected[n_selected++] = e;
  const int strips = (N + kLanes - 1) / kLanes, per_block = NB / kLanes;
  const int blocks = (strips + per_block - 1) / per_block;
  const long expert_bytes = PackedBytes(N, K);
  kiln_rt::ParallelFor((long)n_selected * blocks, NT, [&](long item) {
    const int e = selected[item / blocks], jb = (int)(item % blocks);
    const int s_end = (jb + 1) * per_block < strips ? (jb + 1) * per_block : strips;
    Strips(jb * per_block, s_end, N, K, x, qa, W + e * expert_bytes, order + start[e],
           start[e + 1] - start[e], [&](int r, int j, float v) { y[(long)r * N + j] = v; });
  });
  free(selected);
  free(fill);
  free(order);
  free(start);
  free(scratch);
}

extern "C" long kiln_op_prepack_bytes(const long long* d) { return d[1] * PackedBytes(d[3], d[4]); }

// Packs each expert of the plain (E*K) x N layout: its q rows, then its rows of scales.
extern "C" void kiln_op_prepack(const long long* d, const void* src, void* dst) {
  const long E = d[1], N = d[3], K = d[4];
  const int8_t* q = (const int8_t*)src;
  const uint16_t* sc = (const uint16_t*)((const uint8_t*)src + E * K * N);
  for (long e = 0; e < E; ++e)
    Pack(N, K, q + e * K * N, sc + e * (K / kG) * N, (uint8_t*)dst + e * PackedBytes(N, K));
}
#endif
