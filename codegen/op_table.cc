#include "codegen/op_table.h"

#include <algorithm>
#include <cmath>

namespace kiln::codegen {

double DimValues::operator()(const char* name) const {
  auto it = w_.dims().find(name);
  return it == w_.dims().end() ? 0 : static_cast<double>(it->second);
}

namespace {

using D = const DimValues&;

// Rules two operators share: grouped-query attention, and routing to experts.
const char* KvhDividesH(D d) { return std::fmod(d("H"), d("KVH")) == 0 ? "" : "KVH must divide H"; }
const char* TopkAtMostE(D d) { return d("TOPK") <= d("E") ? "" : "TOPK must be <= E"; }

std::vector<Operator> MakeTable() {
  std::vector<Operator> ops;
  {
    Operator op;
    op.kind = v1::GEMM;
    op.dims = {"M", "N", "K"};
    op.meaning = "C[M,N] = A[M,K] * B[K,N] (+ epilogue); B is the weight";
    op.weight_dtypes = {v1::BF16, v1::INT8, v1::INT4};
    op.quant_dim = "K";
    op.epilogues = {"bias", "silu", "gelu", "residual"};
    op.flops = [](D d) { return 2 * d("M") * d("N") * d("K"); };
    op.bytes = [](D d, double wb) {
      return wb * d("K") * d("N") + 4 * (d("M") * d("K") + d("M") * d("N"));
    };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::RMSNORM;
    op.dims = {"T", "D"};
    op.meaning = "out[T,D] = x * rsqrt(mean(x^2) + eps) * weight[D] (epilogue residual: x += r)";
    op.epilogues = {"residual"};
    op.flops = [](D d) { return 4 * d("T") * d("D"); };
    op.bytes = [](D d, double) { return 4 * (2 * d("T") * d("D") + d("D")); };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::ROPE;
    op.dims = {"T", "H", "D"};
    op.meaning = "x[T,H,D] rotated in place (rotate_half pairs) at positions pos[T]";
    op.rule = [](D d) -> const char* {
      return std::fmod(d("D"), 2) == 0 ? "" : "D must be even for rope";
    };
    op.flops = [](D d) { return 3 * d("T") * d("H") * d("D"); };
    op.bytes = [](D d, double) { return 4 * 2 * d("T") * d("H") * d("D"); };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::ATTENTION_DECODE;
    op.dims = {"B", "H", "KVH", "D", "L"};
    op.meaning = "out[B,H,D] = softmax(q k^T / sqrt(D)) v over a KV cache k,v[B,KVH,L,D]";
    op.rule = KvhDividesH;
    op.flops = [](D d) { return 4 * d("B") * d("H") * d("D") * d("L"); };
    op.bytes = [](D d, double) {  // the KV cache dominates
      return 4 * (2 * d("B") * d("KVH") * d("L") * d("D") + 2 * d("B") * d("H") * d("D"));
    };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::ATTENTION_PREFILL;
    op.dims = {"B", "H", "KVH", "D", "S"};
    op.meaning = "causal attention of q[B,S,H,D] over k,v[B,S,KVH,D] -> out[B,S,H,D]";
    op.rule = KvhDividesH;
    // Causal: half of the S x S scores, each a D-long dot product and a D-long weighted sum.
    op.flops = [](D d) { return 2 * d("B") * d("H") * d("D") * d("S") * d("S"); };
    op.bytes = [](D d, double) {
      return 4 * d("B") * d("S") * d("D") * (2 * d("H") + 2 * d("KVH"));
    };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::SOFTMAX;
    op.dims = {"T", "N"};
    op.meaning = "out[T,N] = softmax of each of T rows of length N";
    op.flops = [](D d) { return 5 * d("T") * d("N"); };
    op.bytes = [](D d, double) { return 4 * 2 * d("T") * d("N"); };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::SWIGLU;
    op.dims = {"T", "F"};
    op.meaning = "out[T,F] = silu(gate[T,F]) * up[T,F]";
    op.flops = [](D d) { return 6 * d("T") * d("F"); };
    op.bytes = [](D d, double) { return 4 * 3 * d("T") * d("F"); };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::MOE_ROUTER;
    op.dims = {"T", "D", "E", "TOPK"};
    op.meaning = "softmax(x[T,D] * W[D,E]), each token's TOPK experts and renormalised weights";
    op.rule = TopkAtMostE;
    op.flops = [](D d) { return 2 * d("T") * d("D") * d("E"); };
    op.bytes = [](D d, double) {
      return 4 * (d("T") * d("D") + d("D") * d("E") + d("T") * d("E"));
    };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::MOE_GEMM;
    op.dims = {"T", "E", "TOPK", "N", "K"};
    op.meaning = "y[T,TOPK,N] = x[T,TOPK,K] * W[e] for each token's experts e of W[E,K,N]";
    op.weight_dtypes = {v1::BF16, v1::INT8, v1::INT4};
    op.quant_dim = "K";
    op.rule = TopkAtMostE;
    op.flops = [](D d) { return 2 * d("T") * d("TOPK") * d("N") * d("K"); };
    op.bytes = [](D d, double wb) {  // at most min(E, T*TOPK) experts' weights are read
      const double experts = std::min(d("E"), d("T") * d("TOPK"));
      return wb * experts * d("K") * d("N") + 4 * d("T") * d("TOPK") * (d("K") + d("N"));
    };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::SSM_SCAN;
    op.dims = {"B", "T", "D", "S"};
    op.meaning = "Mamba selective scan: d_inner D, state size S, state h[B,D,S] carried";
    op.flops = [](D d) { return 9 * d("B") * d("T") * d("D") * d("S"); };
    op.bytes = [](D d, double) {
      return 4 * d("B") * d("T") * (3 * d("D") + 2 * d("S")) + 4 * 2 * d("D") * d("S");
    };
    ops.push_back(op);
  }
  {
    Operator op;
    op.kind = v1::CONV1D;
    op.dims = {"B", "T", "D", "W"};
    op.meaning = "causal depthwise convolution of width W over x[B,T,D], state carried";
    op.flops = [](D d) { return 2 * d("B") * d("T") * d("D") * d("W"); };
    op.bytes = [](D d, double) { return 4 * (2 * d("B") * d("T") * d("D") + d("D") * d("W")); };
    ops.push_back(op);
  }
  return ops;
}

}  // namespace

const std::vector<Operator>& Operators() {
  static const std::vector<Operator>* table = new std::vector<Operator>(MakeTable());
  return *table;
}

const Operator* FindOperator(v1::OpKind kind) {
  for (const Operator& op : Operators())
    if (op.kind == kind) return &op;
  return nullptr;
}

std::vector<long long> OrderedDims(const v1::Workload& w) {
  std::vector<long long> dims;
  const Operator* op = FindOperator(w.op());
  if (!op) return dims;
  for (const char* name : op->dims) {
    auto it = w.dims().find(name);
    dims.push_back(it == w.dims().end() ? 0 : it->second);
  }
  return dims;
}

}  // namespace kiln::codegen
