// Workloads: parsing "M=8,N=4096,K=4096" shapes, validation per operator, canonical keys, costs.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/types.pb.h"

namespace kiln::codegen {

std::string OpName(v1::OpKind op);                           // GEMM -> "gemm"
absl::StatusOr<v1::OpKind> ParseOp(absl::string_view name);  // case-insensitive
std::string DTypeName(v1::DType dtype);                      // FP32 -> "fp32"
absl::StatusOr<v1::DType> ParseDType(absl::string_view name);
// Bytes a weight of this dtype occupies, its share of the group scales included (int8 1.0625).
double WeightBytes(v1::DType dtype);
bool IsQuantized(v1::DType dtype);  // int8, int4

// Builds a workload from command-line style text. Errors name the field and the rule.
absl::StatusOr<v1::Workload> ParseWorkload(absl::string_view op, absl::string_view shape,
                                           absl::string_view dtype = "fp32");

// Checks the operator is known and supported, its dimensions are the ones it needs and each
// lies in 1..kMaxDim, and the total problem is not absurd. `field` prefixes error messages.
absl::Status ValidateWorkload(const v1::Workload& w, absl::string_view field = "workload");

// Canonical text key that records are keyed on, e.g. "gemm m=8 n=4096 k=4096 fp32".
std::string WorkloadKey(const v1::Workload& w);

double WorkloadFlops(const v1::Workload& w);
// Compulsory bytes moved (inputs read once, outputs written once).
double WorkloadBytes(const v1::Workload& w);

inline constexpr int64_t kMaxDim = 1 << 20;

}  // namespace kiln::codegen
