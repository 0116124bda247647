// Kiln CPU GEMM template: C = A*B for row-major fp32 (A is MxK, B is KxN, C is MxN), any shape.
//
// A BLIS-style blocked GEMM whose tunables are compile-time macros (-D defines). Knobs:
//   MR, NR      register tile: MR rows x NR columns of C held in MR*NR/VW vector accumulators
//   MC, KC, NC  cache blocking: C is split into MC x NC tiles (the unit of parallel work);
//               K is walked in KC-deep slices
//   PACK        1: copy each A block / B panel into contiguous, zero-padded micro-panels;
//               0: read A and B in place (only ragged edge tiles are copied)
//   UNROLL      unroll factor of the k loop inside the micro-kernel (1, 2, 4, 8)
//   LOOP_ORDER  0: tiles N-block-major, micro-kernels column panel outer (jr, then ir);
//               1: tiles M-block-major, micro-kernels row panel outer (ir, then jr)
//   NT          threads (kiln_rt::ParallelFor, parallel.h); the MC x NC tiles of C are shared
//               among them, so a small M still uses every core when N is split into NC blocks
//   PREPACK     1: the weights B are packed once, ahead of time, into NR-column panels
//               (kiln_gemm_prepack), as constant inference weights are; kiln_gemm then takes
//               the packed buffer in place of B and streams it contiguously. PACK then only
//               decides whether A is packed.
//   PF          with PREPACK, how many bytes ahead of the micro-kernel's loads the packed weights
//               are prefetched (0: none). The packed stream is contiguous, but a core busy with
//               FMAs issues its loads too late for the hardware prefetcher alone: at M=8 (N=K=4096,
//               both cores) 1 KiB ahead took the kernel from 36 to 47 GB/s; on an EPYC VM with
//               AVX-512, 4-8 KiB ahead gained another 5-15% at M=2-8.
//   PFN         with PREPACK and LOOP_ORDER 0, prefetch (into L2) the packed micro-panel PFN
//               ahead in the tile's visiting order instead of PF bytes ahead within the current
//               one: its rows are shared out among the passes of the row panels over the current
//               micro-panel and spread over each pass's k loop, so the weight stream keeps
//               flowing while the second and later row panels reread the current one from cache.
//               At M=16 (two 8-row panels, N=K=4096, both cores) it took the cold kernel from
//               3555 to 3096 us, at M=4 from 2467 to 2268; at M=1 it lost (2073 against 2249).
//   VW          fp32 lanes per SIMD register (16 AVX-512, 8 AVX2); NR is a multiple of it
//   EPI         when defined, a fused epilogue (kiln_rt::Epilogue: 0 none, 1 + bias[N], 2 silu,
//               3 gelu, 4 + R[M,N]), applied to each MC x NC tile once its last K slice is in,
//               while the tile is in cache; the kernel then exports the operators' ABI instead:
//               kiln_op(dims {M,N,K}, args {A, B or packed B, bias, R, C}, params {}) and, with
//               PREPACK, kiln_op_prepack_bytes / kiln_op_prepack.
// Compile: c++ -O3 -march=native -fopenmp -shared -fPIC -include parallel.h -DMR=8 ... gemm.cc
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef VW
#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
#endif
#ifndef MR
#define MR 6
#endif
#ifndef NR
#define NR (2 * VW)
#endif
#ifndef MC
#define MC 96
#endif
#ifndef KC
#define KC 256
#endif
#ifndef NC
#define NC 1024
#endif
#ifndef PACK
#define PACK 1
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef LOOP_ORDER
#define LOOP_ORDER 0
#endif
#ifndef NT
#define NT 1
#endif
#ifndef PREPACK
#define PREPACK 0
#endif
#ifndef PF
#define PF 0
#endif
#ifndef PFN
#define PFN 0
#endif
#ifdef EPI
#define KILN_OP_ABI 1
#else
#define EPI 0
#define KILN_OP_ABI 0
#endif
static_assert(EPI >= 0 && EPI <= 4, "EPI must be 0..4");
static_assert(PFN >= 0 && (PFN == 0 || (PREPACK && LOOP_ORDER == 0)),
              "PFN > 0 needs PREPACK=1 and LOOP_ORDER=0");
// Not a knob: how many rows ahead PackB prefetches B (0 = off). Short row runs defeat the
// hardware prefetcher; 4 rows ahead recovers ~15% of streaming bandwidth at small M.
#ifndef PREFETCH_ROWS
#define PREFETCH_ROWS 4
#endif

static_assert(NR % VW == 0, "NR must be a whole number of SIMD vectors (NR % VW == 0)");
static_assert(MR >= 1 && MC >= 1 && KC >= 1 && NC >= 1 && NT >= 1, "block sizes must be >= 1");
static_assert(UNROLL >= 1 && UNROLL <= 8, "UNROLL must be in 1..8");
static_assert(PF >= 0 && PF % 64 == 0, "PF must be a whole number of 64-byte lines");

namespace {

typedef float Vec __attribute__((vector_size(VW * 4)));
// Same vector, but allowed at any float address and aliasing float.
typedef float UVec __attribute__((vector_size(VW * 4), aligned(4), may_alias));

constexpr int kNV = NR / VW;             // vectors per register-tile row
constexpr long kPanelA = (long)MR * KC;  // floats in one packed A micro-panel
constexpr long kPanelB = (long)NR * KC;  // floats in one packed B micro-panel

inline Vec Load(const float* p) { return *reinterpret_cast<const UVec*>(p); }
inline void Store(float* p, Vec v) { *reinterpret_cast<UVec*>(p) = v; }

// A per-thread, 64-byte aligned scratch buffer that only grows.
struct Scratch {
  float* data = nullptr;
  size_t floats = 0;
  ~Scratch() { free(data); }
  float* Get(size_t n) {
    if (n > floats) {
      free(data);
      data = static_cast<float*>(aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64));
      floats = n;
    }
    return data;
  }
};
thread_local Scratch tls_a, tls_b;

// Packs rows [0, mc) x cols [0, kc) of A (leading dimension lda) into MR-row micro-panels:
// element (i, k) of panel p lands at dst[p*MR*kc + k*MR + i]; rows past mc are zero.
// VW columns at a time, transposed in registers: output vector o of a column block takes its
// lanes from rows (i, i+1) by one two-source shuffle per row pair and a select (kPackA holds the
// shuffle indices and each lane's row, fixed by MR and VW), while the next micro-panel's rows are
// prefetched a line at a time. Against the scalar element-by-element copy, on a Zen 5 VM at
// M=128, N=1024, K=4096 (both cores, cold): 3125 -> 2934 us, where skipping the packing
// altogether (wrong results) gave 2790 us; at M=128, N=4096, K=14336 45.8 -> 43.3 ms.
typedef int IVec __attribute__((vector_size(VW * 4)));
struct alignas(64) PackATable {
  int idx[MR][(MR + 1) / 2][VW];  // [output vector][row pair][lane]: source lane (+VW: 2nd row)
  int row[MR][VW];                // [output vector][lane]: the row the lane comes from
};
constexpr PackATable MakePackATable() {
  PackATable t{};
  for (int o = 0; o < MR; ++o)
    for (int l = 0; l < VW; ++l) {
      const int e = o * VW + l, i = e % MR;
      t.row[o][l] = i;
      for (int pr = 0; pr < (MR + 1) / 2; ++pr)
        t.idx[o][pr][l] = e / MR + (i == 2 * pr + 1 ? VW : 0);
    }
  return t;
}
constexpr PackATable kPackA = MakePackATable();

void PackA(const float* a, long lda, int mc, int kc, float* dst) {
  for (int p = 0; p < mc; p += MR) {
    const int rows = mc - p < MR ? mc - p : MR;
    const int next = mc - p - MR < 0 ? 0 : mc - p - MR < MR ? mc - p - MR : MR;
    int k = 0;
#ifndef __clang__  // __builtin_shuffle with a variable index is GCC's
    for (; k + VW <= kc; k += VW) {
      Vec r[MR + 1];
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) r[i] = i < rows ? Load(a + (long)(p + i) * lda + k) : Vec{};
      r[MR] = Vec{};
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
        if (i < next) __builtin_prefetch(a + (long)(p + MR + i) * lda + k, 0, 3);
#pragma GCC unroll 16
      for (int o = 0; o < MR; ++o) {
        const IVec row = *reinterpret_cast<const IVec*>(kPackA.row[o]);
        Vec out = Vec{};
#pragma GCC unroll 16
        for (int pr = 0; pr < (MR + 1) / 2; ++pr) {
          const IVec idx = *reinterpret_cast<const IVec*>(kPackA.idx[o][pr]);
          const Vec t = __builtin_shuffle(r[2 * pr], r[2 * pr + 1], idx);
          out = (row == 2 * pr) | (row == 2 * pr + 1) ? t : out;
        }
        Store(dst + (long)k * MR + o * VW, out);
      }
    }
#else
    (void)next;
#endif
    for (; k < kc; ++k) {  // the last kc % VW columns (all of them with clang)
      for (int i = 0; i < rows; ++i) dst[k * MR + i] = a[(p + i) * lda + k];
      for (int i = rows; i < MR; ++i) dst[k * MR + i] = 0.0f;
    }
    dst += (long)MR * kc;
  }
}

// Packs rows [0, kc) x cols [0, nc) of B (leading dimension ldb) into NR-column micro-panels:
// element (k, j) of panel q lands at dst[q*NR*kc + k*NR + j]; columns past nc are zero.
// Rows are read front to back so that B streams from memory in long contiguous runs.
void PackB(const float* b, long ldb, int kc, int nc, float* dst) {
  for (int k = 0; k < kc; ++k) {
    const float* row = b + k * ldb;
    float* out = dst + (long)k * NR;
    if (PREFETCH_ROWS > 0 && k + PREFETCH_ROWS < kc)
      for (int j = 0; j < nc; j += 16)  // one 64-byte line per prefetch
        __builtin_prefetch(row + PREFETCH_ROWS * ldb + j, 0, 3);
    int q = 0;
    for (; q + NR <= nc; q += NR, out += (long)NR * kc)
      for (int v = 0; v < kNV; ++v) Store(out + v * VW, Load(row + q + v * VW));
    if (q < nc) {
      for (int j = 0; j < NR; ++j) out[j] = q + j < nc ? row[q + j] : 0.0f;
    }
  }
}

// The register tile: acc(MR x NR) = sum over k < kc of a(i, k) * b(k, :), where
// a(i, k) = a[i*a_rs + k*a_cs] and b(k, :) = b[k*b_rs ...]. Then writes the top-left mr x nr
// corner of acc to C (overwrite on the first K slice, accumulate afterwards).
inline void MicroKernel(int kc, const float* __restrict a, long a_rs, long a_cs,
                        const float* __restrict b, long b_rs, float* c, long ldc, int mr, int nr,
                        bool overwrite, const char* pp = nullptr, const char* pe = nullptr) {
  Vec acc[MR][kNV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
    for (int v = 0; v < kNV; ++v) acc[i][v] = Vec{};

  // One rank-1 update: NR/VW vector loads of B, MR broadcasts of A, MR*NR/VW FMAs.
  auto step = [&](long k) __attribute__((always_inline)) {
    Vec bv[kNV];
#pragma GCC unroll 16
    for (int v = 0; v < kNV; ++v) bv[v] = Load(b + k * b_rs + v * VW);
#if PREPACK && PF > 0 && PFN == 0
#pragma GCC unroll 16
    for (int j = 0; j < NR; j += 16) __builtin_prefetch(b + k * b_rs + PF / 4 + j, 0, 3);
#endif
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const float ai = a[i * a_rs + k * a_cs];
#pragma GCC unroll 16
      for (int v = 0; v < kNV; ++v) acc[i][v] += ai * bv[v];
    }
  };
  int k = 0;
  // With PFN, this pass's share of the micro-panel PFN ahead ([pp, pe)), spread over its k loop:
  // `per` bytes every UNROLL steps, into L2 (locality 2). Without, `per` is 0 at compile time.
  const long per = PFN > 0 && pp < pe ? ((pe - pp) * UNROLL / kc + 63) / 64 * 64 : 0;
  for (; k + UNROLL <= kc; k += UNROLL) {
    for (long x = 0; x < per && pp < pe; x += 64, pp += 64) __builtin_prefetch(pp, 0, 2);
#pragma GCC unroll 8
    for (int u = 0; u < UNROLL; ++u) step(k + u);
  }
  for (; k < kc; ++k) step(k);

  if (mr == MR && nr == NR) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 16
      for (int v = 0; v < kNV; ++v) {
        float* p = c + i * ldc + v * VW;
        Store(p, overwrite ? acc[i][v] : Load(p) + acc[i][v]);
      }
    return;
  }
  float tile[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < kNV; ++v) Store(&tile[i][v * VW], acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j)
      c[i * ldc + j] = overwrite ? tile[i][j] : c[i * ldc + j] + tile[i][j];
}

// The epilogue on the finished mc x nc tile of C at (ic, jc).
void TileEpilogue(int N, float* C, int ic, int jc, int mc, int nc, const float* bias,
                  const float* R) {
  (void)bias, (void)R;
  if (EPI == 0) return;
  for (int i = ic; i < ic + mc; ++i) {
    float* c = C + (long)i * N;
    for (int j = jc; j < jc + nc; ++j) c[j] = kiln_rt::Epilogue<EPI>(c[j], i, j, N, bias, R);
  }
}

// Computes the mc x nc tile of C at (ic, jc), walking K in KC slices, then its epilogue.
void Tile(int N, int K, const float* A, const float* B, float* C, int ic, int jc, int mc, int nc,
          const float* bias = nullptr, const float* R = nullptr) {
  const int panels_a = (mc + MR - 1) / MR, panels_b = (nc + NR - 1) / NR;
#if PREPACK
  float* ap = tls_a.Get(PACK ? (size_t)panels_a * kPanelA : kPanelA);
  float* bp = nullptr;
  (void)panels_b;
#elif PACK
  float* ap = tls_a.Get((size_t)panels_a * kPanelA);
  float* bp = tls_b.Get((size_t)panels_b * kPanelB);
#else
  float* ap = tls_a.Get(kPanelA);  // edge tiles only
  float* bp = tls_b.Get(kPanelB);
#endif
  for (int pc = 0; pc < K; pc += KC) {
    const int kc = K - pc < KC ? K - pc : KC;
    const bool overwrite = pc == 0;
#if PREPACK
#if PACK
    PackA(A + (long)ic * K + pc, K, mc, kc, ap);
#endif
#elif PACK
    PackA(A + (long)ic * K + pc, K, mc, kc, ap);
    PackB(B + (long)pc * N + jc, N, kc, nc, bp);
#endif
    auto run = [&](int pa, int pb) {
      const int ir = pa * MR, jr = pb * NR;
      const int mr = mc - ir < MR ? mc - ir : MR, nr = nc - jr < NR ? nc - jr : NR;
      float* c = C + (long)(ic + ir) * N + jc + jr;
#if PREPACK
      // B is packed ahead of time: panel (jc + jr) / NR holds all K rows, NR floats each.
      const float* b = B + (long)((jc + jr) / NR) * K * NR + (long)pc * NR;
      const char *pp = nullptr, *pe = nullptr;
#if PFN > 0
      {  // the micro-panel PFN ahead in this tile's order (wrapping to the next K slice), its
         // rows shared out among the passes of the row panels over the current one
        long t = pb + PFN, pc2 = pc;
        if (t >= panels_b) t -= panels_b, pc2 += KC;
        if (t < panels_b && pc2 < K) {
          const long kc2 = K - pc2 < KC ? K - pc2 : KC;
          const float* nb = B + (jc / NR + t) * K * NR + pc2 * NR;
          pp = (const char*)(nb + kc2 * NR * pa / panels_a);
          pe = (const char*)(nb + kc2 * NR * (pa + 1) / panels_a);
        }
      }
#endif
#if PACK
      MicroKernel(kc, ap + pa * (long)MR * kc, 1, MR, b, NR, c, N, mr, nr, overwrite, pp, pe);
#else
      const float* a = A + (long)(ic + ir) * K + pc;
      if (mr == MR) {
        MicroKernel(kc, a, K, 1, b, NR, c, N, mr, nr, overwrite, pp, pe);
      } else {  // ragged edge: copy the partial A micro-panel so nothing is read out of bounds
        PackA(a, K, mr, kc, ap);
        MicroKernel(kc, ap, 1, MR, b, NR, c, N, mr, nr, overwrite, pp, pe);
      }
#endif
#elif PACK
      MicroKernel(kc, ap + pa * (long)MR * kc, 1, MR, bp + pb * (long)NR * kc, NR, c, N, mr, nr,
                  overwrite);
#else
      const float* a = A + (long)(ic + ir) * K + pc;
      const float* b = B + (long)pc * N + jc + jr;
      if (mr == MR && nr == NR) {
        MicroKernel(kc, a, K, 1, b, N, c, N, mr, nr, overwrite);
      } else {  // ragged edge: copy the partial micro-panels so nothing is read out of bounds
        PackA(a, K, mr, kc, ap);
        PackB(b, N, kc, nr, bp);
        MicroKernel(kc, ap, 1, MR, bp, NR, c, N, mr, nr, overwrite);
      }
#endif
    };
#if LOOP_ORDER == 0
    for (int pb = 0; pb < panels_b; ++pb)
      for (int pa = 0; pa < panels_a; ++pa) run(pa, pb);
#else
    for (int pa = 0; pa < panels_a; ++pa)
      for (int pb = 0; pb < panels_b; ++pb) run(pa, pb);
#endif
  }
  TileEpilogue(N, C, ic, jc, mc, nc, bias, R);
}

// C = A*B (then the epilogue) over all MC x NC tiles, shared among NT threads.
void Gemm(int M, int N, int K, const float* A, const float* B, float* C, const float* bias,
          const float* R) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    memset(C, 0, sizeof(float) * (size_t)M * N);
    TileEpilogue(N, C, 0, 0, M, N, bias, R);
    return;
  }
  const long mt = (M + MC - 1) / MC, nt = (N + NC - 1) / NC, tiles = mt * nt;
  kiln_rt::ParallelFor(tiles, NT, [&](long t) {
#if LOOP_ORDER == 0
    const long it = t % mt, jt = t / mt;  // N blocks outer: tiles sharing a B panel adjoin
#else
    const long it = t / nt, jt = t % nt;  // M blocks outer: tiles sharing an A block adjoin
#endif
    const int ic = (int)(it * MC), jc = (int)(jt * NC);
    Tile(N, K, A, B, C, ic, jc, M - ic < MC ? M - ic : MC, N - jc < NC ? N - jc : NC, bias, R);
  });
}

#if PREPACK
// Size in floats of the packed weights: ceil(N/NR) panels of K x NR, zero-padded past N.
long PrepackFloats(int N, int K) { return (long)((N + NR - 1) / NR) * NR * K; }

// Packs B (K x N, row-major) into NR-column panels: packed[q*K*NR + k*NR + j] = B[k][q*NR + j].
void Prepack(int N, int K, const float* B, float* packed) {
  const long panels = (N + NR - 1) / NR;
  kiln_rt::ParallelFor(panels, NT, [&](long q) {
    float* dst = packed + q * K * NR;
    const int cols = N - q * NR < NR ? (int)(N - q * NR) : NR;
    for (int k = 0; k < K; ++k) {
      const float* row = B + (long)k * N + q * NR;
      if (cols == NR) {
        for (int v = 0; v < kNV; ++v) Store(dst + (long)k * NR + v * VW, Load(row + v * VW));
      } else {
        for (int j = 0; j < NR; ++j) dst[(long)k * NR + j] = j < cols ? row[j] : 0.0f;
      }
    }
  });
}
#endif

}  // namespace

#if KILN_OP_ABI
// With PREPACK, B (args[1]) is the buffer kiln_op_prepack filled.
extern "C" void kiln_op(const long long* d, void* const* args, const float* params) {
  (void)params;
  Gemm((int)d[0], (int)d[1], (int)d[2], (const float*)args[0], (const float*)args[1],
       (float*)args[4], (const float*)args[2], (const float*)args[3]);
}
#if PREPACK
extern "C" long kiln_op_prepack_bytes(const long long* d) {
  return PrepackFloats((int)d[1], (int)d[2]) * 4;
}
extern "C" void kiln_op_prepack(const long long* d, const void* src, void* dst) {
  Prepack((int)d[1], (int)d[2], (const float*)src, (float*)dst);
}
#endif
#else
#if PREPACK
extern "C" long kiln_gemm_prepack_floats(int N, int K) { return PrepackFloats(N, K); }
extern "C" void kiln_gemm_prepack(int N, int K, const float* B, float* packed) {
  Prepack(N, K, B, packed);
}
#endif

// With PREPACK, B is the buffer kiln_gemm_prepack filled.
extern "C" void kiln_gemm(int M, int N, int K, const float* A, const float* B, float* C) {
  Gemm(M, N, K, A, B, C, nullptr, nullptr);
}
#endif
