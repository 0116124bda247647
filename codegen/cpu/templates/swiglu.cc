// Kiln CPU SwiGLU: out[t,f] = silu(gate[t,f]) * up[t,f] = gate / (1 + exp(-gate)) * up, a
// vector at a time (kiln_rt::ExpVF: 6-8x the scalar loop, which GCC does not vectorize).
// Knobs: NT (threads over CH-float chunks of the flattened T*F elements), CH.
// ABI: kiln_op(dims {T,F}, args {gate, up, out}, params {}).
#include <math.h>
#ifndef NT
#define NT 1
#endif
#ifndef CH
#define CH 4096
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long n = d[0] * d[1];
  const float* g = (const float*)args[0];
  const float* u = (const float*)args[1];
  float* out = (float*)args[2];
  const long chunks = (n + CH - 1) / CH;
  kiln_rt::ParallelFor(chunks, NT, [&](long c) {
    const long e = (c + 1) * CH < n ? (c + 1) * CH : n;
    long i = c * CH;
    for (; i + kiln_rt::kVF <= e; i += kiln_rt::kVF) {
      const kiln_rt::VF gv = kiln_rt::LoadVF(g + i);
      kiln_rt::StoreVF(out + i, gv / (1.0f + kiln_rt::ExpVF(-gv)) * kiln_rt::LoadVF(u + i));
    }
    for (; i < e; ++i) out[i] = g[i] / (1.0f + kiln_rt::Exp(-g[i])) * u[i];
  });
}
