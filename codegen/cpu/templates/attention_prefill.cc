// Kiln CPU causal prefill attention, tiled with an online softmax (FlashAttention's schedule).
//   q[B,S,H,D], k and v [B,S,KVH,D], out[B,S,H,D]; query i attends to keys 0..i; query head h
//   reads kv head h/(H/KVH); scale = params[0].
// Work items are (sequence, head, BQ-query tile); each walks BK-key tiles up to the causal limit,
// keeping a running max, sum and acc[D] per query row, so scores are never materialised whole.
// Knobs: BQ, BK, NT.
// ABI: kiln_op(dims {B,H,KVH,D,S}, args {q, k, v, out}, params {scale}).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifndef NT
#define NT 1
#endif
#ifndef BQ
#define BQ 8
#endif
#ifndef BK
#define BK 64
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long B = d[0], H = d[1], KVH = d[2], D = d[3], S = d[4], G = H / KVH;
  const float* q = (const float*)args[0];
  const float* k = (const float*)args[1];
  const float* v = (const float*)args[2];
  float* out = (float*)args[3];
  const float scale = params[0];
  const long qt = (S + BQ - 1) / BQ, items = B * H * qt;
  kiln_rt::ParallelFor(items, NT, [&](long it) {
    const long b = it / (H * qt), h = it / qt % H, q0 = it % qt * BQ;
    const long q1 = q0 + BQ < S ? q0 + BQ : S, kv = h / G;
    float* acc = (float*)malloc(sizeof(float) * BQ * D);
    float m[BQ], l[BQ], sc[BQ][BK];
    memset(acc, 0, sizeof(float) * BQ * D);
    for (long i = 0; i < BQ; ++i) m[i] = -INFINITY, l[i] = 0;
    for (long k0 = 0; k0 < q1; k0 += BK) {
      const long k1 = k0 + BK < q1 ? k0 + BK : q1;
      for (long i = q0; i < q1; ++i) {
        const float* qr = q + ((b * S + i) * H + h) * D;
        float mt = m[i - q0];
        for (long j = k0; j < k1; ++j) {
          float s = -INFINITY;
          if (j <= i) {
            const float* kr = k + ((b * S + j) * KVH + kv) * D;
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (long e = 0; e < D; ++e) dot += qr[e] * kr[e];
            s = dot * scale;
          }
          sc[i - q0][j - k0] = s;
          mt = s > mt ? s : mt;
        }
        const float f = kiln_rt::Exp(m[i - q0] - mt);  // rescale what was accumulated so far
        float* a = acc + (i - q0) * D;
        l[i - q0] *= f;
        for (long e = 0; e < D; ++e) a[e] *= f;
        m[i - q0] = mt;
        for (long j = k0; j < k1 && j <= i; ++j) {
          const float p = kiln_rt::Exp(sc[i - q0][j - k0] - mt);
          const float* vr = v + ((b * S + j) * KVH + kv) * D;
          l[i - q0] += p;
#pragma omp simd
          for (long e = 0; e < D; ++e) a[e] += p * vr[e];
        }
      }
    }
    for (long i = q0; i < q1; ++i) {
      float* o = out + ((b * S + i) * H + h) * D;
      const float inv = 1.0f / l[i - q0];
      for (long e = 0; e < D; ++e) o[e] = acc[(i - q0) * D + e] * inv;
    }
    free(acc);
  });
}
