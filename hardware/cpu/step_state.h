// The buffers of a composed model step (weights, KV cache, SSM state, activations) and one pass
// of the step through either Kiln's kernels or LibTorch's eager operators.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/model_graph.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// A compiled kernel as the step calls it: the operator ABI, or the GEMM template's ABI with an
// optional prepack of the (constant) weights.
struct StepKernel {
  using GemmEntry = void (*)(int M, int N, int K, const float* A, const float* B, float* C);
  codegen::CpuOpFn op = nullptr;
  GemmEntry gemm = nullptr;
  long (*pack_floats)(int N, int K) = nullptr;
  void (*pack)(int N, int K, const float* B, float* packed) = nullptr;
  // Operator kernels that take their weights packed (codegen/cpu/op_templates.h).
  long (*op_pack_bytes)(const long long* dims) = nullptr;
  void (*op_pack)(const long long* dims, const void* weights, void* packed) = nullptr;
};

class StepState {
 public:
  static absl::StatusOr<std::unique_ptr<StepState>> Create(const v1::StepRequest& req,
                                                           uint64_t seed);
  ~StepState();
  // Binds the kernels, fills the weights and state, packs weights for kernels that want it and,
  // for MoE models, fills the experts the router actually selects.
  absl::Status Prepare(const std::function<const StepKernel*(const v1::Workload&)>& find);
  // One step; returns (microseconds in the layers, microseconds in the head).
  absl::StatusOr<std::pair<double, double>> Run(bool kiln);
  std::vector<float> Logits() const;
  void SaveState();
  void RestoreState();
  int layers() const { return layers_; }
  // Per operator role: accumulated microseconds and calls since the last reset (for profiling).
  std::map<std::string, std::pair<double, int>>& profile() { return profile_; }
  void set_profiling(bool on) { profiling_ = on; }
  // The LibTorch step's projections through oneDNN matmul on weights packed ahead of time into
  // oneDNN's layout (what ipex.optimize does for a PyTorch model) instead of F.linear.
  void set_onednn_linear(bool on) { onednn_linear_ = on; }
  // A bf16 job's LibTorch step with its projections in fp32 on weights widened once at load (what
  // a user runs where LibTorch has no fast bf16 matmul: CPUs without AVX-512).
  void set_fp32_linear(bool on) { fp32_linear_ = on; }
  int tokens() const { return graph_.tokens; }
  const codegen::StepGraph& graph() const { return graph_; }

 private:
  struct Layer {
    std::map<std::string, void*> w;      // role -> weight operand
    std::map<std::string, float*> bias;  // role -> bias
    float *norm1 = nullptr, *norm2 = nullptr, *kcache = nullptr, *vcache = nullptr;
    float *router = nullptr, *conv_w = nullptr, *conv_b = nullptr, *conv_state = nullptr;
    float *A = nullptr, *Dp = nullptr, *ssm_state = nullptr;
    std::set<int> filled_experts, routed_experts;
  };
  StepState() = default;
  float* Floats(size_t n);  // zeroed, untouched until used
  // n elements, fp32 or (GEMM operands of a bf16 job) bf16, uniform * scale unless !fill.
  void* Weight(size_t n, float scale, bool bf16 = false, bool fill = true);
  void FillWeight(void* w, size_t offset, size_t n, float scale, bool bf16);
  // A GEMM's K x N weights at the workload's dtype: fp32, bf16, or quantized (plain layout,
  // hardware/reference/quant_format.h) from uniform * scale.
  void* GemmWeight(const v1::Workload& w, float scale);
  // Rows [first, first + count) (whole groups) of a quantized `rows` x N weight in the plain
  // layout, from uniform * scale.
  void FillQuantRows(const v1::Workload& w, uint8_t* plain, int64_t rows, int64_t first,
                     int64_t count, float scale);
  // Expert e of a grouped GEMM's weights (E x K x N at the workload's dtype).
  void FillExpert(const v1::Workload& w, void* weight, int64_t e);
  // A grouped GEMM's copies made from its weights (Kiln's packed layout, LibTorch's dequantized
  // fp32 of `experts`, the filled ones), made again after experts are filled.
  void DeriveExpertCopies(const codegen::StepOp& op, const void* weight,
                          const std::set<int>& experts);
  // The LibTorch step's view of a weight: a workload computing in fp32 where Kiln's is quantized
  // (the torch routes get the dequantized weights).
  static v1::Workload TorchWorkload(const v1::Workload& w);
  absl::Status Call(const codegen::StepOp& op, std::vector<void*> args, std::vector<float> params,
                    bool kiln);
  absl::Status RunLayer(int l, bool kiln);

  v1::StepRequest req_;
  codegen::StepGraph graph_;
  int layers_ = 0;
  uint64_t seed_ = 1;
  std::vector<std::pair<void*, size_t>> regions_;  // mmap'd (pointer, bytes)
  std::vector<Layer> layer_;
  std::map<std::string, const StepKernel*> kernels_;  // by workload key
  std::map<const void*, float*> packed_;              // weight -> kernel's packed copy
  v1::DType head_dtype_ = v1::FP32;                   // the head's (and embedding's) weights
  // weight -> the LibTorch step's copy: a GEMM's in nn.Linear's [N,K] layout (as a PyTorch model
  // holds it), quantized experts' dequantized to fp32
  std::map<const void*, void*> linear_;
  std::map<const void*, float*> linear_fp32_;  // a bf16 weight -> its [N,K] copy widened to fp32
  bool fp32_linear_ = false;
  // weight -> its oneDNN matmul and packed copy, made on first use (a warm-up step)
  struct OnednnLinear {
    std::shared_ptr<void> matmul;  // cpu_baselines::OnednnMatmul
    void* packed = nullptr;
  };
  std::map<const void*, OnednnLinear> onednn_, onednn_fp32_;
  bool onednn_linear_ = false;
  absl::Status OnednnGemm(const codegen::StepOp& op, const std::vector<void*>& args);
  void* head_ = nullptr;
  float* norm_f_ = nullptr;
  std::vector<int32_t> pos_, tokens_;
  // Activations (shared by the layers) and the residual stream's two buffers.
  float *x_ = nullptr, *x2_ = nullptr, *h_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
  float *attn_ = nullptr, *g_ = nullptr, *u_ = nullptr, *act_ = nullptr, *xrep_ = nullptr;
  float *qkv_ = nullptr,
        *gu_ = nullptr;  // the fused projections' outputs, per token [q|k|v], [g|u]
  float *rw_ = nullptr, *dn_ = nullptr, *xz_ = nullptr, *xs_ = nullptr, *z_ = nullptr;
  float *xc_ = nullptr, *xdbl_ = nullptr, *dtin_ = nullptr, *dt_ = nullptr, *bm_ = nullptr;
  float *cm_ = nullptr, *y_ = nullptr, *hl_ = nullptr, *hf_ = nullptr, *logits_ = nullptr;
  float* probs_ = nullptr;
  int32_t* re_ = nullptr;
  std::vector<std::vector<float>> saved_;
  std::map<std::string, std::pair<double, int>> profile_;
  bool profiling_ = false;
};

}  // namespace kiln::hardware
