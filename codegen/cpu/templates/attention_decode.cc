// Kiln CPU decode attention with grouped-query heads over a KV cache, split over the context.
//   q[B,H,D]; kcache, vcache [B,KVH,L,D]; out[B,H,D]; query head h reads kv head h/(H/KVH).
//   out = softmax(q.k * scale) v over the L cached positions (scale = params[0]).
// Work items are (sequence, kv head, context split): each scores its chunk of L for all G=H/KVH
// query heads of the group (every K and V row is loaded once for the group), keeps (max, sum,
// acc[D]) per head, and the SPLIT partials of a group are merged with the usual rescaling.
// Knobs: SPLIT (context chunks per kv head), NT (threads over work items).
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
