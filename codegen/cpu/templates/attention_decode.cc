// Kiln CPU decode attention with grouped-query heads over a KV cache, split over the context.
//   q[B,H,D]; kcache, vcache [B,KVH,L,D]; out[B,H,D]; query head h reads kv head h/(H/KVH).
//   out = softmax(q.k * scale) v over the L cached positions (scale = params[0]).
// Work items are (sequence, kv head, context split): each scores its chunk of L for all G=H/KVH
// query heads of the group (every K and V row comes from memory once for the group), keeps
// (max, sum, acc[D]) per head, and the SPLIT partials of a group are merged with the usual
// rescaling (flash-decoding). Each thread works through a contiguous run of the items
// (kiln_rt::ParallelRuns), so its K and V streams run on from one item into the next, which it
// prefetches, and each item's partials fill whole cache lines (no line written by two threads).
// Against items handed out one at a time (alternating between the cores) into packed partials:
// 8-14% faster cold at context 512 and 4-6% at 4096 on Zen 5 (padding alone: 4-6% at 512).
// The vector path (AVX-512 or AVX2, HD a multiple of the vector width VW) takes VW cached
// positions at a time in two passes over its chunk, K then V, each streamed once with every
// head's work on a block done while the block is in L1 (Chunk below), and prefetches PF blocks
// ahead. Other ISAs and head sizes take the scalar path, which the compiler vectorizes over D.
// Knobs: SPLIT (context chunks per kv head), TAIL (the last kv head of each thread's run in
// SPLIT*TAIL chunks instead, small pieces for the thread that finishes first to take over), NT
// (threads over work items), PF (prefetch distance in blocks, 0 = none), PFL (the cache level
// prefetched into: 2 = L2, the T1 hint; 1 = L1, T0: on Zen 5 T0 took the cold kernel from
// 808-866 to 727-748 us at context 4096, where Emerald Rapids had been slower with it), VEC
// (AVX-512 chips: 16 or 8 lanes).
// Fixed: HD = D.
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
#ifndef TAIL
#define TAIL 1
#endif
#ifndef HD
#define HD 0
#endif
#ifndef PF
#define PF 1
#endif
#ifndef PFL
#define PFL 2
#endif
#if defined(VEC) && VEC > 0 && VEC < VW  // narrower vectors than the chip's (VW)
#undef VW
#define VW VEC
#endif

#if HD > 0 && HD <= 256 && \
    ((VW == 16 && defined(__AVX512F__)) || (VW == 8 && defined(__AVX2__) && defined(__FMA__)))
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
inline Vec MaxV(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline float Sum(Vec v) { return _mm512_reduce_add_ps(v); }
inline Vec Clamp(Vec v, float lo, float hi) {
  return _mm512_min_ps(_mm512_max_ps(v, Splat(lo)), Splat(hi));
}
inline Vec Floor(Vec v) {
  return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
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
inline Vec MaxV(Vec a, Vec b) { return _mm256_max_ps(a, b); }
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

// kiln_rt::Exp on a vector: the same clamp and reduction, and the runtime's polynomial
// (kiln_rt::ExpReduced, parallel.h) on this ISA's vector type.
inline Vec Exp(Vec x) {
  x = Clamp(x, -87.33f, 88.3f);
  const Vec n = Floor(x * Splat(1.44269504088896341f) + Splat(0.5f));
  return kiln_rt::ExpReduced(x, n) * Pow2(n);
}

// v with the lanes from n on replaced by `fill`.
inline Vec KeepFirst(Vec v, int n, float fill, float* tmp) {
  if (n >= VW) return v;
  Store(tmp, v);
  for (int j = n; j < VW; ++j) tmp[j] = fill;
  return Load(tmp);
}

// Vectors of the head dimension a value pass accumulates for GB heads at once (GB * DH
// accumulators in registers): the largest of 4, 2, 1 that divides the row (AVX2 has half the
// registers, so at most 2 there).
constexpr int kRow = HD / VW;
constexpr int kMaxDH = VW == 16 ? 4 : 2;
constexpr int DH = kRow % kMaxDH == 0 ? kMaxDH : kRow % 2 == 0 ? 2 : 1;
constexpr int GB = 4;

// Prefetches row `r` of a cache ahead of its use (into cache level PFL: the rows of one block are
// requested spread over the block's work rather than in one burst that fills the miss buffers).
inline void PrefetchRow(const float* r, int floats) {
#if PF > 0
  for (int i = 0; i < floats; i += 64 / 4)
    _mm_prefetch((const char*)(r + i), PFL == 1 ? _MM_HINT_T0 : _MM_HINT_T1);
#else
  (void)r, (void)floats;
#endif
}

// Lane j: the dot product of the query row qr with row j of a full block of VW cached rows kb.
// The head dimension is the outer loop: VW independent accumulators and one query vector in
// registers, every FMA taking its key vector straight from L1.
inline Vec BlockScores(const float* qr, const float* kb) {
  Vec dot[VW];
  const Vec q0 = Load(qr);
#pragma GCC unroll 16
  for (int j = 0; j < VW; ++j) dot[j] = q0 * Load(kb + j * HD);
#pragma GCC unroll 16
  for (int c = 1; c < kRow; ++c) {
    const Vec qc = Load(qr + c * VW);
#pragma GCC unroll 16
    for (int j = 0; j < VW; ++j) dot[j] = Fma(qc, Load(kb + j * HD + c * VW), dot[j]);
  }
  return SumEach(dot);
}

// Positions [l0, l1) of one kv head for its G query heads (qg: G rows of HD); p: per head
// acc[HD], max, sum, written here. Two passes, each streaming its cache once, block by block,
// every head's work on a block done while the block is in L1:
//   scores: VW dot products per head accumulate as vectors over the head dimension and one
//     transpose-add tree reduces them together (no horizontal sum per position; BlockScores);
//     a partial last block is copied into a zero-padded one first, so every block takes the
//     same branch-free code; the chunk's scores are kept (S: G rows of ld) with a lane-wise
//     running maximum per head;
//   softmax: one exponentiation of each score against the chunk's maximum (no rescaling);
//   values: GB heads x DH vectors of accumulators stay in registers while the block's value rows
//     stream in, each row vector feeding GB FMAs.
// PF: prefetch distance in blocks of VW positions (0: the hardware prefetcher alone).
// next: the first key row of the work item this thread runs next (null if none; VW rows there at
// least): the value pass's last block prefetches that first block, so the stream runs on into it.
void Chunk(const float* qg, const float* K, const float* V, long l0, long l1, long G, float scale,
           float* p, float* S, float* top, const float* next) {
  const long n = l1 > l0 ? l1 - l0 : 0, nb = (n + VW - 1) / VW, ld = nb * VW;
  for (long g = 0; g < G; ++g) Store(top + g * VW, Splat(-INFINITY));
  alignas(64) float tail[VW * HD];  // the last, partial block's rows, zero-padded
  for (long b = 0; b < nb; ++b) {
    const long l = l0 + b * VW;
    const int m = l1 - l < VW ? (int)(l1 - l) : VW;
    const float* kb = K + l * HD;
    if (m < VW) {
      memcpy(tail, kb, sizeof(float) * m * HD);
      memset(tail + m * HD, 0, sizeof(float) * (VW - m) * HD);
      kb = tail;
    }
    // The block PF ahead: of the keys while the chunk lasts, then the first blocks of the values,
    // so that the value pass starts with its stream already flowing (2-3% faster cold at
    // context 512).
    const float* ahead = nullptr;
    long ahead_lines = 0;
    if (PF > 0) {
      const long a = b + PF, pos = l0 + (a < nb ? a : a - nb) * VW;
      if (pos < l1) {
        ahead = (a < nb ? K : V) + pos * HD;
        ahead_lines = (l1 - pos < VW ? l1 - pos : VW) * HD / 16;
      }
    }
    for (long g = 0; g < G; ++g) {
      // The block PF ahead is requested a head's share at a time, spread over the block's work.
      if (ahead) {
        const long from = g * ahead_lines / G, to = (g + 1) * ahead_lines / G;
        PrefetchRow(ahead + from * 16, (int)((to - from) * 16));
      }
      float* s = S + g * ld + b * VW;
      const Vec sv = KeepFirst(BlockScores(qg + g * HD, kb) * Splat(scale), m, -INFINITY, s);
      Store(s, sv);
      Store(top + g * VW, MaxV(Load(top + g * VW), sv));
    }
  }
  for (long g = 0; g < G; ++g) {
    float* acc = p + g * (HD + 2);
    float* s = S + g * ld;
    const float mx = n > 0 ? Max(Load(top + g * VW)) : -INFINITY;
    Vec sum = Splat(0.0f);
    for (long b = 0; b < nb; ++b) {
      const Vec e =
          KeepFirst(Exp(Load(s + b * VW) - Splat(mx)), (int)(n - b * VW), 0.0f, s + b * VW);
      Store(s + b * VW, e);
      sum = sum + e;
    }
    memset(acc, 0, sizeof(float) * HD);
    acc[HD] = mx;
    acc[HD + 1] = Sum(sum);
  }
  for (long b = 0; b < nb; ++b) {
    const long l = l0 + b * VW;
    const int m = l1 - l < VW ? (int)(l1 - l) : VW;
    const float* vb = V + l * HD;
    const bool ahead = PF > 0 && l + PF * VW < l1;
    const float* follow = PF > 0 && b == nb - 1 ? next : nullptr;
    for (int c0 = 0; c0 < kRow; c0 += DH) {
      for (long g0 = 0; g0 < G; g0 += GB) {
        const int gn = G - g0 < GB ? (int)(G - g0) : GB;
        Vec o[GB][DH];
#pragma GCC unroll 4
        for (int g = 0; g < GB; ++g)
          for (int c = 0; c < DH; ++c)
            o[g][c] = g < gn ? Load(p + (g0 + g) * (HD + 2) + (c0 + c) * VW) : Splat(0.0f);
        const float* w = S + g0 * ld + b * VW;
        for (int j = 0; j < m; ++j) {
          const float* vr = vb + j * HD + c0 * VW;
          // The block PF ahead is requested front to back: step (c0, j) of the block's
          // kRow/DH x VW steps takes the next DH*VW floats of it in memory order (requesting
          // the same half-rows as this step reads made a strided stream, 4-10% slower cold).
          if (g0 == 0 && ahead)
            PrefetchRow(vb + PF * VW * HD + ((c0 / DH) * VW + j) * (DH * VW), DH * VW);
          else if (g0 == 0 && follow)
            PrefetchRow(follow + ((c0 / DH) * VW + j) * (DH * VW), DH * VW);
          Vec v[DH];
          for (int c = 0; c < DH; ++c) v[c] = Load(vr + c * VW);
#pragma GCC unroll 4
          for (int g = 0; g < GB; ++g) {
            if (g >= gn) break;
            const Vec x = Splat(w[g * ld + j]);
            for (int c = 0; c < DH; ++c) o[g][c] = Fma(x, v[c], o[g][c]);
          }
        }
#pragma GCC unroll 4
        for (int g = 0; g < GB; ++g) {
          if (g >= gn) break;
          for (int c = 0; c < DH; ++c) Store(p + (g0 + g) * (HD + 2) + (c0 + c) * VW, o[g][c]);
        }
      }
    }
  }
}
}  // namespace
#endif

// The scalar path (other ISAs and head sizes; the compiler vectorizes over D): positions
// [l0, l1) of one kv head for its G query heads, the same partials as Chunk.
static void Scalar(const float* qg, const float* K, const float* V, long l0, long l1, long G,
                   long D, float scale, float* p) {
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
}

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long B = d[0], H = d[1], KVH = d[2], D = d[3], L = d[4], G = H / KVH;
  const float* q = (const float*)args[0];
  const float* kc = (const float*)args[1];
  const float* vc = (const float*)args[2];
  float* out = (float*)args[3];
  const float scale = params[0];
  // Work items: each group (sequence, kv head) in SPLIT context chunks, and the last group of
  // each thread's run in SPLIT*TAIL smaller ones: the two vCPUs of a VM run at different speeds
  // from moment to moment, and the thread that finishes its run first takes these pieces from
  // the far end of the other's run (with whole kv heads it waited 15-20 us of a ~110 us call).
  const long groups = B * KVH, runs = NT < groups ? NT : groups;
  // Group g's items are [first[g], first[g + 1]), one per context chunk.
  long* first = (long*)malloc(sizeof(long) * (groups + 1));
  long items = 0;
  for (long g = 0, t = 0; g < groups; ++g) {
    while ((t + 1) * groups / runs <= g) ++t;  // g is in run t: [t*groups/runs, (t+1)*...)
    const long want = g == (t + 1) * groups / runs - 1 ? SPLIT * TAIL : SPLIT;
    first[g] = items;
    items += want < L ? want : L;
  }
  first[groups] = items;
  auto splits = [&](long g) { return first[g + 1] - first[g]; };
  long* group_of = (long*)malloc(sizeof(long) * items);
  for (long g = 0; g < groups; ++g)
    for (long i = first[g]; i < first[g + 1]; ++i) group_of[i] = g;
  // A whole number of cache lines per item: two threads never write one line.
  const long part = (G * (D + 2) + 15) / 16 * 16;
  float* parts = (float*)aligned_alloc(64, sizeof(float) * items * part);  // per item
  long* finished = (long*)calloc(groups, sizeof(long));                    // items done per group
  // Merges the partials of group bk into out (flash-decoding's rescaling).
  auto merge = [&](long bk) {
    const long b = bk / KVH, kv = bk % KVH;
    for (long g = 0; g < G; ++g) {
      float m = -INFINITY, sum = 0;
      for (long s = 0; s < splits(bk); ++s) {
        const float* p = parts + (first[bk] + s) * part + g * (D + 2);
        if (p[D + 1] > 0 && p[D] > m) m = p[D];
      }
      float* o = out + (b * H + kv * G + g) * D;
      for (long i = 0; i < D; ++i) o[i] = 0;
      for (long s = 0; s < splits(bk); ++s) {
        const float* p = parts + (first[bk] + s) * part + g * (D + 2);
        if (!(p[D + 1] > 0)) continue;
        const float f = kiln_rt::Exp(p[D] - m);
        sum += f * p[D + 1];
        for (long i = 0; i < D; ++i) o[i] += f * p[i];
      }
      const float inv = 1.0f / sum;
      for (long i = 0; i < D; ++i) o[i] *= inv;
    }
  };
  // Context positions [*l0, *l1) of item it, in group *bk.
  auto span = [&](long it, long* bk, long* l0, long* l1) {
    *bk = group_of[it];
    const long chunk = (L + splits(*bk) - 1) / splits(*bk);
    *l0 = (it - first[*bk]) * chunk;
    *l1 = *l0 + chunk < L ? *l0 + chunk : L;
  };
  // Each thread takes a contiguous run of items (kiln_rt::ParallelRuns): its K and V streams run
  // on from one kv head (or context chunk) into the next, which it prefetches.
  kiln_rt::ParallelRuns(items, NT, [&](long it, long then) {
    long bk, l0, l1;
    span(it, &bk, &l0, &l1);
    const long b = bk / KVH, kv = bk % KVH;
    const float* qg = q + (b * H + kv * G) * D;
    const float* K = kc + bk * L * D;
    const float* V = vc + bk * L * D;
    float* p = parts + it * part;  // per head: acc[D], max, sum
#if KILN_VECTOR_PATH
    if (D == HD) {
      const long ld = (l1 > l0 ? l1 - l0 + VW - 1 : 0) / VW * VW;  // scores, then the maxima
      float* w = (float*)aligned_alloc(64, sizeof(float) * G * (ld + VW) + 64);
      const float* next = nullptr;  // the next item's first block, if it has a whole one
      long nbk, nl0, nl1;
      if (then >= 0 && (span(then, &nbk, &nl0, &nl1), nl0 + VW <= L))
        next = kc + (nbk * L + nl0) * D;
      Chunk(qg, K, V, l0, l1, G, scale, p, w, w + G * ld, next);
      free(w);
    } else {
      Scalar(qg, K, V, l0, l1, G, D, scale, p);
    }
#else
    Scalar(qg, K, V, l0, l1, G, D, scale, p);
#endif
    // The group's last item to finish merges it, on whichever thread that is: no merge of every
    // group on one thread after the loop (context 512, SPLIT=8: 6-8% faster cold).
    if (__atomic_add_fetch(&finished[bk], 1L, __ATOMIC_ACQ_REL) == splits(bk)) merge(bk);
  });
  free(finished);
  free(parts);
  free(group_of);
  free(first);
}
