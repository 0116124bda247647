#include "hardware/cpu/step_state.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "hardware/buffers.h"
#include "hardware/cpu/torch_baseline/torch_ops.h"
#include "hardware/op_cases.h"
#include "hardware/reference/model_ops_reference.h"
#include "hardware/reference/quant_format.h"

namespace kiln::hardware {
namespace {

using Clock = std::chrono::steady_clock;

int64_t Dim(const v1::Workload& w, const char* d) { return w.dims().at(d); }

}  // namespace

absl::StatusOr<std::unique_ptr<StepState>> StepState::Create(const v1::StepRequest& req,
                                                             uint64_t seed) {
  std::unique_ptr<StepState> s(new StepState());
  s->req_ = req;
  s->seed_ = seed;
  const v1::ModelArch& a = req.arch();
  ASSIGN_OR_RETURN(s->graph_, codegen::BuildStepGraph(a, req.phase(), req.batch(), req.context(),
                                                      req.prefill_tokens(), req.dtype()));
  s->layers_ = std::clamp(req.layers() > 0 ? req.layers() : a.layers(), 1, a.layers());
  const bool prefill = req.phase() == "prefill";
  const int64_t B = req.batch(), S = prefill ? req.prefill_tokens() : 1, T = B * S;
  const int64_t hid = a.hidden(), L = req.context();
  // Weights and state of each layer, by the role of the operator that reads them.
  s->layer_.resize(s->layers_);
  for (Layer& l : s->layer_) {
    for (const auto& op : s->graph_.layer) {
      const v1::Workload& w = op.workload;
      if (w.op() == v1::GEMM) {
        const int64_t K = Dim(w, "K"), N = Dim(w, "N");
        l.w[op.role] = s->GemmWeight(w, 1.0f / std::sqrt(static_cast<float>(K)));
        if (w.epilogue() == "bias") l.bias[op.role] = static_cast<float*>(s->Weight(N, 0.1f));
      } else if (w.op() == v1::MOE_GEMM) {  // experts are filled once the router picks them
        const int64_t EK = Dim(w, "E") * Dim(w, "K"), N = Dim(w, "N");
        l.w[op.role] = codegen::IsQuantized(w.dtype())
                           ? s->Floats((QuantPlainBytes(EK, N) + 3) / 4)
                           : s->Weight(EK * N, 0, w.dtype() == v1::BF16, false);
      } else if (w.op() == v1::MOE_ROUTER) {
        l.router = static_cast<float*>(s->Weight(hid * Dim(w, "E"), 1.0f / std::sqrt(hid * 1.0f)));
      } else if (w.op() == v1::ATTENTION_DECODE) {
        const size_t n = B * Dim(w, "KVH") * L * Dim(w, "D");
        l.kcache = static_cast<float*>(s->Weight(n, 1.0f));
        l.vcache = static_cast<float*>(s->Weight(n, 1.0f));
      } else if (w.op() == v1::CONV1D) {
        const int64_t D = Dim(w, "D"), W = Dim(w, "W");
        l.conv_w = static_cast<float*>(s->Weight(D * W, 0.5f));
        l.conv_b = static_cast<float*>(s->Weight(D, 0.1f));
        l.conv_state = static_cast<float*>(s->Weight(B * (W - 1) * D + 1, 1.0f));
      } else if (w.op() == v1::SSM_SCAN) {
        const int64_t D = Dim(w, "D"), Sd = Dim(w, "S");
        l.A = static_cast<float*>(s->Weight(D * Sd, 1.0f));
        for (int64_t i = 0; i < D * Sd; ++i) l.A[i] = -0.5f - 0.5f * std::fabs(l.A[i]);
        l.Dp = static_cast<float*>(s->Weight(D, 1.0f));
        l.ssm_state = static_cast<float*>(s->Weight(B * D * Sd, 0.1f));
      }
    }
    for (float** n : {&l.norm1, &l.norm2}) {
      *n = static_cast<float*>(s->Weight(hid, 0.1f));
      for (int64_t i = 0; i < hid; ++i) (*n)[i] += 1.0f;
    }
  }
  for (const auto& op : s->graph_.tail)
    if (op.role == "lm_head") {
      s->head_dtype_ = op.workload.dtype();
      s->head_ = s->GemmWeight(op.workload, 1.0f / std::sqrt(static_cast<float>(hid)));
    }
  s->norm_f_ = static_cast<float*>(s->Weight(hid, 0.1f));
  for (int64_t i = 0; i < hid; ++i) s->norm_f_[i] += 1.0f;
  // Activations, sized for the largest use.
  const int64_t H = std::max(1, a.heads()), KV = std::max(1, a.kv_heads());
  const int64_t hd = std::max(1, a.head_dim()), K = std::max(1, a.experts_per_token());
  const int64_t F = std::max<int64_t>(1, a.intermediate()), di = std::max(1, a.d_inner());
  const int64_t ds = std::max(1, a.d_state()), r = std::max(1, a.dt_rank());
  for (float** p : {&s->x_, &s->x2_, &s->h_}) *p = s->Floats(T * hid);
  s->q_ = s->Floats(T * H * hd);
  s->attn_ = s->Floats(T * H * hd);
  s->k_ = s->Floats(T * KV * hd);
  s->v_ = s->Floats(T * KV * hd);
  s->qkv_ = s->Floats(T * (H + 2 * KV) * hd);
  s->gu_ = s->Floats(T * 2 * F);
  for (float** p : {&s->g_, &s->u_, &s->act_}) *p = s->Floats(T * K * F);
  s->xrep_ = s->Floats(T * K * hid);
  s->dn_ = s->Floats(T * K * hid);
  s->rw_ = s->Floats(T * K);
  s->re_ = reinterpret_cast<int32_t*>(s->Floats(T * K));
  s->xz_ = s->Floats(T * 2 * di);
  for (float** p : {&s->xs_, &s->z_, &s->xc_, &s->dt_, &s->y_}) *p = s->Floats(T * di);
  s->xdbl_ = s->Floats(T * (r + 2 * ds));
  s->dtin_ = s->Floats(T * r);
  s->bm_ = s->Floats(T * ds);
  s->cm_ = s->Floats(T * ds);
  s->hl_ = s->Floats(B * hid);
  s->hf_ = s->Floats(B * hid);
  s->logits_ = s->Floats(B * a.vocab());
  s->probs_ = s->Floats(B * a.vocab());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t) {
      s->pos_.push_back(static_cast<int32_t>(prefill ? t : L - 1));
      s->tokens_.push_back(static_cast<int32_t>((seed * 7919 + b * 104729 + t * 31) % a.vocab()));
    }
  return s;
}

StepState::~StepState() {
  for (auto& [p, bytes] : regions_) munmap(p, bytes);
}

float* StepState::Floats(size_t n) {
  const size_t bytes = std::max<size_t>(64, (n * 4 + 4095) / 4096 * 4096);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  madvise(p, bytes, MADV_HUGEPAGE);
  regions_.push_back({p, bytes});
  return static_cast<float*>(p);
}

void StepState::FillWeight(void* w, size_t offset, size_t n, float scale, bool bf16) {
  constexpr size_t kChunk = 1 << 20;
  std::vector<float> tmp(std::min(n, kChunk));
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t m = std::min(kChunk, n - done);
    float* dst = bf16 ? tmp.data() : static_cast<float*>(w) + offset + done;
    FillUniform(dst, m, seed_ * 1000003 + offset + done + reinterpret_cast<uintptr_t>(w) % 977);
    for (size_t i = 0; i < m; ++i) dst[i] *= scale;
    if (bf16)
      for (size_t i = 0; i < m; ++i)
        static_cast<uint16_t*>(w)[offset + done + i] = FloatToBf16(dst[i]);
  }
}

void* StepState::GemmWeight(const v1::Workload& w, float scale) {
  const int64_t K = Dim(w, "K"), N = Dim(w, "N");
  if (!codegen::IsQuantized(w.dtype())) return Weight(K * N, scale, w.dtype() == v1::BF16);
  uint8_t* plain = reinterpret_cast<uint8_t*>(Floats((QuantPlainBytes(K, N) + 3) / 4));
  FillQuantRows(w, plain, K, 0, K, scale);
  return plain;
}

void StepState::FillQuantRows(const v1::Workload& w, uint8_t* plain, int64_t rows, int64_t first,
                              int64_t count, float scale) {
  // Quantized a group of 32 rows at a time (its scales need the whole group).
  const int64_t N = Dim(w, "N");
  const int bits = w.dtype() == v1::INT4 ? 4 : 8;
  std::vector<float> group(kQuantGroup * N);
  std::vector<uint8_t> slab(QuantPlainBytes(kQuantGroup, N));
  for (int64_t g = first / kQuantGroup; g < (first + count) / kQuantGroup; ++g) {
    FillUniform(group.data(), group.size(),
                seed_ * 1000003 + g * 7919 + reinterpret_cast<uintptr_t>(plain) % 977);
    for (float& x : group) x *= scale;
    QuantizeWeights(group.data(), kQuantGroup, N, bits, slab.data());
    std::memcpy(plain + g * kQuantGroup * N, slab.data(), kQuantGroup * N);
    std::memcpy(plain + rows * N + 2 * g * N, slab.data() + kQuantGroup * N, 2 * N);
  }
}

void StepState::FillExpert(const v1::Workload& w, void* weight, int64_t e) {
  const int64_t E = Dim(w, "E"), K = Dim(w, "K"), N = Dim(w, "N");
  const float scale = 1.0f / std::sqrt(static_cast<float>(K));
  if (codegen::IsQuantized(w.dtype()))
    FillQuantRows(w, static_cast<uint8_t*>(weight), E * K, e * K, K, scale);
  else
    FillWeight(weight, e * K * N, K * N, scale, w.dtype() == v1::BF16);
}

v1::Workload StepState::TorchWorkload(const v1::Workload& w) {
  v1::Workload t = w;
  if (codegen::IsQuantized(w.dtype())) t.set_dtype(v1::FP32);
  return t;
}

void* StepState::Weight(size_t n, float scale, bool bf16, bool fill) {
  void* w = Floats(bf16 ? (n + 1) / 2 : n);
  if (fill) FillWeight(w, 0, n, scale, bf16);
  return w;
}

}  // namespace kiln::hardware
