// Kiln CPU decode attention with grouped-query heads over a KV cache, split over the context.
//   q[B,H,D]; kcache, vcache [B,KVH,L,D]; out[B,H,D]; query head h reads kv head h/(H/KVH).
//   out = softmax(q.k * scale) v over the L cached positions (scale = params[0]).
// Work items are (sequence, kv head, context split): each scores its chunk of L for all G=H/KVH
// query heads of the group (every K and V row comes from memory once for the group), keeps
// (max, sum, acc[D]) per head, and the SPLIT partials of a group are merged with the usual
// rescaling (flash-decoding).
// The vector path (AVX-512 or AVX2, HD a multiple of the vector width VW) takes VW cached
// positions at a time. Per query head: VW dot products accumulate as vectors over the head
// dimension and one transpose-add tree reduces them together (no horizontal sum per position);
// the block's scores are exponentiated as one vector (online softmax); the head's output
// accumulator stays in registers while the VW value rows stream in. Other ISAs and head sizes
// take the scalar path, which the compiler vectorizes over D.
// Knobs: SPLIT (context chunks per kv head), NT (threads over work items). Fixed: HD = D.
// ABI: kiln_op(dims {B,H,KVH,D,L}, args {q, kcache, vcache, out}, params {scale}).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifndef NT
#define NT 1
#endif
#ifndef SPLIT
#define SPLIT 4
#endif
#ifndef HD
#define HD 0
#endif

#if HD > 0 && HD <= 256 && ((VW == 16 && defined(__AVX512F__)) || \
                            (VW == 8 && defined(__AVX2__) && defined(__FMA__)))
#define KILN_VECTOR_PATH (HD % VW == 0)
#else
#define KILN_VECTOR_PATH 0
#endif

#if KILN_VECTOR_PATH
#include <immintrin.h>
namespace {
#if VW == 16
typedef __m512 Vec;
inline Vec Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec Splat(float x) { return _mm512_set1_ps(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
// Lane j of the result is the sum of the lanes of v[j]: 45 shuffles and adds for 16 sums.
inline Vec SumEach(const Vec* v) {
  Vec w[8], x[4], y[2];
  for (int k = 0; k < 8; ++k)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    w[k] = _mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]) + _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]);
  for (int k = 0; k < 4; ++k) {  // per 128-bit lane: partial sums of 4 vectors
    const __m512d a = _mm512_castps_pd(w[2 * k]), b = _mm512_castps_pd(w[2 * k + 1]);
    x[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b)) + _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
  }
  for (int k = 0; k < 2; ++k)  // 128-bit lanes pairwise
    y[k] = _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)) +
           _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_shuffle_f32x4(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)) +
         _mm512_shuffle_f32x4(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1));
}
inline float Max(Vec v) { return _mm512_reduce_max_ps(v); }
inline float Sum(Vec v) { return _mm512_reduce_add_ps(v); }
inline Vec Clamp(Vec v, float lo, float hi) {
  return _mm512_min_ps(_mm512_max_ps(v, Splat(lo)), Splat(hi));
}
inline Vec Floor(Vec v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
inline Vec Pow2(Vec n) {  // 2^n for integral n in [-127, 128)
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
#else
typedef __m256 Vec;
inline Vec Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec Splat(float x) { return _mm256_set1_ps(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec SumEach(const Vec* v) {  // lane j = sum of the lanes of v[j]
  Vec w[4], x[2];
  for (int k = 0; k < 4; ++k)
    w[k] = _mm256_unpacklo_ps(v[2 * k], v[2 * k + 1]) + _mm256_unpackhi_ps(v[2 * k], v[2 * k + 1]);
  for (int k = 0; k < 2; ++k) {
    const __m256d a = _mm256_castps_pd(w[2 * k]), b = _mm256_castps_pd(w[2 * k + 1]);
    x[k] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b)) + _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
  }
  return _mm256_permute2f128_ps(x[0], x[1], 0x20) + _mm256_permute2f128_ps(x[0], x[1], 0x31);
}
inline float Max(Vec v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
inline float Sum(Vec v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)));
}
inline Vec Clamp(Vec v, float lo, float hi) {
  return _mm256_min_ps(_mm256_max_ps(v, Splat(lo)), Splat(hi));
}
inline Vec Floor(Vec v) { return _mm256_floor_ps(v); }
inline Vec Pow2(Vec n) {
  return _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
#endif

// kiln_rt::Exp on a vector (the same Cephes polynomial, lane by lane).
inline Vec Exp(Vec x) {
  x = Clamp(x, -87.33f, 88.3f);
  const Vec n = Floor(x * Splat(1.44269504088896341f) + Splat(0.5f));
  x = x - n * Splat(0.693359375f) + n * Splat(2.12194440e-4f);
  Vec p = Splat(1.9875691500e-4f);
  p = p * x + Splat(1.3981999507e-3f);
  p = p * x + Splat(8.3334519073e-3f);
  p = p * x + Splat(4.1665795894e-2f);
  p = p * x + Splat(1.6666665459e-1f);
  p = p * x + Splat(5.0000001201e-1f);
  p = p * x * x + x + Splat(1.0f);
  return p * Pow2(n);
}

// v with the lanes from n on replaced by `fill`.
inline Vec KeepFirst(Vec v, int n, float fill, float* tmp) {
  if (n >= VW) return v;
  Store(tmp, v);
  for (int j = n; j < VW; ++j) tmp[j] = fill;
  return Load(tmp);
}

// Positions [l0, l1) of one kv head for its G query heads (qg: G rows of HD); p: per head
// acc[HD], max, sum, initialised here. Each block runs in three phases over the G heads (scores,
// softmax, values) so that the heads' short dependency chains overlap instead of one head's
// reduce -> max -> exp -> sum chain at a time.
void Chunk(const float* qg, const float* K, const float* V, long l0, long l1, long G, float scale,
           float* p, float* w) {
  constexpr int C = HD / VW;  // vectors per row
  for (long g = 0; g < G; ++g) {
    memset(p + g * (HD + 2), 0, sizeof(float) * HD);
    p[g * (HD + 2) + HD] = -INFINITY;
    p[g * (HD + 2) + HD + 1] = 0;
  }
  float* corr = w + G * VW;  // w: G x VW scores, then G rescale factors
  for (long l = l0; l < l1; l += VW) {
    const int n = l1 - l < VW ? (int)(l1 - l) : VW;
    const float* kb = K + l * HD;
    const float* vb = V + l * HD;
    for (long g = 0; g < G; ++g) {  // scores: VW dot products per head, reduced together
      Vec qv[C], dot[VW];
      for (int c = 0; c < C; ++c) qv[c] = Load(qg + g * HD + c * VW);
#pragma GCC unroll 16
      for (int j = 0; j < VW; ++j) {  // unrolled: VW independent chains (rows past n re-read row
        const float* kr = kb + (j < n ? j : n - 1) * HD;  // n-1; their scores are masked)
        Vec a = qv[0] * Load(kr);
        for (int c = 1; c < C; ++c) a = Fma(qv[c], Load(kr + c * VW), a);
        dot[j] = a;
      }
      Store(w + g * VW, KeepFirst(SumEach(dot) * Splat(scale), n, -INFINITY, w + g * VW));
    }
    for (long g = 0; g < G; ++g) {  // online softmax over the block (masked past the chunk)
      float* acc = p + g * (HD + 2);
      const Vec sv = Load(w + g * VW);
      const float block_top = Max(sv), top = block_top > acc[HD] ? block_top : acc[HD];
      corr[g] = kiln_rt::Exp(acc[HD] - top);
      const Vec e = KeepFirst(Exp(sv - Splat(top)), n, 0.0f, w + g * VW);
      Store(w + g * VW, e);
      acc[HD] = top;
      acc[HD + 1] = acc[HD + 1] * corr[g] + Sum(e);
    }
    for (long g = 0; g < G; ++g) {  // values: the head's accumulator stays in registers
      float* acc = p + g * (HD + 2);
      Vec o[C], o2[C];  // two accumulators per vector: half the FMA chain latency
      for (int c = 0; c < C; ++c) o[c] = Load(acc + c * VW) * Splat(corr[g]), o2[c] = Splat(0.0f);
      int j = 0;
      for (; j + 1 < n; j += 2) {
        const Vec x = Splat(w[g * VW + j]), y = Splat(w[g * VW + j + 1]);
        for (int c = 0; c < C; ++c) {
          o[c] = Fma(x, Load(vb + j * HD + c * VW), o[c]);
          o2[c] = Fma(y, Load(vb + (j + 1) * HD + c * VW), o2[c]);
        }
      }
      if (j < n)
        for (int c = 0; c < C; ++c) o[c] = Fma(Splat(w[g * VW + j]), Load(vb + j * HD + c * VW), o[c]);
      for (int c = 0; c < C; ++c) o[c] = o[c] + o2[c];
      for (int c = 0; c < C; ++c) Store(acc + c * VW, o[c]);
    }
  }
}
}  // namespace
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long B = d[0], H = d[1], KVH = d[2], D = d[3], L = d[4], G = H / KVH;
  const float* q = (const float*)args[0];
  const float* kc = (const float*)args[1];
  const float* vc = (const float*)args[2];
  float* out = (float*)args[3];
  const float scale = params[0];
  const long split = SPLIT < L ? SPLIT : L, chunk = (L + split - 1) / split;
  const long items = B * KVH * split, part = G * (D + 2);
  float* parts = (float*)malloc(sizeof(float) * items * part);
  kiln_rt::ParallelFor(items, NT, [&](long it) {
    const long s = it % split, bk = it / split, b = bk / KVH, kv = bk % KVH;
    const long l0 = s * chunk, l1 = l0 + chunk < L ? l0 + chunk : L;
    const float* qg = q + (b * H + kv * G) * D;
    const float* K = kc + bk * L * D;
    const float* V = vc + bk * L * D;
    float* p = parts + it * part;  // per head: acc[D], max, sum
#if KILN_VECTOR_PATH
    if (D == HD) {
      float* w = (float*)aligned_alloc(64, sizeof(float) * G * (VW + 1) + 64);
      Chunk(qg, K, V, l0, l1, G, scale, p, w);
      free(w);
      return;
    }
#endif
    float* sc = (float*)malloc(sizeof(float) * (l1 > l0 ? (l1 - l0) : 1) * G);
    for (long g = 0; g < G; ++g) p[g * (D + 2) + D] = -INFINITY;
    for (long l = l0; l < l1; ++l) {
      const float* kr = K + l * D;
      for (long g = 0; g < G; ++g) {
        const float* qr = qg + g * D;
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (long i = 0; i < D; ++i) dot += qr[i] * kr[i];
        dot *= scale;
        sc[(l - l0) * G + g] = dot;
        float* m = p + g * (D + 2) + D;
        if (dot > *m) *m = dot;
      }
    }
    for (long g = 0; g < G; ++g) {
      memset(p + g * (D + 2), 0, sizeof(float) * D);
      p[g * (D + 2) + D + 1] = 0;
    }
    for (long l = l0; l < l1; ++l) {
      const float* vr = V + l * D;
      for (long g = 0; g < G; ++g) {
        float* acc = p + g * (D + 2);
        const float w = kiln_rt::Exp(sc[(l - l0) * G + g] - acc[D]);
        acc[D + 1] += w;
#pragma omp simd
        for (long i = 0; i < D; ++i) acc[i] += w * vr[i];
      }
    }
    free(sc);
  });
  for (long bk = 0; bk < B * KVH; ++bk) {
    const long b = bk / KVH, kv = bk % KVH;
    for (long g = 0; g < G; ++g) {
      float m = -INFINITY, sum = 0;
      for (long s = 0; s < split; ++s) {
        const float* p = parts + (bk * split + s) * part + g * (D + 2);
        if (p[D + 1] > 0 && p[D] > m) m = p[D];
      }
      float* o = out + (b * H + kv * G + g) * D;
      for (long i = 0; i < D; ++i) o[i] = 0;
      for (long s = 0; s < split; ++s) {
        const float* p = parts + (bk * split + s) * part + g * (D + 2);
        if (!(p[D + 1] > 0)) continue;
        const float f = kiln_rt::Exp(p[D] - m);
        sum += f * p[D + 1];
        for (long i = 0; i < D; ++i) o[i] += f * p[i];
      }
      const float inv = 1.0f / sum;
      for (long i = 0; i < D; ++i) o[i] *= inv;
    }
  }
  free(parts);
}
