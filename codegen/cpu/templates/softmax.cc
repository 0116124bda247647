// Kiln CPU row softmax: out[t] = exp(x[t] - max) / sum, for T rows of length N.
// Knobs: NT (threads over rows), ONLINE (1: one pass for max and sum with rescaling, then one
// pass to write; 0: three passes: max, exp and sum, scale).
// ABI: kiln_op(dims {T,N}, args {x, out}, params {}).
#include <math.h>
#ifndef NT
#define NT 1
#endif
#ifndef ONLINE
#define ONLINE 0
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long T = d[0], N = d[1];
  const float* x = (const float*)args[0];
  float* out = (float*)args[1];
  kiln_rt::ParallelFor(T, NT, [&](long t) {
    const float* r = x + t * N;
    float* o = out + t * N;
#if ONLINE
    float m = -INFINITY, s = 0;
    for (long i = 0; i < N; ++i) {
      if (r[i] > m) {
        s = s * expf(m - r[i]) + 1.0f;
        m = r[i];
      } else {
        s += expf(r[i] - m);
      }
    }
    const float inv = 1.0f / s;
    long i = 0;
    for (; i + kiln_rt::kVF <= N; i += kiln_rt::kVF)
      kiln_rt::StoreVF(o + i, kiln_rt::ExpVF(kiln_rt::LoadVF(r + i) - m) * inv);
    for (; i < N; ++i) o[i] = kiln_rt::Exp(r[i] - m) * inv;
#else
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (long i = 0; i < N; ++i) m = r[i] > m ? r[i] : m;
    kiln_rt::VF sv = {};  // a vector at a time (kiln_rt::ExpVF), then the tail
    long i = 0;
    for (; i + kiln_rt::kVF <= N; i += kiln_rt::kVF) {
      const kiln_rt::VF e = kiln_rt::ExpVF(kiln_rt::LoadVF(r + i) - m);
      kiln_rt::StoreVF(o + i, e);
      sv += e;
    }
    float s = 0;
    for (int j = 0; j < kiln_rt::kVF; ++j) s += sv[j];
    for (; i < N; ++i) {
      o[i] = kiln_rt::Exp(r[i] - m);
      s += o[i];
    }
    const float inv = 1.0f / s;
#pragma omp simd
    for (long i = 0; i < N; ++i) o[i] *= inv;
#endif
  });
}
