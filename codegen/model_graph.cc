#include "codegen/model_graph.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"

namespace kiln::codegen {
namespace {

v1::Workload W(v1::OpKind op, std::initializer_list<std::pair<const char*, int64_t>> dims,
               v1::DType dtype = v1::FP32, const std::string& epilogue = "") {
  v1::Workload w;
  w.set_op(op);
  w.set_dtype(dtype);
  w.set_epilogue(epilogue);
  for (const auto& [k, v] : dims) (*w.mutable_dims())[k] = v;
  return w;
}

// A quantized format applies to the GEMMs (and expert GEMMs) whose K is whole groups of 32; any
// other (a Mamba dt_proj of K=dt_rank) stays in fp32, as llama.cpp keeps such tensors at higher
// precision.
v1::Workload Gemm(int64_t m, int64_t n, int64_t k, v1::DType dtype, const std::string& epi = "") {
  if (IsQuantized(dtype) && k % 32 != 0) dtype = v1::FP32;
  return W(v1::GEMM, {{"M", m}, {"N", n}, {"K", k}}, dtype, epi);
}

int64_t Dim(const v1::Workload& w, const char* d) {
  auto it = w.dims().find(d);
  return it == w.dims().end() ? 0 : it->second;
}

// The parameters an operator holds (GEMM weights and bias, norm, router, conv, SSM A and skip).
int64_t OpParameters(const StepOp& op) {
  const v1::Workload& w = op.workload;
  switch (w.op()) {
    case v1::GEMM: {
      if (op.role == "lm_head") return Dim(w, "K") * Dim(w, "N");
      return Dim(w, "K") * Dim(w, "N") + (w.epilogue() == "bias" ? Dim(w, "N") : 0);
    }
    case v1::RMSNORM:
      return Dim(w, "D");
    case v1::MOE_ROUTER:
      return Dim(w, "D") * Dim(w, "E");
    case v1::MOE_GEMM:
      return Dim(w, "E") * Dim(w, "K") * Dim(w, "N");
    case v1::CONV1D:
      return Dim(w, "D") * (Dim(w, "W") + 1);
    case v1::SSM_SCAN:
      return Dim(w, "D") * (Dim(w, "S") + 1);  // A and the skip D
    default:
      return 0;
  }
}

}  // namespace

absl::StatusOr<StepGraph> BuildStepGraph(const v1::ModelArch& a, const std::string& phase,
                                         int batch, int context, int prefill_tokens,
                                         v1::DType dtype) {
  const bool prefill = phase == "prefill";
  if (!prefill && phase != "decode" && !phase.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("phase: expected decode or prefill, got '", phase, "'"));
  if (batch < 1) return absl::InvalidArgumentError("batch: must be >= 1");
  if (!prefill && context < 1) return absl::InvalidArgumentError("context: must be >= 1");
  if (prefill && prefill_tokens < 1)
    return absl::InvalidArgumentError("prefill_tokens: must be >= 1 for a prefill job");
  const int64_t B = batch, S = prefill ? prefill_tokens : 1, T = B * S;
  const int64_t hid = a.hidden();
  StepGraph g;
  g.layers = a.layers();
  g.tokens = static_cast<int>(T);
  auto add = [&](const char* role, v1::Workload w) { g.layer.push_back({role, std::move(w)}); };
  auto rms = [&](int64_t d) { return W(v1::RMSNORM, {{"T", T}, {"D", d}}); };
  if (a.family() == "llama" || a.family() == "mixtral") {
    const int64_t H = a.heads(), KV = a.kv_heads(), hd = a.head_dim(), F = a.intermediate();
    const std::string bias = a.qkv_bias() ? "bias" : "";
    add("input_norm", rms(hid));
    // q, k and v as one GEMM over the concatenated weights (and gate and up below), as vLLM and
    // llama.cpp's fused projections do: one pass over the input and one larger stream of weights
    // instead of three calls, two of them small (k and v stream 2 MiB each in tinyllama).
    add("qkv_proj", Gemm(T, (H + 2 * KV) * hd, hid, dtype, bias));
    add("rope_q", W(v1::ROPE, {{"T", T}, {"H", H}, {"D", hd}}));
    add("rope_k", W(v1::ROPE, {{"T", T}, {"H", KV}, {"D", hd}}));
    if (prefill)
      add("attention",
          W(v1::ATTENTION_PREFILL, {{"B", B}, {"H", H}, {"KVH", KV}, {"D", hd}, {"S", S}}));
    else
      add("attention",
          W(v1::ATTENTION_DECODE, {{"B", B}, {"H", H}, {"KVH", KV}, {"D", hd}, {"L", context}}));
    add("o_proj", Gemm(T, hid, H * hd, dtype, "residual"));
    add("post_norm", rms(hid));
    if (a.family() == "llama") {
      add("gate_up_proj", Gemm(T, 2 * F, hid, dtype));  // [gate | up] per token
      add("swiglu", W(v1::SWIGLU, {{"T", T}, {"F", F}}));
      add("down_proj", Gemm(T, hid, F, dtype, "residual"));
    } else {
      const int64_t E = a.experts(), K = a.experts_per_token();
      add("router", W(v1::MOE_ROUTER, {{"T", T}, {"D", hid}, {"E", E}, {"TOPK", K}}));
      auto moe = [&](int64_t n, int64_t k) {
        return W(v1::MOE_GEMM, {{"T", T}, {"E", E}, {"TOPK", K}, {"N", n}, {"K", k}},
                 IsQuantized(dtype) && k % 32 != 0 ? v1::FP32 : dtype);
      };
      add("moe_gate", moe(F, hid));
      add("moe_up", moe(F, hid));
      add("swiglu", W(v1::SWIGLU, {{"T", T * K}, {"F", F}}));
      add("moe_down", moe(hid, F));
    }
  } else if (a.family() == "mamba") {
    const int64_t di = a.d_inner(), ds = a.d_state(), r = a.dt_rank();
    add("input_norm", rms(hid));
    add("in_proj", Gemm(T, 2 * di, hid, dtype));
    add("conv1d", W(v1::CONV1D, {{"B", B}, {"T", S}, {"D", di}, {"W", a.d_conv()}}));
    add("x_proj", Gemm(T, r + 2 * ds, di, dtype));
    add("dt_proj", Gemm(T, di, r, dtype, "bias"));
    add("ssm_scan", W(v1::SSM_SCAN, {{"B", B}, {"T", S}, {"D", di}, {"S", ds}}));
    add("out_proj", Gemm(T, hid, di, dtype, "residual"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model.family: unknown architecture family '", a.family(), "'"));
  }
  // The head runs on the last position of each sequence only.
  g.tail.push_back({"final_norm", W(v1::RMSNORM, {{"T", B}, {"D", hid}})});
  g.tail.push_back({"lm_head", Gemm(B, a.vocab(), hid, dtype)});
  g.tail.push_back({"probs", W(v1::SOFTMAX, {{"T", B}, {"N", a.vocab()}})});
  return g;
}

int64_t GraphParameters(const v1::ModelArch& a, const StepGraph& g) {
  int64_t n = 0;
  for (const auto& op : g.layer) n += OpParameters(op) * g.layers;
  for (const auto& op : g.tail) n += OpParameters(op);
  // The embedding table: shared with the head when tied, its own parameters otherwise.
  if (!a.tie_embeddings()) n += static_cast<int64_t>(a.vocab()) * a.hidden();
  return n;
}

double StepBytesRead(const StepGraph& g) {
  auto bytes = [&](const StepOp& op) -> double {
    const v1::Workload& w = op.workload;
    const double wb = WeightBytes(w.dtype());  // GEMM and MoE weights; the rest is fp32
    const double params = static_cast<double>(OpParameters(op));
    const double B = Dim(w, "B"), D = Dim(w, "D");
    switch (w.op()) {
      case v1::GEMM: {  // the weight matrix at its dtype, a bias in fp32
        const double matrix = static_cast<double>(Dim(w, "K")) * Dim(w, "N");
        return wb * matrix + 4.0 * (params - matrix);
      }
      case v1::MOE_GEMM: {  // only the experts the step's tokens can select
        const double used = std::min<double>(Dim(w, "E"), Dim(w, "T") * Dim(w, "TOPK"));
        return wb * params * used / Dim(w, "E");
      }
      case v1::ATTENTION_DECODE:  // the K and V caches
        return 4.0 * 2 * B * Dim(w, "KVH") * Dim(w, "L") * D;
      case v1::CONV1D:  // weights and bias, then the rolling state
        return 4.0 * params + 4.0 * B * D * (Dim(w, "W") - 1);
      case v1::SSM_SCAN:  // A and the skip D, then the state
        return 4.0 * params + 4.0 * B * D * Dim(w, "S");
      default:  // norms, the router: fp32 weights
        return 4.0 * params;
    }
  };
  double n = 0;
  for (const auto& op : g.layer) n += bytes(op) * g.layers;
  for (const auto& op : g.tail) n += bytes(op);
  return n;
}

int DefaultStepLayers(const v1::ModelArch& arch, v1::DType dtype) {
  auto graph = BuildStepGraph(arch, "decode", 1, 1, 1, dtype);
  if (!graph.ok() || arch.layers() <= 0) return std::max(1, arch.layers());
  v1::ModelArch one = arch;
  one.set_layers(1);
  one.set_tie_embeddings(true);
  auto g1 = BuildStepGraph(one, "decode", 1, 1, 1, dtype);
  StepGraph layer_only = *g1;
  layer_only.tail.clear();
  // Quantized weights come with the LibTorch step's dequantized fp32 copy of them.
  const double bytes = (WeightBytes(dtype) + (IsQuantized(dtype) ? 4.0 : 0.0)) *
                       static_cast<double>(GraphParameters(one, layer_only));
  const int fit = static_cast<int>(1.2e9 / std::max(1.0, bytes));
  return std::min(arch.layers(), std::max(2, fit));
}

}  // namespace kiln::codegen
