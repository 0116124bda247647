#include "hardware/cpu/torch_baseline/torch_ops.h"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);  // the BLAS LibTorch calls is OpenBLAS here

#include "absl/strings/str_cat.h"

namespace kiln::hardware::torch_baseline {
namespace {

using torch::Tensor;
namespace I = torch::indexing;

Tensor Blob(void* p, std::vector<int64_t> shape, torch::Dtype t = torch::kFloat) {
  return torch::from_blob(p, shape, torch::TensorOptions().dtype(t));
}

Tensor RotateHalf(const Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.index({"...", I::Slice(half)}), x.index({"...", I::Slice(0, half)})}, -1);
}

// HF's repeat_kv: [B, KVH, L, D] -> [B, KVH*G, L, D].
Tensor RepeatKv(const Tensor& kv, int64_t g) {
  if (g == 1) return kv;
  return kv.unsqueeze(2)
      .expand({kv.size(0), kv.size(1), g, kv.size(2), kv.size(3)})
      .reshape({kv.size(0), kv.size(1) * g, kv.size(2), kv.size(3)});
}

void Epilogue(const v1::Workload& w, const Tensor& C, void* const* a, int64_t M, int64_t N) {
  const std::string& e = w.epilogue();
  if (e == "bias") C.add_(Blob(a[2], {N}));
  if (e == "silu") C.copy_(torch::silu(C));
  if (e == "gelu") C.copy_(torch::gelu(C, "tanh"));
  if (e == "residual") C.add_(Blob(a[3], {M, N}));
}

void Gemm(const v1::Workload& w, const long long* d, void* const* a) {
  const int64_t M = d[0], N = d[1], K = d[2];
  Tensor A = Blob(a[0], {M, K}), C = Blob(a[4], {M, N});
  if (w.dtype() == v1::BF16)  // bf16 weights: computed in bf16 (oneDNN), as a bf16 model runs
    C.copy_(torch::mm(A.to(torch::kBFloat16), Blob(a[1], {K, N}, torch::kBFloat16)));
  else
    torch::mm_out(C, A, Blob(a[1], {K, N}));
  Epilogue(w, C, a, M, N);
}

// cos/sin of the rotary angles for the step's positions. HF computes them once per forward pass
// (the model's rotary embedding, shared by every layer), so they are cached here while the
// positions, head size and theta stay the same: the layers of one step reuse them.
struct RopeTables {
  std::vector<int32_t> pos;
  int64_t D = 0;
  float theta = 0;
  Tensor cos, sin;
};

const RopeTables& RopeTablesFor(const int32_t* positions, int64_t T, int64_t D, float theta) {
  thread_local RopeTables t;
  if (t.D == D && t.theta == theta && t.pos.size() == static_cast<size_t>(T) &&
      std::equal(t.pos.begin(), t.pos.end(), positions))
    return t;
  t.pos.assign(positions, positions + T);
  t.D = D;
  t.theta = theta;
  // Angles in double (positions in the thousands lose ~1e-4 rad in fp32), cos/sin in fp32.
  Tensor pos = torch::tensor(std::vector<int64_t>(t.pos.begin(), t.pos.end()), torch::kLong)
                   .to(torch::kDouble);
  Tensor inv = 1.0 / torch::pow(torch::tensor(static_cast<double>(theta), torch::kDouble),
                                torch::arange(0, D, 2, torch::kDouble) / D);
  Tensor f = torch::outer(pos, inv);
  Tensor emb = torch::cat({f, f}, -1).unsqueeze(1);
  t.cos = emb.cos().to(torch::kFloat);
  t.sin = emb.sin().to(torch::kFloat);
  return t;
}

void Rope(const long long* d, void* const* a, const float* p) {
  const int64_t T = d[0], H = d[1], D = d[2];
  const int64_t stride = p[1] > 0 ? static_cast<int64_t>(p[1]) : H * D;
  Tensor x = torch::from_blob(a[0], {T, H, D}, {stride, D, 1}, torch::kFloat);
  const RopeTables& r = RopeTablesFor(static_cast<const int32_t*>(a[1]), T, D, p[0]);
  x.copy_(x * r.cos + RotateHalf(x) * r.sin);
}

void Attention(const long long* d, void* const* a, const float* p, bool prefill) {
  const int64_t B = d[0], H = d[1], KVH = d[2], D = d[3], L = d[4];
  if (!prefill) {  // decode: each group's query heads attend to their kv head, no repeated copy
    Tensor q = Blob(a[0], {B, KVH, H / KVH, D});
    Tensor k = Blob(a[1], {B, KVH, L, D}), v = Blob(a[2], {B, KVH, L, D});
    // q k^T as (k q^T)^T: OpenBLAS multiplies the contiguous [L, D] keys by a few query rows
    // faster than it reads the keys transposed (the same product, ~1.4x faster at L=1024).
    Tensor s = torch::matmul(k, (q * p[0]).transpose(-1, -2)).transpose(-1, -2);
    Blob(a[3], {B, KVH, H / KVH, D}).copy_(torch::matmul(torch::softmax(s, -1), v));
    return;
  }
  // prefill: [B,S,*,D] -> [B,*,S,D], kv heads repeated per group (as HF's eager attention)
  Tensor q = Blob(a[0], {B, L, H, D}).transpose(1, 2);
  Tensor k = RepeatKv(Blob(a[1], {B, L, KVH, D}).transpose(1, 2), H / KVH);
  Tensor v = RepeatKv(Blob(a[2], {B, L, KVH, D}).transpose(1, 2), H / KVH);
  Tensor s = torch::matmul(q, k.transpose(-1, -2)) * p[0];
  s = s.masked_fill(torch::ones({L, L}, torch::kBool).triu(1), -INFINITY);
  Tensor o = torch::matmul(torch::softmax(s, -1), v);
  Blob(a[3], {B, L, H, D}).copy_(o.transpose(1, 2));
}

void MoeGemm(const v1::Workload& w, const long long* d, void* const* a) {
  const int64_t T = d[0], E = d[1], TOPK = d[2], N = d[3], K = d[4], R = T * TOPK;
  Tensor x = Blob(a[0], {R, K}), y = Blob(a[3], {R, N});
  Tensor ex = Blob(a[2], {R}, torch::kInt);
  const bool bf16 = w.dtype() == v1::BF16;
  Tensor W = Blob(a[1], {E, K, N}, bf16 ? torch::kBFloat16 : torch::kFloat);
  for (int64_t e = 0; e < E; ++e) {  // Mixtral's eager loop over the experts that were hit
    Tensor rows = (ex == e).nonzero().squeeze(1);
    if (rows.numel() == 0) continue;
    Tensor xe = x.index_select(0, rows);
    y.index_copy_(
        0, rows,
        bf16 ? torch::mm(xe.to(torch::kBFloat16), W[e]).to(torch::kFloat) : torch::mm(xe, W[e]));
  }
}

void SsmScan(const long long* d, void* const* a, const float* p) {
  const int64_t B = d[0], T = d[1], D = d[2], S = d[3];
  Tensor u = Blob(a[0], {B, T, D}), delta = Blob(a[1], {B, T, D}), A = Blob(a[2], {D, S});
  Tensor Bm = Blob(a[3], {B, T, S}), Cm = Blob(a[4], {B, T, S}), Dp = Blob(a[5], {D});
  Tensor z = Blob(a[6], {B, T, D}), h = Blob(a[7], {B, D, S}), y = Blob(a[8], {B, T, D});
  Tensor dt = p[0] != 0 ? torch::nn::functional::softplus(delta) : delta;
  for (int64_t t = 0; t < T; ++t) {  // HF MambaMixer.slow_forward's sequential scan
    Tensor dtt = dt.select(1, t), ut = u.select(1, t);
    Tensor dA = torch::exp(dtt.unsqueeze(-1) * A.unsqueeze(0));
    Tensor dBu = (dtt * ut).unsqueeze(-1) * Bm.select(1, t).unsqueeze(1);
    h.copy_(dA * h + dBu);
    Tensor yt = torch::matmul(h, Cm.select(1, t).unsqueeze(-1)).squeeze(-1) + ut * Dp;
    y.select(1, t).copy_(yt * torch::silu(z.select(1, t)));
  }
}

void Conv1d(const long long* d, void* const* a, const float* p) {
  const int64_t B = d[0], T = d[1], D = d[2], W = d[3];
  Tensor x = Blob(a[0], {B, T, D}), w = Blob(a[1], {D, W}), bias = Blob(a[2], {D});
  Tensor state = Blob(a[3], {B, W - 1, D}), out = Blob(a[4], {B, T, D});
  for (int64_t t = 0; t < T; ++t) {  // HF Mamba's decode path: roll the state, dot, SiLU
    Tensor window = torch::cat({state, x.select(1, t).unsqueeze(1)}, 1);
    Tensor o = (window * w.t().unsqueeze(0)).sum(1) + bias;
    out.select(1, t).copy_(p[0] != 0 ? torch::silu(o) : o);
    state.copy_(window.index({I::Slice(), I::Slice(1)}));
  }
}

}  // namespace

const char* Name() {
  static const std::string name =
      absl::StrCat("libtorch-", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR, ".",
                   TORCH_VERSION_PATCH, "-eager");
  return name.c_str();
}

void SetThreads(int threads) {
  if (threads > 0 && at::get_num_threads() != threads) at::set_num_threads(threads);
}

void SetPools(int torch_threads, int blas_threads) {
  SetThreads(torch_threads);
  if (blas_threads > 0) openblas_set_num_threads(blas_threads);
}

absl::Status RunLinear(const v1::Workload& w, const long long* d, void* const* a) {
  try {
    torch::NoGradGuard no_grad;
    const int64_t M = d[0], N = d[1], K = d[2];
    Tensor C = Blob(a[4], {M, N});
    if (w.dtype() == v1::BF16) {  // F.linear on bf16 activations and weights (oneDNN-backed)
      C.copy_(torch::linear(Blob(a[0], {M, K}).to(torch::kBFloat16),
                            Blob(a[1], {N, K}, torch::kBFloat16)));
    } else if (M == 1) {  // one row: the matrix-vector product (BLAS sgemv)
      Tensor y = C.view({N});
      torch::mv_out(y, Blob(a[1], {N, K}), Blob(a[0], {K}));
    } else {
      C.copy_(torch::linear(Blob(a[0], {M, K}), Blob(a[1], {N, K})));
    }
    Epilogue(w, C, a, M, N);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status RunOp(const v1::Workload& w, const long long* d, void* const* a, const float* p) {
  try {
    torch::NoGradGuard no_grad;
    switch (w.op()) {
      case v1::GEMM:
        Gemm(w, d, a);
        break;
      case v1::RMSNORM: {
        Tensor x = Blob(a[0], {d[0], d[1]});
        if (w.epilogue() == "residual") x = Blob(a[3], {d[0], d[1]}).add_(x);
        Tensor n = x * torch::rsqrt(x.pow(2).mean(-1, true) + p[0]) * Blob(a[1], {d[1]});
        Blob(a[2], {d[0], d[1]}).copy_(n);
        break;
      }
      case v1::ROPE:
        Rope(d, a, p);
        break;
      case v1::ATTENTION_DECODE:
      case v1::ATTENTION_PREFILL:
        Attention(d, a, p, w.op() == v1::ATTENTION_PREFILL);
        break;
      case v1::SOFTMAX:
        Blob(a[1], {d[0], d[1]}).copy_(torch::softmax(Blob(a[0], {d[0], d[1]}), -1));
        break;
      case v1::SWIGLU: {
        Tensor out = Blob(a[2], {d[0], d[1]});
        torch::mul_out(out, torch::silu(Blob(a[0], {d[0], d[1]})), Blob(a[1], {d[0], d[1]}));
      } break;
      case v1::MOE_ROUTER: {
        Tensor probs =
            torch::softmax(torch::mm(Blob(a[0], {d[0], d[1]}), Blob(a[1], {d[1], d[2]})), -1);
        auto [v, i] = torch::topk(probs, d[3], -1);
        Blob(a[2], {d[0], d[3]}).copy_(v / v.sum(-1, true));
        Blob(a[3], {d[0], d[3]}, torch::kInt).copy_(i);
        break;
      }
      case v1::MOE_GEMM:
        MoeGemm(w, d, a);
        break;
      case v1::SSM_SCAN:
        SsmScan(d, a, p);
        break;
      case v1::CONV1D:
        Conv1d(d, a, p);
        break;
      default:
        return absl::UnimplementedError("libtorch baseline: unknown operator");
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("libtorch: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace kiln::hardware::torch_baseline
