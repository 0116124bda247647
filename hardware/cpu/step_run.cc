// StepState, running half: binding kernels, one pass of the step through either backend, state.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codegen/op_table.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "hardware/cpu/baselines/vendor_gemm.h"
#include "hardware/cpu/step_state.h"
#include "hardware/cpu/torch_baseline/torch_ops.h"
#include "hardware/op_cases.h"
#include "hardware/reference/model_ops_reference.h"
#include "hardware/reference/quant_format.h"

namespace kiln::hardware {
namespace {

using Clock = std::chrono::steady_clock;
double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

absl::Status StepState::Prepare(const std::function<const StepKernel*(const v1::Workload&)>& find) {
  std::vector<const codegen::StepOp*> ops;
  for (const auto& op : graph_.layer) ops.push_back(&op);
  for (const auto& op : graph_.tail) ops.push_back(&op);
  for (const auto* op : ops) {
    const std::string key = codegen::WorkloadKey(op->workload);
    const StepKernel* k = find(op->workload);
    if (!k) return absl::FailedPreconditionError(absl::StrCat("step: no kernel for ", key));
    kernels_[key] = k;
  }
  // Weights packed ahead of time for GEMM kernels that take them so (constant at inference).
  auto pack = [&](const v1::Workload& w, const void* weight) {
    const StepKernel* k = kernels_[codegen::WorkloadKey(w)];
    if (packed_.count(weight)) return;
    if (k->gemm && k->pack && k->pack_floats) {
      const int N = w.dims().at("N"), K = w.dims().at("K");
      float* p = Floats(k->pack_floats(N, K));
      k->pack(N, K, static_cast<const float*>(weight), p);
      packed_[weight] = p;
    } else if (k->op && k->op_pack && k->op_pack_bytes) {
      const std::vector<long long> dims = codegen::OrderedDims(w);
      float* p = Floats((k->op_pack_bytes(dims.data()) + 3) / 4);
      k->op_pack(dims.data(), weight, p);
      packed_[weight] = p;
    }
  };
  // The LibTorch step holds its weights as a PyTorch model does: [N,K] per nn.Linear.
  auto linear = [&](const v1::Workload& w, const void* key) {
    if (linear_.count(key)) return;
    const void* weight = key;
    const size_t N = w.dims().at("N"), K = w.dims().at("K");
    const bool bf16 = w.dtype() == v1::BF16;
    void* t = Floats(bf16 ? (N * K + 1) / 2 : N * K);
    std::vector<float> dequantized;  // quantized weights: LibTorch gets them in fp32
    if (codegen::IsQuantized(w.dtype())) {
      dequantized = DequantizeWeights(static_cast<const uint8_t*>(weight), K, N);
      weight = dequantized.data();
    }
    constexpr size_t kBlock = 64;  // cache-blocked: a weight can be hundreds of MB
    for (size_t k0 = 0; k0 < K; k0 += kBlock)
      for (size_t n0 = 0; n0 < N; n0 += kBlock)
        for (size_t k = k0; k < std::min(K, k0 + kBlock); ++k)
          for (size_t n = n0; n < std::min(N, n0 + kBlock); ++n) {
            if (bf16)
              static_cast<uint16_t*>(t)[n * K + k] =
                  static_cast<const uint16_t*>(weight)[k * N + n];
            else
              static_cast<float*>(t)[n * K + k] = static_cast<const float*>(weight)[k * N + n];
          }
    linear_[key] = t;
    if (bf16) {  // the fp32-weights variant's copy: the same [N,K] values, widened
      float* f = Floats(N * K);
      WidenBf16(static_cast<const uint16_t*>(t), N * K, f);
      linear_fp32_[key] = f;
    }
  };
  for (Layer& l : layer_)
    for (const auto& op : graph_.layer)
      if (op.workload.op() == v1::GEMM) {
        pack(op.workload, l.w[op.role]);
        linear(op.workload, l.w[op.role]);
      }
  for (const auto& op : graph_.tail)
    if (op.workload.op() == v1::GEMM) {
      pack(op.workload, head_);
      linear(op.workload, head_);
    }
  // MoE: fill the experts the router selects, layer by layer, until the routing is stable.
  auto derive = [&](Layer& l) {
    for (const auto& op : graph_.layer)
      if (op.workload.op() == v1::MOE_GEMM) DeriveExpertCopies(op, l.w[op.role], l.filled_experts);
  };
  for (Layer& l : layer_) derive(l);
  for (int round = 0; round <= layers_; ++round) {
    bool any = false;
    for (Layer& l : layer_) l.routed_experts.clear();
    RETURN_IF_ERROR(Run(true).status());
    for (Layer& l : layer_) {
      bool filled = false;
      for (int e : l.routed_experts) {
        if (l.filled_experts.count(e)) continue;
        for (const auto& op : graph_.layer)
          if (op.workload.op() == v1::MOE_GEMM) FillExpert(op.workload, l.w[op.role], e);
        l.filled_experts.insert(e);
        filled = true;
      }
      if (filled) derive(l);
      any = any || filled;
    }
    if (!any) break;
  }
  return absl::OkStatus();
}

void StepState::DeriveExpertCopies(const codegen::StepOp& op, const void* weight,
                                   const std::set<int>& experts) {
  const v1::Workload& w = op.workload;
  const StepKernel* k = kernels_.at(codegen::WorkloadKey(w));
  if (k->op && k->op_pack && k->op_pack_bytes) {  // packed into the same buffer each time
    const std::vector<long long> dims = codegen::OrderedDims(w);
    float*& p = packed_[weight];
    if (!p) p = Floats((k->op_pack_bytes(dims.data()) + 3) / 4);
    k->op_pack(dims.data(), weight, p);
  }
  if (codegen::IsQuantized(w.dtype())) {  // only the filled experts: the rest stay untouched zeros
    const int64_t E = w.dims().at("E"), K = w.dims().at("K"), N = w.dims().at("N");
    void*& d = linear_[weight];
    if (!d) d = Floats(E * K * N);
    for (int e : experts)
      DequantizeRows(static_cast<const uint8_t*>(weight), E * K, N, e * K, (e + 1) * K,
                     static_cast<float*>(d) + e * K * N);
  }
}

absl::Status StepState::Call(const codegen::StepOp& op, std::vector<void*> args,
                             std::vector<float> params, bool kiln) {
  const std::vector<long long> dims = codegen::OrderedDims(op.workload);
  if (params.empty()) params.push_back(0);
  const auto start = profiling_ ? Clock::now() : Clock::time_point();
  auto done = [&](absl::Status s) {
    if (profiling_) {
      auto& p = profile_[(kiln ? "kiln " : "torch ") + op.role];
      p.first += Us(start, Clock::now());
      p.second++;
    }
    return s;
  };
  if (!kiln) {
    if (op.workload.op() == v1::GEMM && onednn_linear_) return done(OnednnGemm(op, args));
    if (op.workload.op() == v1::GEMM && fp32_linear_ && linear_fp32_.count(args[1])) {
      v1::Workload w = op.workload;
      w.set_dtype(v1::FP32);
      args[1] = linear_fp32_.at(args[1]);
      return done(torch_baseline::RunLinear(w, dims.data(), args.data()));
    }
    if (op.workload.op() == v1::GEMM && linear_.count(args[1])) {
      args[1] = linear_.at(args[1]);
      return done(torch_baseline::RunLinear(TorchWorkload(op.workload), dims.data(), args.data()));
    }
    if (op.workload.op() == v1::MOE_GEMM && linear_.count(args[1]))  // dequantized experts
      args[1] = linear_.at(args[1]);
    return done(
        torch_baseline::RunOp(TorchWorkload(op.workload), dims.data(), args.data(), params.data()));
  }
  const StepKernel* k = kernels_.at(codegen::WorkloadKey(op.workload));
  if (k->op) {
    if (k->op_pack && args.size() > 1) {  // weights packed ahead of time, when the kernel takes so
      auto p = packed_.find(args[1]);
      if (p != packed_.end()) args[1] = p->second;
    }
    k->op(dims.data(), args.data(), params.data());
  } else {
    auto p = packed_.find(args[1]);
    const float* b = p == packed_.end() ? static_cast<const float*>(args[1]) : p->second;
    k->gemm(dims[0], dims[1], dims[2], static_cast<const float*>(args[0]), b,
            static_cast<float*>(args[4]));
  }
  return done(absl::OkStatus());
}

absl::Status StepState::OnednnGemm(const codegen::StepOp& op, const std::vector<void*>& args) {
  const auto& d = op.workload.dims();
  const int M = d.at("M"), N = d.at("N"), K = d.at("K");
  const bool bf16 = op.workload.dtype() == v1::BF16, widen = bf16 && fp32_linear_;
  auto& made = widen ? onednn_fp32_ : onednn_;
  auto it = made.find(args[1]);
  if (it == made.end()) {
    ASSIGN_OR_RETURN(auto mm, cpu_baselines::OnednnMatmul::Create(M, N, K, bf16 && !widen));
    OnednnLinear l;
    l.packed = Floats((mm->PackedBytes() + 3) / 4);
    if (codegen::IsQuantized(op.workload.dtype())) {  // oneDNN gets the dequantized weights
      mm->Pack(DequantizeWeights(static_cast<const uint8_t*>(args[1]), K, N).data(), l.packed);
    } else if (widen) {  // bf16 [K,N] widened to fp32 once, as a model loaded in fp32 holds it
      std::vector<float> f(static_cast<size_t>(K) * N);
      WidenBf16(static_cast<const uint16_t*>(args[1]), f.size(), f.data());
      mm->Pack(f.data(), l.packed);
    } else {
      mm->Pack(args[1], l.packed);
    }
    l.matmul = std::shared_ptr<cpu_baselines::OnednnMatmul>(std::move(mm));
    it = made.emplace(args[1], l).first;
  }
  float* C = static_cast<float*>(args[4]);
  static_cast<cpu_baselines::OnednnMatmul*>(it->second.matmul.get())
      ->Run(static_cast<const float*>(args[0]), it->second.packed, C);
  const std::string& e = op.workload.epilogue();  // the epilogues' order of torch_ops' Epilogue
  const float* bias = static_cast<const float*>(args[2]);
  const float* R = static_cast<const float*>(args[3]);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float& c = C[m * N + n];
      if (e == "bias") c += bias[n];
      if (e == "silu") c = c / (1 + std::exp(-c));
      if (e == "gelu") c = 0.5f * c * (1 + std::tanh(0.7978845608f * (c + 0.044715f * c * c * c)));
      if (e == "residual") c += R[m * N + n];
    }
  return absl::OkStatus();
}

absl::Status StepState::RunLayer(int li, bool kiln) {
  Layer& l = layer_[li];
  const v1::ModelArch& a = req_.arch();
  const bool prefill = req_.phase() == "prefill";
  const int64_t B = req_.batch(), S = prefill ? req_.prefill_tokens() : 1, T = B * S;
  const int64_t hid = a.hidden(), KV = a.kv_heads(), hd = a.head_dim(), L = req_.context();
  const int64_t K = a.experts_per_token(), di = a.d_inner(), ds = a.d_state(), r = a.dt_rank();
  const float eps = static_cast<float>(a.rms_eps() > 0 ? a.rms_eps() : 1e-5);
  const float theta = static_cast<float>(a.rope_theta() > 0 ? a.rope_theta() : 10000);
  const float scale = hd > 0 ? 1.0f / std::sqrt(static_cast<float>(hd)) : 1;
  float *gate = g_, *up = u_;  // swiglu's inputs (moe_gate / moe_up, or gate_up_proj's halves)
  for (const auto& op : graph_.layer) {
    const std::string& role = op.role;
    void* W = l.w.count(role) ? l.w[role] : nullptr;
    void* bias = l.bias.count(role) ? l.bias[role] : nullptr;
    absl::Status s;
    if (role == "input_norm") {
      s = Call(op, {x_, l.norm1, h_, nullptr}, {eps}, kiln);
    } else if (role == "post_norm") {
      s = Call(op, {x_, l.norm2, h_, nullptr}, {eps}, kiln);
    } else if (role == "qkv_proj") {
      s = Call(op, {h_, W, bias, nullptr, qkv_}, {}, kiln);
      const int64_t H = a.heads(), row = (H + 2 * KV) * hd;
      for (int64_t t = 0; t < T; ++t) {  // split each token's [q | k | v]
        std::memcpy(q_ + t * H * hd, qkv_ + t * row, H * hd * 4);
        std::memcpy(k_ + t * KV * hd, qkv_ + t * row + H * hd, KV * hd * 4);
        std::memcpy(v_ + t * KV * hd, qkv_ + t * row + (H + KV) * hd, KV * hd * 4);
      }
    } else if (role == "rope_q" || role == "rope_k") {
      s = Call(op, {role == "rope_q" ? q_ : k_, pos_.data()}, {theta, 0}, kiln);
    } else if (role == "attention" && prefill) {
      s = Call(op, {q_, k_, v_, attn_}, {scale}, kiln);
    } else if (role == "attention") {
      for (int64_t b = 0; b < B; ++b)  // append the new token's k and v at position L-1
        for (int64_t h = 0; h < KV; ++h) {
          const size_t at = ((b * KV + h) * L + L - 1) * hd;
          std::memcpy(l.kcache + at, k_ + (b * KV + h) * hd, hd * 4);
          std::memcpy(l.vcache + at, v_ + (b * KV + h) * hd, hd * 4);
        }
      s = Call(op, {q_, l.kcache, l.vcache, attn_}, {scale}, kiln);
    } else if (role == "o_proj" || role == "down_proj" || role == "out_proj") {
      float* in = role == "o_proj" ? attn_ : role == "down_proj" ? act_ : y_;
      s = Call(op, {in, W, nullptr, x_, x2_}, {}, kiln);
      std::swap(x_, x2_);
    } else if (role == "gate_up_proj") {
      s = Call(op, {h_, W, nullptr, nullptr, gu_}, {}, kiln);
      const int64_t F = a.intermediate();
      if (T == 1) {  // one token: swiglu reads the two halves in place
        gate = gu_, up = gu_ + F;
      } else {  // split each token's [gate | up]
        for (int64_t t = 0; t < T; ++t) {
          std::memcpy(g_ + t * F, gu_ + t * 2 * F, F * 4);
          std::memcpy(u_ + t * F, gu_ + t * 2 * F + F, F * 4);
        }
      }
    } else if (role == "swiglu") {
      s = Call(op, {gate, up, act_}, {}, kiln);
    } else if (role == "router") {
      s = Call(op, {h_, l.router, rw_, re_}, {}, kiln);
      for (int64_t i = 0; i < T * K; ++i) l.routed_experts.insert(re_[i]);
      for (int64_t t = 0; t < T; ++t)  // each token's row once per selected expert
        for (int64_t k = 0; k < K; ++k)
          std::memcpy(xrep_ + (t * K + k) * hid, h_ + t * hid, hid * 4);
    } else if (role == "moe_gate" || role == "moe_up") {
      s = Call(op, {xrep_, W, re_, role == "moe_gate" ? g_ : u_}, {}, kiln);
    } else if (role == "moe_down") {
      s = Call(op, {act_, W, re_, dn_}, {}, kiln);
      for (int64_t t = 0; t < T; ++t)  // weighted sum of the experts' outputs + residual
        for (int64_t i = 0; i < hid; ++i) {
          float acc = x_[t * hid + i];
          for (int64_t k = 0; k < K; ++k) acc += rw_[t * K + k] * dn_[(t * K + k) * hid + i];
          x2_[t * hid + i] = acc;
        }
      std::swap(x_, x2_);
    } else if (role == "in_proj") {
      s = Call(op, {h_, W, nullptr, nullptr, xz_}, {}, kiln);
      for (int64_t t = 0; t < T; ++t) {  // split into the scan's input x and its gate z
        std::memcpy(xs_ + t * di, xz_ + t * 2 * di, di * 4);
        std::memcpy(z_ + t * di, xz_ + t * 2 * di + di, di * 4);
      }
    } else if (role == "conv1d") {
      s = Call(op, {xs_, l.conv_w, l.conv_b, l.conv_state, xc_}, {1}, kiln);
    } else if (role == "x_proj") {
      s = Call(op, {xc_, W, nullptr, nullptr, xdbl_}, {}, kiln);
      for (int64_t t = 0; t < T; ++t) {  // split into dt, B and C
        std::memcpy(dtin_ + t * r, xdbl_ + t * (r + 2 * ds), r * 4);
        std::memcpy(bm_ + t * ds, xdbl_ + t * (r + 2 * ds) + r, ds * 4);
        std::memcpy(cm_ + t * ds, xdbl_ + t * (r + 2 * ds) + r + ds, ds * 4);
      }
    } else if (role == "dt_proj") {
      s = Call(op, {dtin_, W, bias, nullptr, dt_}, {}, kiln);
    } else if (role == "ssm_scan") {
      s = Call(op, {xc_, dt_, l.A, bm_, cm_, l.Dp, z_, l.ssm_state, y_}, {1}, kiln);
    } else {
      return absl::InternalError(absl::StrCat("step: no wiring for operator role ", role));
    }
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<double, double>> StepState::Run(bool kiln) {
  const v1::ModelArch& a = req_.arch();
  const int64_t hid = a.hidden(), V = a.vocab(), B = req_.batch();
  const int64_t S = req_.phase() == "prefill" ? req_.prefill_tokens() : 1;
  const auto t0 = Clock::now();
  for (size_t t = 0; t < tokens_.size(); ++t)  // embedding: the head's column of the token
    for (int64_t i = 0; i < hid; ++i) {
      const size_t e = static_cast<size_t>(i) * V + tokens_[t];
      x_[t * hid + i] =
          head_dtype_ == v1::BF16 ? Bf16ToFloat(static_cast<uint16_t*>(head_)[e])
          : codegen::IsQuantized(head_dtype_)
              ? DequantizedWeight(static_cast<const uint8_t*>(head_), hid, V, i, tokens_[t])
              : static_cast<float*>(head_)[e];
    }
  for (int l = 0; l < layers_; ++l) RETURN_IF_ERROR(RunLayer(l, kiln));
  const auto t1 = Clock::now();
  for (int64_t b = 0; b < B; ++b)  // the head reads each sequence's last position
    std::memcpy(hl_ + b * hid, x_ + (b * S + S - 1) * hid, hid * 4);
  const float eps = static_cast<float>(a.rms_eps() > 0 ? a.rms_eps() : 1e-5);
  for (const auto& op : graph_.tail) {
    if (op.role == "final_norm")
      RETURN_IF_ERROR(Call(op, {hl_, norm_f_, hf_, nullptr}, {eps}, kiln));
    if (op.role == "lm_head")
      RETURN_IF_ERROR(Call(op, {hf_, head_, nullptr, nullptr, logits_}, {}, kiln));
    if (op.role == "probs") RETURN_IF_ERROR(Call(op, {logits_, probs_}, {}, kiln));
  }
  return std::make_pair(Us(t0, t1), Us(t1, Clock::now()));
}

std::vector<float> StepState::Logits() const {
  return std::vector<float>(logits_, logits_ + req_.batch() * req_.arch().vocab());
}

void StepState::SaveState() {
  saved_.clear();
  for (const Layer& l : layer_) {
    if (l.conv_state) {
      const size_t n = req_.batch() * (req_.arch().d_conv() - 1) * req_.arch().d_inner();
      saved_.emplace_back(l.conv_state, l.conv_state + n);
    }
    if (l.ssm_state) {
      const size_t n = req_.batch() * req_.arch().d_inner() * req_.arch().d_state();
      saved_.emplace_back(l.ssm_state, l.ssm_state + n);
    }
  }
}

void StepState::RestoreState() {
  size_t i = 0;
  for (Layer& l : layer_) {
    if (l.conv_state) std::copy(saved_[i].begin(), saved_[i].end(), l.conv_state), ++i;
    if (l.ssm_state) std::copy(saved_[i].begin(), saved_[i].end(), l.ssm_state), ++i;
  }
}

}  // namespace kiln::hardware
