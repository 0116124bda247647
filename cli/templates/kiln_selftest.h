// kiln_selftest.h: the references and checks of kiln_kernels_selftest, written by `kiln export`
// next to the kernels (cli/templates/kiln_selftest.h in Kiln). Plain C++17, no dependencies.
//
// Each Test* function fills the operator's inputs with pseudo-random values (uniform in [-1, 1),
// positions in [0, 4096), distinct experts per token, negative A for the scan), poisons its
// outputs with NaN (so an element the kernel never writes fails), calls the kernel through
// `call` and compares every output with a double-precision reference, with the tolerances Kiln's
// verification harness applies when it tunes (hardware/cpu/op_cases.cc, gemm_reference.h):
//   GEMMs: |c - ref| <= 1e-4 * sum_k |a*b| (+ |bias| or |residual|) + 1e-6 (1e-2 with bf16
//          weights); rows sampled above 2^30 multiply-adds, as the harness does
//   rmsnorm, softmax, swiglu, conv1d: |got - ref| <= 2e-5 * |ref| + 1e-6
//   rope, attention, scan: |got - ref| <= 1e-4 * |ref| + 1e-5
#ifndef KILN_SELFTEST_H_
#define KILN_SELFTEST_H_

#include <stdint.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace kiln_selftest {

struct Result {
  bool ok = true;
  std::string message;  // the first wrong element, the count and the tolerance
};

// Uniform in [-1, 1): 24 random bits per element (splitmix64), exactly representable in fp32.
inline std::vector<float> Uniform(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    v[i] = static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  }
  return v;
}

inline std::vector<float> NaNs(size_t n) { return std::vector<float>(n, NAN); }

inline uint32_t Lcg(uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<uint32_t>(s >> 33);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = FloatToBf16(v[i]);
  return h;
}

inline double Silu(double x) { return x / (1 + std::exp(-x)); }

// |got - ref| <= rtol * scale + atol for every element (scale: mag[i] or |ref[i]|), all finite.
// `index` maps the i-th compared element to its index in the output (for sampled rows).
inline Result Compare(const char* what, const float* got, const double* ref, size_t n, double rtol,
                      double atol, const double* mag = nullptr, const size_t* index = nullptr) {
  Result r;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = got[index ? index[i] : i];
    const double scale = mag ? mag[i] : std::fabs(ref[i]);
    if (!(std::fabs(g - ref[i]) <= rtol * scale + atol) && bad++ == 0) first = i;
  }
  if (bad == 0) return r;
  char buf[320];
  const size_t at = index ? index[first] : first;
  std::snprintf(buf, sizeof buf, "%s[%zu] = %g, want %.9g%s; %zu of %zu outside rtol %g atol %g",
                what, at, static_cast<double>(got[at]), ref[first],
                std::isnan(got[at]) ? " (NaN: never written?)" : "", bad, n, rtol, atol);
  r.ok = false;
  r.message = buf;
  return r;
}

inline Result Both(const Result& a, const Result& b) { return a.ok ? b : a; }

constexpr double kGemmRtol = 1e-4, kBf16Rtol = 1e-2;
constexpr double kElemRtol = 2e-5, kElemAtol = 1e-6;
constexpr double kAttnRtol = 1e-4, kAttnAtol = 1e-5;

// The rows of an M-row GEMM compared with the reference: all of them up to 2^30 multiply-adds,
// otherwise an even spread (first and last included) of what that budget allows, at least 16.
inline std::vector<long> GemmRows(long M, long N, long K) {
  const double budget = double{1 << 30} / (double(N) * double(K));
  const long count = std::max<long>(16, static_cast<long>(budget));
  std::vector<long> rows;
  if (count >= M) {
    for (long i = 0; i < M; ++i) rows.push_back(i);
    return rows;
  }
  for (long t = 0; t < count; ++t) rows.push_back(t * (M - 1) / (count - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

// epilogue: 0 none, 1 bias, 2 silu, 3 gelu (tanh form), 4 residual. B is fp32 (b32) or bf16.
inline Result CheckGemm(long M, long N, long K, const float* A, const float* b32,
                        const uint16_t* b16, const float* bias, const float* R, int epilogue,
                        const float* C, double rtol) {
  const std::vector<long> rows = GemmRows(M, N, K);
  std::vector<double> ref(rows.size() * N), mag(ref.size()), row(N), g(N);
  std::vector<size_t> index(ref.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const long i = rows[r];
    std::fill(row.begin(), row.end(), 0.0);
    std::fill(g.begin(), g.end(), 0.0);
    for (long k = 0; k < K; ++k) {
      const double a = A[i * K + k];
      for (long j = 0; j < N; ++j) {
        const double b = b32 ? b32[k * N + j] : Bf16ToFloat(b16[k * N + j]);
        row[j] += a * b;
        g[j] += std::fabs(a * b);
      }
    }
    for (long j = 0; j < N; ++j) {
      double x = row[j], m = g[j];
      if (epilogue == 1) x += bias[j], m += std::fabs(bias[j]);
      if (epilogue == 2) x = Silu(x);
      if (epilogue == 3)
        x = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      if (epilogue == 4) x += R[i * N + j], m += std::fabs(R[i * N + j]);
      ref[r * N + j] = x;
      mag[r * N + j] = m;
      index[r * N + j] = static_cast<size_t>(i * N + j);
    }
  }
  for (long e = 0; e < M * N; ++e)
    if (!std::isfinite(C[e])) {
      Result bad;
      bad.ok = false;
      bad.message = "C[" + std::to_string(e) + "] is not finite (never written?)";
      return bad;
    }
  return Compare("C", C, ref.data(), ref.size(), rtol, 1e-6, mag.data(), index.data());
}

// Plain GEMM, C[M,N] = A[M,K] * B[K,N]: call(A, B, C) with B fp32 row-major.
template <typename Call>
Result TestGemm(long M, long N, long K, Call call) {
  const std::vector<float> A = Uniform(M * K, 1), B = Uniform(K * N, 2);
  std::vector<float> C = NaNs(M * N);
  call(A.data(), static_cast<const void*>(B.data()), C.data());
  return CheckGemm(M, N, K, A.data(), B.data(), nullptr, nullptr, nullptr, 0, C.data(), kGemmRtol);
}

// GEMM with an epilogue: call(A, B, bias, R, C); B is fp32 or (bf16) uint16_t, passed as void*.
template <typename Call>
Result TestGemmEpilogue(long M, long N, long K, int epilogue, bool bf16, Call call) {
  const std::vector<float> A = Uniform(M * K, 1), B = Uniform(K * N, 2), bias = Uniform(N, 3),
                           R = Uniform(M * N, 4);
  const std::vector<uint16_t> Bh = bf16 ? ToBf16(B) : std::vector<uint16_t>();
  std::vector<float> C = NaNs(M * N);
  call(A.data(), bf16 ? static_cast<const void*>(Bh.data()) : static_cast<const void*>(B.data()),
       bias.data(), R.data(), C.data());
  return CheckGemm(M, N, K, A.data(), bf16 ? nullptr : B.data(), bf16 ? Bh.data() : nullptr,
                   bias.data(), R.data(), epilogue, C.data(), bf16 ? kBf16Rtol : kGemmRtol);
}

// call(x, w, out, res, eps); with `residual`, res += x in place and then res is normalised.
template <typename Call>
Result TestRmsnorm(long T, long D, bool residual, Call call) {
  const float eps = 1e-5f;
  const std::vector<float> x = Uniform(T * D, 1), w = Uniform(D, 2), res0 = Uniform(T * D, 3);
  std::vector<float> out = NaNs(T * D), res = res0;
  call(x.data(), w.data(), out.data(), res.data(), eps);
  std::vector<double> h(T * D), ref(T * D);
  for (long i = 0; i < T * D; ++i) h[i] = residual ? double(float(x[i] + res0[i])) : x[i];
  for (long t = 0; t < T; ++t) {
    double ss = 0;
    for (long i = 0; i < D; ++i) ss += h[t * D + i] * h[t * D + i];
    const double s = 1 / std::sqrt(ss / D + eps);
    for (long i = 0; i < D; ++i) ref[t * D + i] = h[t * D + i] * s * w[i];
  }
  const Result a = Compare("out", out.data(), ref.data(), ref.size(), kElemRtol, kElemAtol);
  return residual ? Both(a, Compare("res", res.data(), h.data(), h.size(), 1e-7, 0)) : a;
}

// call(x, pos, theta): rotates x[T,H,D] in place (HuggingFace rotate_half).
template <typename Call>
Result TestRope(long T, long H, long D, Call call) {
  const float theta = 10000.0f;
  const std::vector<float> x0 = Uniform(T * H * D, 1);
  std::vector<float> x = x0;
  std::vector<int32_t> pos(T);
  uint64_t s = 7;
  for (auto& p : pos) p = static_cast<int32_t>(Lcg(s) % 4096);
  call(x.data(), pos.data(), theta);
  std::vector<double> ref(x.size());
  const long half = D / 2;
  for (long t = 0; t < T; ++t)
    for (long h = 0; h < H; ++h)
      for (long i = 0; i < half; ++i) {
        const double a = pos[t] * std::pow(double(theta), -2.0 * i / D);
        const size_t o = (t * H + h) * D;
        const double a0 = x0[o + i], a1 = x0[o + i + half];
        ref[o + i] = a0 * std::cos(a) - a1 * std::sin(a);
        ref[o + i + half] = a1 * std::cos(a) + a0 * std::sin(a);
      }
  return Compare("x", x.data(), ref.data(), ref.size(), kAttnRtol, kAttnAtol);
}

// call(q, k, v, out, scale): q[B,H,D], k and v [B,KVH,L,D], out[B,H,D].
template <typename Call>
Result TestAttentionDecode(long B, long H, long KVH, long D, long L, Call call) {
  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<float> q = Uniform(B * H * D, 1), k = Uniform(B * KVH * L * D, 2),
                           v = Uniform(B * KVH * L * D, 3);
  std::vector<float> out = NaNs(B * H * D);
  call(q.data(), k.data(), v.data(), out.data(), scale);
  std::vector<double> ref(out.size()), p(L);
  const long G = H / KVH;
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h) {
      const float* qr = &q[(b * H + h) * D];
      const size_t kv = (b * KVH + h / G) * L * D;
      double m = -INFINITY, sum = 0;
      for (long l = 0; l < L; ++l) {
        double dot = 0;
        for (long e = 0; e < D; ++e) dot += double(qr[e]) * k[kv + l * D + e];
        p[l] = dot * scale;
        m = std::max(m, p[l]);
      }
      for (long l = 0; l < L; ++l) sum += (p[l] = std::exp(p[l] - m));
      double* o = &ref[(b * H + h) * D];
      for (long l = 0; l < L; ++l)
        for (long e = 0; e < D; ++e) o[e] += p[l] / sum * v[kv + l * D + e];
    }
  return Compare("out", out.data(), ref.data(), ref.size(), kAttnRtol, kAttnAtol);
}

// call(q, k, v, out, scale): causal; q and out [B,S,H,D], k and v [B,S,KVH,D].
template <typename Call>
Result TestAttentionPrefill(long B, long H, long KVH, long D, long S, Call call) {
  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<float> q = Uniform(B * S * H * D, 1), k = Uniform(B * S * KVH * D, 2),
                           v = Uniform(B * S * KVH * D, 3);
  std::vector<float> out = NaNs(B * S * H * D);
  call(q.data(), k.data(), v.data(), out.data(), scale);
  std::vector<double> ref(out.size()), p(S);
  const long G = H / KVH;
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h)
      for (long i = 0; i < S; ++i) {
        const float* qr = &q[((b * S + i) * H + h) * D];
        double m = -INFINITY, sum = 0;
        for (long j = 0; j <= i; ++j) {
          const float* kr = &k[((b * S + j) * KVH + h / G) * D];
          double dot = 0;
          for (long e = 0; e < D; ++e) dot += double(qr[e]) * kr[e];
          p[j] = dot * scale;
          m = std::max(m, p[j]);
        }
        for (long j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
        double* o = &ref[((b * S + i) * H + h) * D];
        for (long j = 0; j <= i; ++j) {
          const float* vr = &v[((b * S + j) * KVH + h / G) * D];
          for (long e = 0; e < D; ++e) o[e] += p[j] / sum * vr[e];
        }
      }
  return Compare("out", out.data(), ref.data(), ref.size(), kAttnRtol, kAttnAtol);
}

// call(x, out): row softmax of x[T,N].
template <typename Call>
Result TestSoftmax(long T, long N, Call call) {
  const std::vector<float> x = Uniform(T * N, 1);
  std::vector<float> out = NaNs(T * N);
  call(x.data(), out.data());
  std::vector<double> ref(out.size());
  for (long t = 0; t < T; ++t) {
    double m = -INFINITY, sum = 0;
    for (long i = 0; i < N; ++i) m = std::max(m, double(x[t * N + i]));
    for (long i = 0; i < N; ++i) sum += (ref[t * N + i] = std::exp(x[t * N + i] - m));
    for (long i = 0; i < N; ++i) ref[t * N + i] /= sum;
  }
  return Compare("out", out.data(), ref.data(), ref.size(), kElemRtol, kElemAtol);
}

// call(gate, up, out): out = silu(gate) * up over T*F elements.
template <typename Call>
Result TestSwiglu(long T, long F, Call call) {
  const std::vector<float> gate = Uniform(T * F, 1), up = Uniform(T * F, 2);
  std::vector<float> out = NaNs(T * F);
  call(gate.data(), up.data(), out.data());
  std::vector<double> ref(out.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = Silu(gate[i]) * up[i];
  return Compare("out", out.data(), ref.data(), ref.size(), kElemRtol, kElemAtol);
}

// call(x, W, weights, experts): x[T,D], W[D,E]; the TOPK experts of each token and their
// renormalised softmax weights. A near-tie (probabilities within 1e-5) may pick either expert.
template <typename Call>
Result TestMoeRouter(long T, long D, long E, long TOPK, Call call) {
  const std::vector<float> x = Uniform(T * D, 1), W = Uniform(D * E, 2);
  std::vector<float> weights = NaNs(T * TOPK);
  std::vector<int32_t> experts(T * TOPK, -1);
  call(x.data(), W.data(), weights.data(), experts.data());
  std::vector<double> wref(T * TOPK), probs(T * E);
  std::vector<int32_t> eref(T * TOPK);
  for (long t = 0; t < T; ++t) {
    double* pr = &probs[t * E];
    double m = -INFINITY, sum = 0;
    for (long e = 0; e < E; ++e) {
      double acc = 0;
      for (long i = 0; i < D; ++i) acc += double(x[t * D + i]) * W[i * E + e];
      m = std::max(m, pr[e] = acc);
    }
    for (long e = 0; e < E; ++e) sum += (pr[e] = std::exp(pr[e] - m));
    for (long e = 0; e < E; ++e) pr[e] /= sum;
    std::vector<int> idx(E);
    for (long e = 0; e < E; ++e) idx[e] = static_cast<int>(e);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return pr[a] > pr[b]; });
    double chosen = 0;
    for (long k = 0; k < TOPK; ++k) chosen += pr[idx[k]];
    for (long k = 0; k < TOPK; ++k) {
      eref[t * TOPK + k] = idx[k];
      wref[t * TOPK + k] = pr[idx[k]] / chosen;
    }
  }
  for (size_t i = 0; i < eref.size(); ++i) {
    const int32_t got = experts[i];
    const size_t t = i / TOPK;
    if (got != eref[i] &&
        !(got >= 0 && got < E && std::fabs(probs[t * E + got] - probs[t * E + eref[i]]) < 1e-5)) {
      Result bad;
      bad.ok = false;
      bad.message = "experts[" + std::to_string(i) + "] = " + std::to_string(got) + ", want " +
                    std::to_string(eref[i]);
      return bad;
    }
  }
  return Compare("weights", weights.data(), wref.data(), wref.size(), 1e-4, 1e-5);
}

// call(x, W, experts, y): y[r] = x[r] * W[experts[r]] for the T*TOPK rows; W[E,K,N] fp32 or
// (bf16) uint16_t, passed as void*.
template <typename Call>
Result TestMoeGemm(long T, long E, long TOPK, long N, long K, bool bf16, Call call) {
  const std::vector<float> x = Uniform(T * TOPK * K, 1), W = Uniform(E * K * N, 2);
  const std::vector<uint16_t> Wh = bf16 ? ToBf16(W) : std::vector<uint16_t>();
  std::vector<int32_t> experts(T * TOPK);
  uint64_t s = 11;
  for (long t = 0; t < T; ++t)
    for (long k = 0; k < TOPK; ++k) {
      int32_t e;
      bool dup;
      do {
        e = static_cast<int32_t>(Lcg(s) % E);
        dup = false;
        for (long j = 0; j < k; ++j) dup = dup || experts[t * TOPK + j] == e;
      } while (dup);
      experts[t * TOPK + k] = e;
    }
  std::vector<float> y = NaNs(T * TOPK * N);
  call(x.data(), bf16 ? static_cast<const void*>(Wh.data()) : static_cast<const void*>(W.data()),
       experts.data(), y.data());
  std::vector<double> ref(y.size()), mag(y.size());
  for (long r = 0; r < T * TOPK; ++r) {
    const size_t base = size_t(experts[r]) * K * N;
    for (long k = 0; k < K; ++k) {
      const double a = x[r * K + k];
      for (long j = 0; j < N; ++j) {
        const size_t e = base + k * N + j;
        const double b = bf16 ? Bf16ToFloat(Wh[e]) : W[e];
        ref[r * N + j] += a * b;
        mag[r * N + j] += std::fabs(a * b);
      }
    }
  }
  return Compare("y", y.data(), ref.data(), ref.size(), bf16 ? kBf16Rtol : kGemmRtol, 1e-6,
                 mag.data());
}

// call(u, delta, A, Bm, Cm, Dp, z, h, y, softplus): Mamba's selective scan, state h[B,D,S]
// carried in place.
template <typename Call>
Result TestSsmScan(long B, long T, long D, long S, Call call) {
  const std::vector<float> u = Uniform(B * T * D, 1), delta = Uniform(B * T * D, 2),
                           Bm = Uniform(B * T * S, 4), Cm = Uniform(B * T * S, 5),
                           Dp = Uniform(D, 6), z = Uniform(B * T * D, 7),
                           h0 = Uniform(B * D * S, 8);
  std::vector<float> A = Uniform(D * S, 3);
  for (auto& a : A) a = -std::fabs(a) - 1e-3f;
  std::vector<float> h = h0, y = NaNs(B * T * D);
  call(u.data(), delta.data(), A.data(), Bm.data(), Cm.data(), Dp.data(), z.data(), h.data(),
       y.data(), 1);
  std::vector<double> hr(h0.begin(), h0.end()), yr(y.size());
  for (long b = 0; b < B; ++b)
    for (long t = 0; t < T; ++t) {
      const size_t bt = b * T + t;
      for (long d = 0; d < D; ++d) {
        const double dv = delta[bt * D + d];
        const double dt = dv > 20 ? dv : std::log1p(std::exp(dv));
        const double uv = u[bt * D + d];
        double acc = 0;
        for (long s = 0; s < S; ++s) {
          double& hs = hr[(b * D + d) * S + s];
          hs = std::exp(dt * A[d * S + s]) * hs + dt * Bm[bt * S + s] * uv;
          acc += Cm[bt * S + s] * hs;
        }
        yr[bt * D + d] = (acc + Dp[d] * uv) * Silu(z[bt * D + d]);
      }
    }
  return Both(Compare("y", y.data(), yr.data(), yr.size(), kAttnRtol, kAttnAtol),
              Compare("h", h.data(), hr.data(), hr.size(), kAttnRtol, kAttnAtol));
}

// call(x, w, bias, state, out, silu): causal depthwise conv1d; state[B,W-1,D] carried in place.
template <typename Call>
Result TestConv1d(long B, long T, long D, long W, Call call) {
  const std::vector<float> x = Uniform(B * T * D, 1), w = Uniform(D * W, 2), bias = Uniform(D, 3),
                           st0 = Uniform(B * (W - 1) * D + 1, 4);
  std::vector<float> state = st0, out = NaNs(B * T * D);
  call(x.data(), w.data(), bias.data(), state.data(), out.data(), 1);
  std::vector<double> st(st0.begin(), st0.begin() + B * (W - 1) * D), ref(out.size());
  for (long b = 0; b < B; ++b) {
    double* sb = &st[b * (W - 1) * D];
    for (long t = 0; t < T; ++t) {
      const float* xt = &x[(b * T + t) * D];
      for (long d = 0; d < D; ++d) {
        double acc = bias[d];
        for (long j = 0; j < W - 1; ++j) acc += w[d * W + j] * sb[j * D + d];
        acc += w[d * W + W - 1] * xt[d];
        ref[(b * T + t) * D + d] = Silu(acc);
      }
      for (long j = 0; j + 1 < W - 1; ++j)
        for (long d = 0; d < D; ++d) sb[j * D + d] = sb[(j + 1) * D + d];
      if (W > 1)
        for (long d = 0; d < D; ++d) sb[(W - 2) * D + d] = xt[d];
    }
  }
  return Both(Compare("out", out.data(), ref.data(), ref.size(), kElemRtol, kElemAtol),
              Compare("state", state.data(), st.data(), st.size(), 0, 0));
}

// Prints one kernel's outcome; returns 1 for a failure.
inline int Report(const char* name, const Result& r) {
  std::printf("%-4s %s%s%s\n", r.ok ? "ok" : "FAIL", name, r.ok ? "" : ": ", r.message.c_str());
  return r.ok ? 0 : 1;
}

}  // namespace kiln_selftest

#endif  // KILN_SELFTEST_H_
