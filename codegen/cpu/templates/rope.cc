// Kiln CPU rotary position embedding (HuggingFace "rotate_half" convention): for each token t at
// position pos[t] and each head, the pair (x[i], x[i + D/2]) is rotated by pos * theta^(-2i/D).
// In place on x[T,H,D]; rows of H*D floats may be STRIDE floats apart (params[1], 0 = H*D).
// Knobs: NT (threads over tokens x head blocks), HB (heads per work item, sharing one cos/sin row).
// ABI: kiln_op(dims {T,H,D}, args {x, pos(int32[T])}, params {theta, stride}).
#include <math.h>
#include <stdint.h>
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
  kiln_rt::ParallelFor(items, NT, [&](long it) {
    const long t = it / hblocks, h0 = it % hblocks * HB, h1 = h0 + HB < H ? h0 + HB : H;
    float c[512], s[512];  // D <= 1024
    for (long i = 0; i < half; ++i) {
      const double inv = pow((double)theta, -2.0 * (double)i / (double)D);
      const double a = (double)pos[t] * inv;
      c[i] = (float)cos(a);
      s[i] = (float)sin(a);
    }
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
}
