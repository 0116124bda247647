// Kiln CPU MoE router: logits[t] = x[t] * W (W is D x E), softmax over the E experts, the TOPK
// largest (ties: lower index first), their weights renormalised to sum 1 (Mixtral's rule).
// Knobs: NT (threads over tokens), EB (experts accumulated per pass over x's row).
// ABI: kiln_op(dims {T,D,E,TOPK}, args {x, W, weights[T,TOPK], experts(int32)[T,TOPK]}, params {}).
#include <math.h>
#include <stdint.h>
#ifndef NT
#define NT 1
#endif
#ifndef EB
#define EB 8
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long T = d[0], D = d[1], E = d[2], K = d[3];
  const float* x = (const float*)args[0];
  const float* W = (const float*)args[1];
  float* wout = (float*)args[2];
  int32_t* iout = (int32_t*)args[3];
  kiln_rt::ParallelFor(T, NT, [&](long t) {
    float logit[1024];  // E <= 1024
    for (long e0 = 0; e0 < E; e0 += EB) {
      const long e1 = e0 + EB < E ? e0 + EB : E;
      float acc[EB] = {0};
      for (long i = 0; i < D; ++i) {
        const float xi = x[t * D + i];
        for (long e = e0; e < e1; ++e) acc[e - e0] += xi * W[i * E + e];
      }
      for (long e = e0; e < e1; ++e) logit[e] = acc[e - e0];
    }
    float m = logit[0];
    for (long e = 1; e < E; ++e) m = logit[e] > m ? logit[e] : m;
    float sum = 0;
    for (long e = 0; e < E; ++e) sum += (logit[e] = expf(logit[e] - m));
    float chosen = 0;
    for (long k = 0; k < K; ++k) {
      long best = -1;
      for (long e = 0; e < E; ++e) {
        bool taken = false;
        for (long j = 0; j < k; ++j) taken = taken || iout[t * K + j] == e;
        if (!taken && (best < 0 || logit[e] > logit[best])) best = e;
      }
      iout[t * K + k] = (int32_t)best;
      wout[t * K + k] = logit[best] / sum;
      chosen += wout[t * K + k];
    }
    for (long k = 0; k < K; ++k) wout[t * K + k] /= chosen;
  });
}
