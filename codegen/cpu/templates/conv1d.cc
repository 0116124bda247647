// Kiln CPU causal depthwise conv1d (Mamba's short convolution) with a carried state:
//   out[b,t,d] = act(bias[d] + sum_j w[d,j] * in[b, t-(W-1)+j, d]), where positions before 0
//   come from state[b, W-1, d] (the previous W-1 inputs), which is then advanced. act: SiLU when
//   params[0] != 0. Knobs: NT (threads over (batch, channel block)), DB (channels per block).
// ABI: kiln_op(dims {B,T,D,W}, args {x, w, bias, state, out}, params {silu}).
#include <math.h>
#ifndef NT
#define NT 1
#endif
#ifndef DB
#define DB 256
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long B = d[0], T = d[1], D = d[2], W = d[3];
  const float* x = (const float*)args[0];
  const float* w = (const float*)args[1];
  const float* bias = (const float*)args[2];
  float* state = (float*)args[3];
  float* out = (float*)args[4];
  const bool silu = params[0] != 0;
  const long blocks = (D + DB - 1) / DB, items = B * blocks;
  kiln_rt::ParallelFor(items, NT, [&](long it) {
    const long b = it / blocks, d0 = it % blocks * DB, n = d0 + DB < D ? DB : D - d0;
    float* st = state + b * (W - 1) * D;
    for (long t = 0; t < T; ++t) {
      const float* xt = x + (b * T + t) * D;
      float* o = out + (b * T + t) * D;
#pragma omp simd
      for (long c = d0; c < d0 + n; ++c) {
        float acc = bias[c];
        for (long j = 0; j < W - 1; ++j) acc += w[c * W + j] * st[j * D + c];
        acc += w[c * W + W - 1] * xt[c];
        o[c] = silu ? acc / (1.0f + kiln_rt::Exp(-acc)) : acc;
      }
      for (long j = 0; j + 1 < W - 1; ++j)  // shift the window by one input
        for (long c = d0; c < d0 + n; ++c) st[j * D + c] = st[(j + 1) * D + c];
      if (W > 1)
        for (long c = d0; c < d0 + n; ++c) st[(W - 2) * D + c] = xt[c];
    }
  });
}
