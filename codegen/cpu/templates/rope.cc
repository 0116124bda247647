// Kiln CPU rotary position embedding (HuggingFace "rotate_half" convention): for each token t at
// position pos[t] and each head, the pair (x[i], x[i + D/2]) is rotated by pos * theta^(-2i/D).
// In place on x[T,H,D]; rows of H*D floats may be STRIDE floats apart (params[1], 0 = H*D).
// Knobs: NT (threads over tokens, then over tokens x head blocks), HB (heads per work item).
// ABI: kiln_op(dims {T,H,D}, args {x, pos(int32[T])}, params {theta, stride}).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#ifndef NT
#define NT 1
#endif
#ifndef HB
#define HB 4
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long T = d[0], H = d[1], D = d[2], half = D / 2;
  float* x = (float*)args[0];
  const int32_t* pos = (const int32_t*)args[1];
  const float theta = params[0];
  const long stride = params[1] > 0 ? (long)params[1] : H * D;
  const long hblocks = (H + HB - 1) / HB, items = T * hblocks;
  // Each token's cos/sin row once (in double, as HF computes it), shared by all its heads: per
  // work item it was HB heads' worth, which at decode (one token, 32 heads, HB=4) computed the
  // same 32 angles eight times (26 of the 27 us the operator took in a tinyllama step).
  float* cs = (float*)malloc(sizeof(float) * 2 * (T * half > 0 ? T * half : 1));
  kiln_rt::ParallelFor(T, NT, [&](long t) {
    for (long i = 0; i < half; ++i) {
      const double inv = pow((double)theta, -2.0 * (double)i / (double)D);
      const double a = (double)pos[t] * inv;
      cs[2 * t * half + i] = (float)cos(a);
      cs[(2 * t + 1) * half + i] = (float)sin(a);
    }
  });
  kiln_rt::ParallelFor(items, NT, [&](long it) {
    const long t = it / hblocks, h0 = it % hblocks * HB, h1 = h0 + HB < H ? h0 + HB : H;
    const float* c = cs + 2 * t * half;
    const float* s = c + half;
    for (long h = h0; h < h1; ++h) {
      float* v = x + t * stride + h * D;
#pragma omp simd
      for (long i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  });
  free(cs);
}
