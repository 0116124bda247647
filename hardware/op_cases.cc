#include "hardware/op_cases.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "codegen/op_table.h"
#include "codegen/workload.h"
#include "hardware/buffers.h"
#include "hardware/reference/gemm_reference.h"
#include "hardware/reference/model_ops_reference.h"
#include "hardware/reference/quant_format.h"

namespace kiln::hardware {
namespace {

// Tolerances: |got - ref| <= rtol * |ref| (or the sum of |terms| for dot products) + atol. One
// rule for every backend: wide enough for fast exp and rsqrt on accelerators and for any
// summation order, narrow enough that an unwritten, stale or misindexed element fails by far.
constexpr double kElemRtol = 1e-4, kElemAtol = 1e-5;        // norms, swiglu, conv
constexpr double kSoftmaxRtol = 1e-4, kSoftmaxAtol = 1e-6;  // probabilities, many tiny
constexpr double kScanRtol = 1e-4, kScanAtol = 1e-5;        // rope, scan (exp of sums)
constexpr double kAttnRtol = 1e-3, kAttnAtol = 1e-5;        // long softmax-weighted sums of values
constexpr double kBf16Rtol = 1e-2;                          // activations rounded to bf16 (DOT=1)

const float* F(const void* p) { return static_cast<const float*>(p); }
const int32_t* I(const void* p) { return static_cast<const int32_t*>(p); }
const uint16_t* H(const void* p) { return static_cast<const uint16_t*>(p); }

size_t N(std::initializer_list<long long> d) {
  size_t n = 1;
  for (long long x : d) n *= static_cast<size_t>(x);
  return n;
}

ArgSpec In(std::string name, size_t n, Elem e = Elem::kF32, Fill f = Fill::kUniform) {
  return {std::move(name), n, e, f};
}
ArgSpec Out(std::string name, size_t n) { return {std::move(name), n, Elem::kF32, Fill::kNaN}; }
ArgSpec InOut(std::string name, size_t n) {
  return {std::move(name), n, Elem::kF32, Fill::kUniform, true};
}
// Read only when the workload has an epilogue.
ArgSpec ForEpilogue(ArgSpec a) {
  a.epilogue_only = true;
  return a;
}

OpCheck Both(OpCheck a, OpCheck b) {
  if (!a.ok) return a;
  b.max_error = std::max(a.max_error, b.max_error);
  return b;
}

}  // namespace

void FillArg(const ArgSpec& spec, void* data, uint64_t seed, int experts, int topk) {
  if (spec.fill == Fill::kNaN) {  // outputs: poisoned, so an unwritten element is caught
    if (spec.elem == Elem::kF32) FillNaN(static_cast<float*>(data), spec.count);
    if (spec.elem == Elem::kI32) std::fill_n(static_cast<int32_t*>(data), spec.count, -1);
    if (spec.elem == Elem::kBF16) std::fill_n(static_cast<uint16_t*>(data), spec.count, 0xffc0);
    return;
  }
  if (spec.elem == Elem::kI32) {
    int32_t* p = static_cast<int32_t*>(data);
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    auto next = [&s]() {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      return s >> 33;
    };
    if (spec.fill == Fill::kPositions) {
      for (size_t i = 0; i < spec.count; ++i) p[i] = static_cast<int32_t>(next() % 4096);
      return;
    }
    for (size_t t = 0; t + topk <= spec.count; t += topk)  // distinct experts per token
      for (int k = 0; k < topk; ++k) {
        int32_t e;
        bool dup;
        do {
          e = static_cast<int32_t>(next() % experts);
          dup = false;
          for (int j = 0; j < k; ++j) dup = dup || p[t + j] == e;
        } while (dup);
        p[t + k] = e;
      }
    return;
  }
  if (spec.elem == Elem::kQuant) {
    // Uniform quantized weights, drawn in the format itself: every value of its range, scales
    // in [0.5, 1.5) / qmax. No float matrix quantized first: a model's experts are GBs of them.
    const int qmax = spec.quant_bits == 4 ? 7 : 127, qmin = spec.quant_bits == 4 ? -8 : -127;
    const size_t values = static_cast<size_t>(spec.quant_k * spec.quant_n);
    const size_t scales = static_cast<size_t>(spec.quant_k / kQuantGroup * spec.quant_n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 7;
    auto next = [&s]() {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<uint32_t>(s >> 33);
    };
    int8_t* q = static_cast<int8_t*>(data);
    for (size_t i = 0; i < values; ++i)
      q[i] = static_cast<int8_t>(qmin + next() % (qmax - qmin + 1));
    uint16_t* sc = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(data) + values);
    for (size_t i = 0; i < scales; ++i)
      sc[i] = FloatToHalf((0.5f + (next() & 0xffff) / 65536.0f) / qmax);
    return;
  }
  std::vector<float> tmp;
  float* f = static_cast<float*>(data);
  if (spec.elem == Elem::kBF16) {
    tmp.resize(spec.count);
    f = tmp.data();
  }
  FillUniform(f, spec.count, seed);
  if (spec.fill == Fill::kNegative)
    for (size_t i = 0; i < spec.count; ++i) f[i] = -std::fabs(f[i]) - 1e-3f;
  if (spec.elem == Elem::kBF16) {
    uint16_t* h = static_cast<uint16_t*>(data);
    for (size_t i = 0; i < spec.count; ++i) h[i] = FloatToBf16(f[i]);
  }
}

OpCheck Compare(const std::string& what, const float* got, const double* ref, size_t n, double rtol,
                double atol, const double* mag) {
  OpCheck c;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    const double scale = mag ? mag[i] : std::fabs(ref[i]);
    const double err = std::fabs(got[i] - ref[i]);
    if (std::isfinite(got[i])) c.max_error = std::max(c.max_error, err / (scale + atol));
    if (!(err <= rtol * scale + atol) && bad++ == 0) first = i;
  }
  if (bad == 0) {
    c.ok = true;
    return c;
  }
  if (!std::isfinite(got[first])) c.max_error = INFINITY;
  c.message =
      absl::StrCat("wrong result: ", what, "[", first, "] = ", got[first], ", want ", ref[first],
                   std::isnan(got[first]) ? " (NaN: unwritten?)" : "", "; ", bad, " of ", n,
                   " outside rtol ", rtol, " atol ", atol, "; max_error ", c.max_error);
  return c;
}

// A kernel on quantized weights passes with the activations `a` (rows x K) as given or quantized
// per group of 32 the way the kernels' AQ=1 path does it: `check` compares against the exact
// reference computed from either.
namespace {
OpCheck EitherActivations(const float* a, int64_t rows, int64_t K,
                          const std::function<OpCheck(const float*)>& check) {
  OpCheck first = check(a);
  if (first.ok) return first;
  const std::vector<float> aq = QuantizeActivationsLikeKernel(a, rows, K);
  OpCheck second = check(aq.data());
  if (second.ok) return second;
  first.message += " (nor within tolerance of the activations quantized per group)";
  return first;
}
}  // namespace

absl::StatusOr<OpCase> MakeOpCase(const v1::Workload& w) {
  auto s = codegen::ValidateWorkload(w);
  if (!s.ok()) return s;
  auto d = [&](const char* name) { return static_cast<long long>(w.dims().at(name)); };
  const bool bf16 = w.dtype() == v1::BF16;
  const std::string epi = w.epilogue();
  OpCase c;
  c.dims = codegen::OrderedDims(w);
  switch (w.op()) {
    case v1::GEMM: {
      const long long M = d("M"), Nn = d("N"), K = d("K");
      if (codegen::IsQuantized(w.dtype())) {
        ArgSpec b = In("W", QuantPlainBytes(K, Nn), Elem::kQuant);
        b.quant_k = K, b.quant_n = Nn, b.quant_bits = w.dtype() == v1::INT4 ? 4 : 8;
        c.args = {In("A", N({M, K})), b, ForEpilogue(In("bias", Nn)),
                  ForEpilogue(In("R", N({M, Nn}))), Out("C", N({M, Nn}))};
        // Exact semantics on the dequantized weights: the activations either as given (AQ=0) or
        // quantized per group of 32 the way the kernels do it (AQ=1); either must hold tightly.
        c.check = [=](const auto& in, const auto& out) {
          const std::vector<float> wd =
              DequantizeWeights(static_cast<const uint8_t*>(in[1]), K, Nn);
          return EitherActivations(F(in[0]), M, K, [&](const float* a) {
            std::vector<double> ref(N({M, Nn})), mag(ref.size());
            ReferenceGemmEpilogue(M, Nn, K, a, wd.data(), nullptr, F(in[2]), F(in[3]), epi,
                                  ref.data(), mag.data());
            return Compare("C", F(out[4]), ref.data(), ref.size(), kGemmRelTol, 1e-6, mag.data());
          });
        };
        return c;
      }
      c.args = {In("A", N({M, K})), In("B", N({K, Nn}), bf16 ? Elem::kBF16 : Elem::kF32),
                ForEpilogue(In("bias", Nn)), ForEpilogue(In("R", N({M, Nn}))),
                Out("C", N({M, Nn}))};
      if (epi.empty() && double(M) * Nn * K > kFullCheckMacs / 4) {
        // Sampled rows plus a checksum of every row: a fraction of a second, not minutes. bf16
        // weights are widened to fp32 (exactly), and the activations taken as given or rounded
        // to bf16 the way the dot-product kernels (DOT=1) round them: their products are exact
        // in fp32, so either way the fp32 tolerance holds and a lost K slice still shows.
        c.check = [=](const auto& in, const auto& out) {
          if (!bf16) {
            GemmCheck g = CheckGemm(M, Nn, K, F(in[0]), F(in[1]), F(out[4]), kFullCheckMacs / 4);
            return OpCheck{g.ok, g.message, g.max_error};
          }
          std::vector<float> b(static_cast<size_t>(K) * Nn), a(F(in[0]), F(in[0]) + M * K);
          for (size_t i = 0; i < b.size(); ++i) b[i] = Bf16ToFloat(H(in[1])[i]);
          GemmCheck g = CheckGemm(M, Nn, K, a.data(), b.data(), F(out[4]), kFullCheckMacs / 4);
          if (g.ok) return OpCheck{g.ok, g.message, g.max_error};
          for (float& x : a) x = Bf16ToFloat(FloatToBf16(x));
          GemmCheck r = CheckGemm(M, Nn, K, a.data(), b.data(), F(out[4]), kFullCheckMacs / 4);
          if (r.ok) return OpCheck{r.ok, r.message, r.max_error};
          return OpCheck{false, g.message + " (nor with the activations rounded to bf16)",
                         g.max_error};
        };
        return c;
      }
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({M, Nn})), mag(ref.size());
        ReferenceGemmEpilogue(M, Nn, K, F(in[0]), bf16 ? nullptr : F(in[1]),
                              bf16 ? H(in[1]) : nullptr, F(in[2]), F(in[3]), epi, ref.data(),
                              mag.data());
        return Compare("C", F(out[4]), ref.data(), ref.size(), bf16 ? kBf16Rtol : kGemmRelTol, 1e-6,
                       mag.data());
      };
      return c;
    }
    case v1::RMSNORM: {
      const long long T = d("T"), D = d("D");
      const bool res = epi == "residual";
      c.params = {1e-5f};
      c.args = {In("x", N({T, D})), In("w", D), Out("out", N({T, D})),
                ForEpilogue(InOut("res", N({T, D})))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<float> h(F(in[0]), F(in[0]) + N({T, D}));
        std::vector<double> hs(h.size());
        if (res)
          for (size_t i = 0; i < h.size(); ++i) h[i] += F(in[3])[i], hs[i] = h[i];
        std::vector<double> ref(h.size());
        ReferenceRmsNormD(T, D, h.data(), F(in[1]), 1e-5f, ref.data());
        OpCheck a = Compare("out", F(out[2]), ref.data(), ref.size(), kElemRtol, kElemAtol);
        if (!res) return a;
        return Both(a, Compare("res", F(out[3]), hs.data(), hs.size(), 1e-7, 0));
      };
      return c;
    }
    case v1::ROPE: {
      const long long T = d("T"), Hh = d("H"), D = d("D");
      c.params = {10000.0f, 0.0f};
      c.args = {InOut("x", N({T, Hh, D})), In("pos", T, Elem::kI32, Fill::kPositions)};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({T, Hh, D}));
        ReferenceRope(T, Hh, D, F(in[0]), I(in[1]), 10000.0f, ref.data());
        return Compare("x", F(out[0]), ref.data(), ref.size(), kScanRtol, kScanAtol);
      };
      return c;
    }
    case v1::ATTENTION_DECODE: {
      const long long B = d("B"), Hh = d("H"), KVH = d("KVH"), D = d("D"), L = d("L");
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      c.params = {scale};
      c.args = {In("q", N({B, Hh, D})), In("k", N({B, KVH, L, D})), In("v", N({B, KVH, L, D})),
                Out("out", N({B, Hh, D}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({B, Hh, D}));
        ReferenceAttentionDecodeGqa(B, Hh, KVH, D, L, F(in[0]), F(in[1]), F(in[2]), scale,
                                    ref.data());
        return Compare("out", F(out[3]), ref.data(), ref.size(), kAttnRtol, kAttnAtol);
      };
      return c;
    }
    case v1::ATTENTION_PREFILL: {
      const long long B = d("B"), Hh = d("H"), KVH = d("KVH"), D = d("D"), S = d("S");
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      c.params = {scale};
      c.args = {In("q", N({B, S, Hh, D})), In("k", N({B, S, KVH, D})), In("v", N({B, S, KVH, D})),
                Out("out", N({B, S, Hh, D}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({B, S, Hh, D}));
        ReferenceAttentionPrefill(B, Hh, KVH, D, S, F(in[0]), F(in[1]), F(in[2]), scale,
                                  ref.data());
        return Compare("out", F(out[3]), ref.data(), ref.size(), kAttnRtol, kAttnAtol);
      };
      return c;
    }
    case v1::SOFTMAX: {
      const long long T = d("T"), Nn = d("N");
      c.args = {In("x", N({T, Nn})), Out("out", N({T, Nn}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({T, Nn}));
        ReferenceSoftmaxD(T, Nn, F(in[0]), ref.data());
        return Compare("out", F(out[1]), ref.data(), ref.size(), kSoftmaxRtol, kSoftmaxAtol);
      };
      return c;
    }
    case v1::SWIGLU: {
      const long long T = d("T"), Ff = d("F");
      c.args = {In("gate", N({T, Ff})), In("up", N({T, Ff})), Out("out", N({T, Ff}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({T, Ff}));
        ReferenceSwigluD(ref.size(), F(in[0]), F(in[1]), ref.data());
        return Compare("out", F(out[2]), ref.data(), ref.size(), kElemRtol, kElemAtol);
      };
      return c;
    }
    case v1::MOE_ROUTER: {
      const long long T = d("T"), D = d("D"), E = d("E"), K = d("TOPK");
      c.args = {In("x", N({T, D})),
                In("W", N({D, E})),
                Out("weights", N({T, K})),
                {"experts", N({T, K}), Elem::kI32, Fill::kNaN}};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> wref(N({T, K})), probs(N({T, E}));
        std::vector<int32_t> eref(wref.size());
        ReferenceMoeRouter(T, D, E, K, F(in[0]), F(in[1]), wref.data(), eref.data(), probs.data());
        for (size_t i = 0; i < eref.size(); ++i) {
          const int32_t got = I(out[3])[i];
          // A near-tie may pick either expert: accept any whose probability is within 1e-5.
          if (got != eref[i] &&
              !(got >= 0 && got < E &&
                std::fabs(probs[i / K * E + got] - probs[i / K * E + eref[i]]) < 1e-5))
            return OpCheck{
                false, absl::StrCat("wrong result: experts[", i, "] = ", got, ", want ", eref[i]),
                INFINITY};
        }
        return Compare("weights", F(out[2]), wref.data(), wref.size(), 1e-4, 1e-5);
      };
      return c;
    }
    case v1::MOE_GEMM: {
      const long long T = d("T"), E = d("E"), K = d("TOPK"), Nn = d("N"), Kk = d("K");
      c.experts = E, c.topk = K;
      if (codegen::IsQuantized(w.dtype())) {  // the experts as one (E*K) x N quantized matrix
        ArgSpec b = In("W", QuantPlainBytes(E * Kk, Nn), Elem::kQuant);
        b.quant_k = E * Kk, b.quant_n = Nn, b.quant_bits = w.dtype() == v1::INT4 ? 4 : 8;
        c.args = {In("x", N({T, K, Kk})), b, In("experts", N({T, K}), Elem::kI32, Fill::kExperts),
                  Out("y", N({T, K, Nn}))};
        // As the quantized GEMM: exact on the dequantized weights, the activations as given or
        // quantized per group the way the kernels do it.
        c.check = [=](const auto& in, const auto& out) {
          // Only the experts the rows select are dequantized (a model's experts can be GBs),
          // renumbered 0..S-1 in the order first selected.
          std::vector<int32_t> slot(E, -1), selected(N({T, K}));
          int32_t S = 0;
          for (size_t r = 0; r < selected.size(); ++r) {
            int32_t& s = slot[I(in[2])[r]];
            if (s < 0) s = S++;
            selected[r] = s;
          }
          std::vector<float> wd(static_cast<size_t>(S) * Kk * Nn);
          for (long long e = 0; e < E; ++e)
            if (slot[e] >= 0)
              DequantizeRows(static_cast<const uint8_t*>(in[1]), E * Kk, Nn, e * Kk, (e + 1) * Kk,
                             wd.data() + slot[e] * Kk * Nn);
          return EitherActivations(F(in[0]), T * K, Kk, [&](const float* x) {
            std::vector<double> ref(N({T, K, Nn})), mag(ref.size());
            ReferenceMoeGemm(T, S, K, Nn, Kk, x, wd.data(), nullptr, selected.data(), ref.data(),
                             mag.data());
            return Compare("y", F(out[3]), ref.data(), ref.size(), kGemmRelTol, 1e-6, mag.data());
          });
        };
        return c;
      }
      c.args = {In("x", N({T, K, Kk})), In("W", N({E, Kk, Nn}), bf16 ? Elem::kBF16 : Elem::kF32),
                In("experts", N({T, K}), Elem::kI32, Fill::kExperts), Out("y", N({T, K, Nn}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> ref(N({T, K, Nn})), mag(ref.size());
        ReferenceMoeGemm(T, E, K, Nn, Kk, F(in[0]), bf16 ? nullptr : F(in[1]),
                         bf16 ? H(in[1]) : nullptr, I(in[2]), ref.data(), mag.data());
        return Compare("y", F(out[3]), ref.data(), ref.size(), bf16 ? kBf16Rtol : kGemmRelTol, 1e-6,
                       mag.data());
      };
      return c;
    }
    case v1::SSM_SCAN: {
      const long long B = d("B"), T = d("T"), D = d("D"), S = d("S");
      c.params = {1.0f};
      c.args = {In("u", N({B, T, D})),
                In("delta", N({B, T, D})),
                In("A", N({D, S}), Elem::kF32, Fill::kNegative),
                In("Bm", N({B, T, S})),
                In("Cm", N({B, T, S})),
                In("Dp", D),
                In("z", N({B, T, D})),
                InOut("h", N({B, D, S})),
                Out("y", N({B, T, D}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> h(F(in[7]), F(in[7]) + N({B, D, S})), y(N({B, T, D}));
        ReferenceSsmScan(B, T, D, S, F(in[0]), F(in[1]), F(in[2]), F(in[3]), F(in[4]), F(in[5]),
                         F(in[6]), true, h.data(), y.data());
        return Both(Compare("y", F(out[8]), y.data(), y.size(), kScanRtol, kScanAtol),
                    Compare("h", F(out[7]), h.data(), h.size(), kScanRtol, kScanAtol));
      };
      return c;
    }
    case v1::CONV1D: {
      const long long B = d("B"), T = d("T"), D = d("D"), W = d("W");
      c.params = {1.0f};
      c.args = {In("x", N({B, T, D})), In("w", N({D, W})), In("bias", D),
                InOut("state", N({B, W - 1, D}) + 1), Out("out", N({B, T, D}))};
      c.check = [=](const auto& in, const auto& out) {
        std::vector<double> st(F(in[3]), F(in[3]) + N({B, W - 1, D})), y(N({B, T, D}));
        ReferenceConv1d(B, T, D, W, F(in[0]), F(in[1]), F(in[2]), true, st.data(), y.data());
        return Both(Compare("out", F(out[4]), y.data(), y.size(), kElemRtol, kElemAtol),
                    Compare("state", F(out[3]), st.data(), st.size(), 0, 0));
      };
      return c;
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("no verification case for ", codegen::OpName(w.op())));
  }
}

}  // namespace kiln::hardware
