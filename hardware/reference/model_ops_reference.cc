#include "hardware/reference/model_ops_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kiln::hardware {
namespace {

double Silu(double x) { return x / (1 + std::exp(-x)); }

}  // namespace

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void WidenBf16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

void ReferenceGemmEpilogue(int M, int N, int K, const float* A, const float* b32,
                           const uint16_t* b16, const float* bias, const float* R,
                           const std::string& epilogue, double* out, double* mag) {
  std::vector<double> row(N), g(N);
  for (int i = 0; i < M; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    std::fill(g.begin(), g.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      const double a = A[static_cast<size_t>(i) * K + k];
      const size_t base = static_cast<size_t>(k) * N;
      for (int j = 0; j < N; ++j) {
        const double b = b32 ? b32[base + j] : Bf16ToFloat(b16[base + j]);
        row[j] += a * b;
        g[j] += std::fabs(a * b);
      }
    }
    for (int j = 0; j < N; ++j) {
      double x = row[j], m = g[j];
      if (epilogue == "bias") x += bias[j], m += std::fabs(bias[j]);
      if (epilogue == "silu") x = Silu(x);
      if (epilogue == "gelu")
        x = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      if (epilogue == "residual") {
        const double r = R[static_cast<size_t>(i) * N + j];
        x += r, m += std::fabs(r);
      }
      out[static_cast<size_t>(i) * N + j] = x;
      mag[static_cast<size_t>(i) * N + j] = m;
    }
  }
}

void ReferenceRope(int T, int H, int D, const float* x, const int32_t* pos, float theta,
                   double* out) {
  const int half = D / 2;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < half; ++i) {
        const double a = pos[t] * std::pow(static_cast<double>(theta), -2.0 * i / D);
        const size_t o = (static_cast<size_t>(t) * H + h) * D;
        const double x0 = x[o + i], x1 = x[o + i + half];
        out[o + i] = x0 * std::cos(a) - x1 * std::sin(a);
        out[o + i + half] = x1 * std::cos(a) + x0 * std::sin(a);
      }
}

void ReferenceAttentionPrefill(int B, int H, int KVH, int D, int S, const float* q, const float* k,
                               const float* v, float scale, double* out) {
  const int G = H / KVH;
  std::vector<double> p(S);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i) {
        const float* qr = q + ((static_cast<size_t>(b) * S + i) * H + h) * D;
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          const float* kr = k + ((static_cast<size_t>(b) * S + j) * KVH + h / G) * D;
          double dot = 0;
          for (int e = 0; e < D; ++e) dot += static_cast<double>(qr[e]) * kr[e];
          p[j] = dot * scale;
          m = std::max(m, p[j]);
        }
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
        double* o = out + ((static_cast<size_t>(b) * S + i) * H + h) * D;
        for (int e = 0; e < D; ++e) o[e] = 0;
        for (int j = 0; j <= i; ++j) {
          const float* vr = v + ((static_cast<size_t>(b) * S + j) * KVH + h / G) * D;
          for (int e = 0; e < D; ++e) o[e] += p[j] / sum * vr[e];
        }
      }
}

void ReferenceAttentionDecodeGqa(int B, int H, int KVH, int D, int L, const float* q,
                                 const float* k, const float* v, float scale, double* out) {
  const int G = H / KVH;
  std::vector<double> p(L);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float* qr = q + (static_cast<size_t>(b) * H + h) * D;
      const size_t kv = (static_cast<size_t>(b) * KVH + h / G) * L * D;
      double m = -INFINITY, sum = 0;
      for (int l = 0; l < L; ++l) {
        double dot = 0;
        for (int e = 0; e < D; ++e) dot += static_cast<double>(qr[e]) * k[kv + l * D + e];
        p[l] = dot * scale;
        m = std::max(m, p[l]);
      }
      for (int l = 0; l < L; ++l) sum += (p[l] = std::exp(p[l] - m));
      double* o = out + (static_cast<size_t>(b) * H + h) * D;
      for (int e = 0; e < D; ++e) o[e] = 0;
      for (int l = 0; l < L; ++l)
        for (int e = 0; e < D; ++e) o[e] += p[l] / sum * v[kv + l * D + e];
    }
}

void ReferenceMoeRouter(int T, int D, int E, int TOPK, const float* x, const float* W,
                        double* weights, int32_t* experts, double* probs) {
  for (int t = 0; t < T; ++t) {
    double* pr = probs + static_cast<size_t>(t) * E;
    double m = -INFINITY, sum = 0;
    for (int e = 0; e < E; ++e) {
      double acc = 0;
      for (int i = 0; i < D; ++i)
        acc += static_cast<double>(x[static_cast<size_t>(t) * D + i]) *
               W[static_cast<size_t>(i) * E + e];
      pr[e] = acc;
      m = std::max(m, acc);
    }
    for (int e = 0; e < E; ++e) sum += (pr[e] = std::exp(pr[e] - m));
    for (int e = 0; e < E; ++e) pr[e] /= sum;
    std::vector<int> idx(E);
    for (int e = 0; e < E; ++e) idx[e] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return pr[a] > pr[b]; });
    double chosen = 0;
    for (int k = 0; k < TOPK; ++k) chosen += pr[idx[k]];
    for (int k = 0; k < TOPK; ++k) {
      experts[static_cast<size_t>(t) * TOPK + k] = idx[k];
      weights[static_cast<size_t>(t) * TOPK + k] = pr[idx[k]] / chosen;
    }
  }
}

void ReferenceMoeGemm(int T, int E, int TOPK, int N, int K, const float* x, const float* w32,
                      const uint16_t* w16, const int32_t* experts, double* y, double* mag) {
  std::vector<double> row(N), g(N);
  for (int r = 0; r < T * TOPK; ++r) {
    const size_t base = static_cast<size_t>(experts[r]) * K * N;
    std::fill(row.begin(), row.end(), 0.0);
    std::fill(g.begin(), g.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      const double a = x[static_cast<size_t>(r) * K + k];
      for (int j = 0; j < N; ++j) {
        const size_t e = base + static_cast<size_t>(k) * N + j;
        const double b = w32 ? w32[e] : Bf16ToFloat(w16[e]);
        row[j] += a * b;
        g[j] += std::fabs(a * b);
      }
    }
    std::copy(row.begin(), row.end(), y + static_cast<size_t>(r) * N);
    std::copy(g.begin(), g.end(), mag + static_cast<size_t>(r) * N);
  }
}

void ReferenceSsmScan(int B, int T, int D, int S, const float* u, const float* delta,
                      const float* A, const float* Bm, const float* Cm, const float* Dp,
                      const float* z, bool softplus, double* h, double* y) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const size_t bt = static_cast<size_t>(b) * T + t;
      for (int d = 0; d < D; ++d) {
        const double dv = delta[bt * D + d];
        const double dt = softplus ? (dv > 20 ? dv : std::log1p(std::exp(dv))) : dv;
        const double uv = u[bt * D + d];
        double acc = 0;
        for (int s = 0; s < S; ++s) {
          double& hs = h[(static_cast<size_t>(b) * D + d) * S + s];
          hs = std::exp(dt * A[static_cast<size_t>(d) * S + s]) * hs + dt * Bm[bt * S + s] * uv;
          acc += Cm[bt * S + s] * hs;
        }
        y[bt * D + d] = (acc + Dp[d] * uv) * Silu(z[bt * D + d]);
      }
    }
}

void ReferenceConv1d(int B, int T, int D, int W, const float* x, const float* w, const float* bias,
                     bool silu, double* state, double* out) {
  for (int b = 0; b < B; ++b) {
    double* st = state + static_cast<size_t>(b) * (W - 1) * D;
    for (int t = 0; t < T; ++t) {
      const float* xt = x + (static_cast<size_t>(b) * T + t) * D;
      for (int d = 0; d < D; ++d) {
        double acc = bias[d];
        for (int j = 0; j < W - 1; ++j) acc += w[static_cast<size_t>(d) * W + j] * st[j * D + d];
        acc += w[static_cast<size_t>(d) * W + W - 1] * xt[d];
        out[(static_cast<size_t>(b) * T + t) * D + d] = silu ? Silu(acc) : acc;
      }
      for (int j = 0; j + 1 < W - 1; ++j)
        for (int d = 0; d < D; ++d) st[j * D + d] = st[(j + 1) * D + d];
      if (W > 1)
        for (int d = 0; d < D; ++d) st[static_cast<size_t>(W - 2) * D + d] = xt[d];
    }
  }
}

void ReferenceRmsNormD(int T, int D, const float* x, const float* w, float eps, double* out) {
  for (int t = 0; t < T; ++t) {
    const float* r = x + static_cast<size_t>(t) * D;
    double ss = 0;
    for (int i = 0; i < D; ++i) ss += static_cast<double>(r[i]) * r[i];
    const double s = 1 / std::sqrt(ss / D + eps);
    for (int i = 0; i < D; ++i) out[static_cast<size_t>(t) * D + i] = r[i] * s * w[i];
  }
}

void ReferenceSoftmaxD(int T, int N, const float* x, double* out) {
  for (int t = 0; t < T; ++t) {
    const float* r = x + static_cast<size_t>(t) * N;
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < N; ++i) m = std::max(m, static_cast<double>(r[i]));
    for (int i = 0; i < N; ++i) sum += (out[static_cast<size_t>(t) * N + i] = std::exp(r[i] - m));
    for (int i = 0; i < N; ++i) out[static_cast<size_t>(t) * N + i] /= sum;
  }
}

void ReferenceSwigluD(int64_t n, const float* gate, const float* up, double* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

}  // namespace kiln::hardware
