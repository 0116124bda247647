// Kiln CPU grouped MoE GEMM: row r of x (one per (token, slot), T*TOPK rows of K) is multiplied
// by the weights of its expert experts[r]: y[r] = x[r] * W[experts[r]] (W is E x K x N, fp32 or
// bf16 with WBF16=1). Rows are grouped by expert, so each selected expert's weights stream from
// memory once per MR rows; unselected experts are never read.
// Knobs: MR (rows per pass), NB (columns per block), KU (rows of W per pass), NT (threads over
// (expert group, column block) items).
// ABI: kiln_op(dims {T,E,TOPK,N,K}, args {x, W, experts(int32)[T*TOPK], y}, params {}).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef VW
#define VW 16
#endif
#ifndef MR
#define MR 1
#endif
#ifndef NB
#define NB 256
#endif
#ifndef KU
#define KU 4
#endif
#ifndef NT
#define NT 1
#endif
#ifndef WBF16
#define WBF16 0
#endif
static_assert(NB % VW == 0, "NB must be whole vectors");
typedef float Vec __attribute__((vector_size(VW * 4)));
typedef float UVec __attribute__((vector_size(VW * 4), aligned(4), may_alias));
typedef uint16_t HVec __attribute__((vector_size(VW * 2), aligned(2), may_alias));
typedef uint32_t IVec __attribute__((vector_size(VW * 4)));
#if WBF16
typedef uint16_t WT;
inline Vec LoadW(const WT* p) {
  IVec wide = __builtin_convertvector(*reinterpret_cast<const HVec*>(p), IVec) << 16;
  return reinterpret_cast<Vec&>(wide);
}
inline float LoadW1(const WT* p) {
  uint32_t bits = (uint32_t)*p << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
#else
typedef float WT;
inline Vec LoadW(const WT* p) { return *reinterpret_cast<const UVec*>(p); }
inline float LoadW1(const WT* p) { return *p; }
#endif

extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  const long T = d[0], E = d[1], TOPK = d[2], N = d[3], K = d[4], R = T * TOPK;
  const float* x = (const float*)args[0];
  const WT* W = (const WT*)args[1];
  const int32_t* ex = (const int32_t*)args[2];
  float* y = (float*)args[3];
  // Counting sort of the rows by expert, then groups of up to MR rows of one expert.
  long* order = (long*)malloc(sizeof(long) * (3 * R + 2 * E + 4));
  long* start = order + R;  // E+1 entries
  memset(start, 0, sizeof(long) * (E + 1));
  for (long r = 0; r < R; ++r) start[ex[r] + 1]++;
  for (long e = 0; e < E; ++e) start[e + 1] += start[e];
  long* fill = start + E + 1;
  memcpy(fill, start, sizeof(long) * E);
  for (long r = 0; r < R; ++r) order[fill[ex[r]]++] = r;
  long* groups = fill + E;  // (first index into order, count), at most R groups
  long ng = 0;
  for (long e = 0; e < E; ++e)
    for (long i = start[e]; i < start[e + 1]; i += MR) {
      groups[2 * ng] = i;
      groups[2 * ng + 1] = start[e + 1] - i < MR ? start[e + 1] - i : MR;
      ++ng;
    }
  const long blocks = (N + NB - 1) / NB, items = ng * blocks;
  kiln_rt::ParallelFor(items, NT, [&](long it) {
    const long g = it / blocks, j0 = it % blocks * NB, nb = N - j0 < NB ? N - j0 : NB;
    const long nbv = nb / VW * VW, first = groups[2 * g], mr = groups[2 * g + 1];
    const long* rows = order + first;
    const WT* We = W + (long)ex[rows[0]] * K * N;
    float acc[MR * NB] __attribute__((aligned(64)));
    memset(acc, 0, sizeof(float) * MR * NB);
    long k = 0;
    for (; k + KU <= K; k += KU) {
      const WT* w0 = We + k * N + j0;
      for (long v = 0; v < nbv / VW; ++v) {
        Vec b[KU];
#pragma GCC unroll 8
        for (int u = 0; u < KU; ++u) b[u] = LoadW(w0 + (long)u * N + v * VW);
        for (long i = 0; i < mr; ++i) {
          const float* a = x + rows[i] * K + k;
          Vec s = *reinterpret_cast<UVec*>(acc + i * NB + v * VW);
#pragma GCC unroll 8
          for (int u = 0; u < KU; ++u) s += a[u] * b[u];
          *reinterpret_cast<UVec*>(acc + i * NB + v * VW) = s;
        }
      }
    }
    for (; k < K; ++k)
      for (long v = 0; v < nbv / VW; ++v) {
        Vec b = LoadW(We + k * N + j0 + v * VW);
        for (long i = 0; i < mr; ++i) {
          Vec s = *reinterpret_cast<UVec*>(acc + i * NB + v * VW);
          s += x[rows[i] * K + k] * b;
          *reinterpret_cast<UVec*>(acc + i * NB + v * VW) = s;
        }
      }
    for (long i = 0; i < mr; ++i)
      for (long j = nbv; j < nb; ++j) {
        float s = 0;
        for (long kk = 0; kk < K; ++kk) s += x[rows[i] * K + kk] * LoadW1(We + kk * N + j0 + j);
        acc[i * NB + j] = s;
      }
    for (long i = 0; i < mr; ++i) memcpy(y + rows[i] * N + j0, acc + i * NB, sizeof(float) * nb);
  });
  free(order);
}
