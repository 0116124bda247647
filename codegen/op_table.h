// The operator table, shape half: for every operator, its dimensions (in the order that keys
// records and that kernels receive them), the dtypes and epilogues it takes, its extra rules, and
// its FLOP and byte counts. The coordinator validates, keys and costs workloads from it without
// linking a device. The verification half (operands, inputs, the double-precision reference and
// the tolerance) is hardware/op_cases.cc, one case per operator of this table.
#pragma once

#include <string>
#include <vector>

#include "kiln/v1/types.pb.h"

namespace kiln::codegen {

// A workload's dimensions by name, as doubles (0 when absent), for the table's formulas.
class DimValues {
 public:
  explicit DimValues(const v1::Workload& w) : w_(w) {}
  double operator()(const char* name) const;

 private:
  const v1::Workload& w_;
};

struct Operator {
  v1::OpKind kind = v1::OP_KIND_UNSPECIFIED;
  // Dimension names in key order, which is also the order of the kernel ABI's `dims` argument.
  std::vector<const char*> dims;
  const char* meaning = "";  // the convention in one line: operands, layouts, what is computed
  // Weight dtypes besides fp32 (activations are always fp32). Quantized ones (int8, int4) group
  // 32 weights along `quant_dim` under one scale, so that dimension must be a multiple of 32.
  std::vector<v1::DType> weight_dtypes;
  const char* quant_dim = "";
  std::vector<const char*> epilogues;  // fused epilogues it takes ("bias", "residual", ...)
  // An extra rule on the dimensions: "" when it holds, else the rule in words.
  const char* (*rule)(const DimValues& d) = nullptr;
  double (*flops)(const DimValues& d) = nullptr;
  // Compulsory bytes moved (inputs read once, outputs written once); `weight_bytes` is the
  // weights' bytes per element for the workload's dtype (WeightBytes).
  double (*bytes)(const DimValues& d, double weight_bytes) = nullptr;
};

// Every operator, in OpKind order.
const std::vector<Operator>& Operators();
// The operator's entry, or null for an OpKind the table does not have.
const Operator* FindOperator(v1::OpKind kind);

// The workload's dimension values in the table's order (0 for a missing one; empty for an
// unknown operator).
std::vector<long long> OrderedDims(const v1::Workload& w);

}  // namespace kiln::codegen
