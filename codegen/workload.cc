#include "codegen/workload.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::codegen {
namespace {

// The dimensions each operator needs, in key order.
std::vector<std::string> RequiredDims(v1::OpKind op) {
  switch (op) {
    case v1::GEMM:
      return {"M", "N", "K"};
    default:
      return {};
  }
}

double DTypeBytes(v1::DType d) { return d == v1::BF16 ? 2 : 4; }

}  // namespace

std::string OpName(v1::OpKind op) { return absl::AsciiStrToLower(v1::OpKind_Name(op)); }

absl::StatusOr<v1::OpKind> ParseOp(absl::string_view name) {
  v1::OpKind op;
  std::string upper = absl::AsciiStrToUpper(name);
  if (!v1::OpKind_Parse(upper, &op) || op == v1::OP_KIND_UNSPECIFIED) {
    std::vector<std::string> names;
    for (int i = 1; i <= v1::OpKind_MAX; ++i)
      if (v1::OpKind_IsValid(i)) names.push_back(OpName(static_cast<v1::OpKind>(i)));
    return absl::InvalidArgumentError(
        absl::StrCat("op: unknown operator '", name, "'; known: ", absl::StrJoin(names, ", ")));
  }
  return op;
}

std::string DTypeName(v1::DType d) { return absl::AsciiStrToLower(v1::DType_Name(d)); }

absl::StatusOr<v1::DType> ParseDType(absl::string_view name) {
  v1::DType d;
  if (!v1::DType_Parse(absl::AsciiStrToUpper(name), &d) || d == v1::DTYPE_UNSPECIFIED)
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: unknown dtype '", name, "'; known: fp32, bf16"));
  return d;
}

absl::StatusOr<v1::Workload> ParseWorkload(absl::string_view op, absl::string_view shape,
                                           absl::string_view dtype) {
  v1::Workload w;
  auto parsed_op = ParseOp(op);
  if (!parsed_op.ok()) return parsed_op.status();
  w.set_op(*parsed_op);
  auto parsed_dtype = ParseDType(dtype.empty() ? "fp32" : dtype);
  if (!parsed_dtype.ok()) return parsed_dtype.status();
  w.set_dtype(*parsed_dtype);
  for (absl::string_view part : absl::StrSplit(shape, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(part, '=');
    std::string name = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(kv[0]));
    int64_t value = 0;
    if (kv.size() != 2 || name.empty() ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(kv[1]), &value))
      return absl::InvalidArgumentError(absl::StrCat(
          "shape: expected NAME=INTEGER pairs separated by commas (e.g. M=8,N=4096,K=4096), got '",
          part, "'"));
    if (w.dims().count(name))
      return absl::InvalidArgumentError(absl::StrCat("shape: dimension ", name, " given twice"));
    (*w.mutable_dims())[name] = value;
  }
  auto status = ValidateWorkload(w, "shape");
  if (!status.ok()) return status;
  return w;
}

absl::Status ValidateWorkload(const v1::Workload& w, absl::string_view field) {
  if (w.op() == v1::OP_KIND_UNSPECIFIED || !v1::OpKind_IsValid(w.op()))
    return absl::InvalidArgumentError(absl::StrCat(field, ".op: operator is required"));
  std::vector<std::string> need = RequiredDims(w.op());
  if (need.empty())
    return absl::InvalidArgumentError(absl::StrCat(field, ".op: operator ", OpName(w.op()),
                                                   " is not supported yet (supported: gemm)"));
  if (w.dtype() != v1::FP32 && w.dtype() != v1::DTYPE_UNSPECIFIED)
    return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: ", DTypeName(w.dtype()),
                                                   " is not supported yet for ", OpName(w.op()),
                                                   " (supported: fp32)"));
  std::set<std::string> needed(need.begin(), need.end());
  for (const auto& [name, value] : w.dims())
    if (!needed.count(name))
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", OpName(w.op()),
                                                     " has no dimension ", name, " (it takes ",
                                                     absl::StrJoin(need, ", "), ")"));
  double elements = 1;
  for (const auto& name : need) {
    auto it = w.dims().find(name);
    if (it == w.dims().end())
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", OpName(w.op()), " needs dimension ", name));
    if (it->second < 1 || it->second > kMaxDim)
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", name, "=", it->second,
                                                     " is out of range; ", name, " must be in 1..",
                                                     kMaxDim));
    elements *= it->second;
  }
  // Each operand must fit in memory a worker can reasonably hold (4 GiB per operand).
  const auto& d = w.dims();
  if (w.op() == v1::GEMM) {
    double m = d.at("M"), n = d.at("N"), k = d.at("K");
    double largest = std::max({m * k, k * n, m * n}) * DTypeBytes(w.dtype());
    if (largest > 4.0 * (1LL << 30))
      return absl::InvalidArgumentError(absl::StrCat(field, ": an operand of ", WorkloadKey(w),
                                                     " would need ", largest / (1LL << 30),
                                                     " GiB; each operand must fit in 4 GiB"));
  }
  return absl::OkStatus();
}

std::string WorkloadKey(const v1::Workload& w) {
  std::string key = OpName(w.op());
  for (const auto& name : RequiredDims(w.op())) {
    auto it = w.dims().find(name);
    absl::StrAppend(&key, " ", absl::AsciiStrToLower(name), "=",
                    it == w.dims().end() ? 0 : it->second);
  }
  if (!w.epilogue().empty()) absl::StrAppend(&key, " +", w.epilogue());
  absl::StrAppend(&key, " ", DTypeName(w.dtype() == v1::DTYPE_UNSPECIFIED ? v1::FP32 : w.dtype()));
  return key;
}

double WorkloadFlops(const v1::Workload& w) {
  const auto& d = w.dims();
  if (w.op() == v1::GEMM && d.count("M") && d.count("N") && d.count("K"))
    return 2.0 * d.at("M") * d.at("N") * d.at("K");
  return 0;
}

double WorkloadBytes(const v1::Workload& w) {
  const auto& d = w.dims();
  double b = DTypeBytes(w.dtype());
  if (w.op() == v1::GEMM && d.count("M") && d.count("N") && d.count("K")) {
    double m = d.at("M"), n = d.at("N"), k = d.at("K");
    return b * (m * k + k * n) + 4.0 * m * n;
  }
  return 0;
}

}  // namespace kiln::codegen
