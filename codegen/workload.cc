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
#include "codegen/op_table.h"
#include "common/status.h"

namespace kiln::codegen {
namespace {

// "a, b and c"
std::string JoinAnd(const std::vector<std::string>& items) {
  if (items.size() <= 1) return items.empty() ? "" : items[0];
  return absl::StrCat(absl::StrJoin(items.begin(), items.end() - 1, ", "), " and ", items.back());
}

bool Takes(const Operator& op, v1::DType dtype) {
  return std::find(op.weight_dtypes.begin(), op.weight_dtypes.end(), dtype) !=
         op.weight_dtypes.end();
}

// The operators whose weights may be `dtype`, by name.
std::vector<std::string> OperatorsTaking(v1::DType dtype) {
  std::vector<std::string> names;
  for (const Operator& op : Operators())
    if (Takes(op, dtype)) names.push_back(OpName(op.kind));
  return names;
}

// "gemm takes bias, silu, gelu or residual; rmsnorm takes residual; others none"
std::string EpiloguesInWords() {
  std::vector<std::string> parts;
  for (const Operator& op : Operators()) {
    if (op.epilogues.empty()) continue;
    std::vector<std::string> e(op.epilogues.begin(), op.epilogues.end());
    const std::string last = e.back();
    e.pop_back();
    parts.push_back(absl::StrCat(OpName(op.kind), " takes ", absl::StrJoin(e, ", "),
                                 e.empty() ? "" : " or ", last));
  }
  parts.push_back("others none");
  return absl::StrJoin(parts, "; ");
}

}  // namespace

double WeightBytes(v1::DType d) {
  switch (d) {
    case v1::BF16:
      return 2;
    case v1::INT8:  // a byte per weight and a 2-byte scale per 32
      return 1 + 2.0 / 32;
    case v1::INT4:
      return 0.5 + 2.0 / 32;
    default:
      return 4;
  }
}

bool IsQuantized(v1::DType d) { return d == v1::INT8 || d == v1::INT4; }

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
        absl::StrCat("dtype: unknown dtype '", name, "'; known: fp32, bf16, int8, int4"));
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
  const Operator* op = FindOperator(w.op());
  if (!op)
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".op: operator ", OpName(w.op()), " has no dimension convention"));
  const std::vector<std::string> need(op->dims.begin(), op->dims.end());
  if (w.dtype() == v1::BF16 && !Takes(*op, v1::BF16))
    return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: bf16 is supported for ",
                                                   JoinAnd(OperatorsTaking(v1::BF16)),
                                                   " weights only, not ", OpName(w.op())));
  if (IsQuantized(w.dtype())) {
    if (!Takes(*op, w.dtype()))
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: ", DTypeName(w.dtype()), " is supported for ",
                       JoinAnd(OperatorsTaking(w.dtype())), " weights only, not ", OpName(w.op())));
    auto k = w.dims().find(op->quant_dim);
    if (k != w.dims().end() && k->second % 32 != 0)
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dims: ", op->quant_dim, "=", k->second, " is not a multiple of ",
                       DTypeName(w.dtype()), "'s group of 32 weights (one scale per 32 along ",
                       op->quant_dim, ")"));
  }
  if (!w.epilogue().empty() &&
      std::find(op->epilogues.begin(), op->epilogues.end(), w.epilogue()) == op->epilogues.end())
    return absl::InvalidArgumentError(absl::StrCat(field, ".epilogue: '", w.epilogue(),
                                                   "' is not an epilogue of ", OpName(w.op()), " (",
                                                   EpiloguesInWords(), ")"));
  std::set<std::string> needed(need.begin(), need.end());
  for (const auto& [name, value] : w.dims())
    if (!needed.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", OpName(w.op()), " has no dimension ", name, " (it takes ",
                       absl::StrJoin(need, ", "), ": ", op->meaning, ")"));
  for (const auto& name : need) {
    auto it = w.dims().find(name);
    if (it == w.dims().end())
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", OpName(w.op()), " needs dimension ", name, " (it takes ",
                       absl::StrJoin(need, ", "), ": ", op->meaning, ")"));
    if (it->second < 1 || it->second > kMaxDim)
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", name, "=", it->second,
                                                     " is out of range; ", name, " must be in 1..",
                                                     kMaxDim));
  }
  if (op->rule)
    if (const std::string broken = op->rule(DimValues(w)); !broken.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", broken, " (", WorkloadKey(w), ")"));
  // The operands must fit in memory a worker can reasonably hold.
  double gib = WorkloadBytes(w) / (1LL << 30);
  if (gib > 16)
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", WorkloadKey(w), " would move ", gib,
                                                   " GiB of operands; the limit is 16 GiB"));
  return absl::OkStatus();
}

std::string WorkloadKey(const v1::Workload& w) {
  std::string key = OpName(w.op());
  const Operator* op = FindOperator(w.op());
  for (const char* name : op ? op->dims : std::vector<const char*>{}) {
    auto it = w.dims().find(name);
    absl::StrAppend(&key, " ", absl::AsciiStrToLower(name), "=",
                    it == w.dims().end() ? 0 : it->second);
  }
  if (!w.epilogue().empty()) absl::StrAppend(&key, " +", w.epilogue());
  absl::StrAppend(&key, " ", DTypeName(w.dtype() == v1::DTYPE_UNSPECIFIED ? v1::FP32 : w.dtype()));
  return key;
}

double WorkloadFlops(const v1::Workload& w) {
  const Operator* op = FindOperator(w.op());
  return op ? op->flops(DimValues(w)) : 0;
}

double WorkloadBytes(const v1::Workload& w) {
  const Operator* op = FindOperator(w.op());
  return op ? op->bytes(DimValues(w), WeightBytes(w.dtype())) : 0;
}

}  // namespace kiln::codegen
