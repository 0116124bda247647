// A model step as an ordered list of operator invocations: shared by the planner (which turns it
// into tasks with multiplicities) and the CPU step runner (which executes it on real buffers).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/types.pb.h"

namespace kiln::codegen {

// One operator invocation of the step. `role` says what it computes ("qkv_proj", "rope_k",
// "moe_down", ...), which is what the step runner wires buffers by.
struct StepOp {
  std::string role;
  v1::Workload workload;
};

struct StepGraph {
  std::vector<StepOp> layer;  // run once per layer, in order
  std::vector<StepOp> tail;   // run once per step after the layers (final norm, head, softmax)
  int layers = 0;
  int tokens = 0;  // tokens produced (decode: batch) or consumed (prefill) per step
};

// Decode: `batch` sequences, each attending over `context` positions (the new one included).
// Prefill: `batch` sequences of `prefill_tokens`. dtype: weights of gemm and moe_gemm (int8 and
// int4 apply to GEMMs and expert GEMMs with K a multiple of 32, the others stay in fp32).
absl::StatusOr<StepGraph> BuildStepGraph(const v1::ModelArch& arch, const std::string& phase,
                                         int batch, int context, int prefill_tokens,
                                         v1::DType dtype);

// Parameters held by the graph's operators (GEMM weights and biases, norms, conv, SSM, router)
// plus the embedding table when it is not tied to the head: the model's parameter count.
int64_t GraphParameters(const v1::ModelArch& arch, const StepGraph& graph);

// Bytes one step must read from memory at the least: every weight it uses once (GEMM weights at
// their dtype, biases, norms, conv and router weights; of a MoE layer only the experts its tokens
// can select, at most E) and the KV cache or SSM state it attends over (fp32). Activations are
// left out. The memory-bandwidth bound of a step is these bytes over the read bandwidth. Each
// operator's weights count at its workload's dtype (int8 1.0625 bytes with its scales).
double StepBytesRead(const StepGraph& graph);

// Layers a step request runs by default: all of them when their weights fit in ~1.2 GB, else
// as many as do (at least 2).
int DefaultStepLayers(const v1::ModelArch& arch, v1::DType dtype);

}  // namespace kiln::codegen
