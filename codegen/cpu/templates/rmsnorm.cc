// Kiln CPU RMSNorm: out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, optionally after a fused
// residual add (RESIDUAL=1: res[t] += x[t] in place, then res[t] is normalised).
// Knobs: NT (threads over rows), VU (independent vector partial sums, 1/2/4, for the sum of
// squares). ABI: kiln_op(dims {T,D}, args {x, w, out, res}, params {eps}).
#include <math.h>
#ifndef NT
#define NT 1
#endif
#ifndef VU
#define VU 2
#endif
#ifndef RESIDUAL
#define RESIDUAL 0
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long T = d[0], D = d[1];
  const float* x = (const float*)args[0];
  const float* w = (const float*)args[1];
  float* out = (float*)args[2];
  float* res = (float*)args[3];
  const float eps = params[0];
  kiln_rt::ParallelFor(T, NT, [&](long t) {
    const float* xr = x + t * D;
#if RESIDUAL
    float* rr = res + t * D;
    for (long i = 0; i < D; ++i) rr[i] += xr[i];
    xr = rr;
#endif
    // VU independent vector partial sums (GCC does not vectorize a float sum by itself: it
    // would reorder the additions), then the tail.
    kiln_rt::VF part[VU] = {};
    long i = 0;
    for (; i + kiln_rt::kVF * VU <= D; i += kiln_rt::kVF * VU)
#pragma GCC unroll 4
      for (int u = 0; u < VU; ++u) {
        const kiln_rt::VF v = kiln_rt::LoadVF(xr + i + kiln_rt::kVF * u);
        part[u] += v * v;
      }
    for (int u = 1; u < VU; ++u) part[0] += part[u];
    float ss = 0;
    for (int j = 0; j < kiln_rt::kVF; ++j) ss += part[0][j];
    for (; i < D; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / sqrtf(ss / (float)D + eps);
    float* o = out + t * D;
#pragma omp simd
    for (long j = 0; j < D; ++j) o[j] = xr[j] * scale * w[j];
  });
}
