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
#include "common/status.h"

namespace kiln::codegen {
namespace {

// The dimensions each operator needs, in key order. Conventions (all row-major):
//   gemm              M,N,K           C[M,N] = A[M,K]·B[K,N] (+ epilogue)
//   rmsnorm           T,D             T rows of width D (epilogue "residual": x += r first)
//   rope              T,H,D           T tokens, H heads of size D, rotary in pairs
//   attention_decode  B,H,KVH,D,L     B sequences, H query heads sharing KVH kv heads, context L
//   attention_prefill B,H,KVH,D,S     causal over S tokens
//   softmax           T,N             T rows of length N
//   swiglu            T,F             silu(gate[T,F]) * up[T,F]
//   moe_router        T,D,E,TOPK      logits = x[T,D]·W[D,E], softmax, top-k
//   moe_gemm          T,E,TOPK,N,K    each token times its TOPK experts' W[K,N]
//   ssm_scan          B,T,D,S         Mamba selective scan, d_inner D, state size S
//   conv1d            B,T,D,W         causal depthwise convolution of width W
std::vector<std::string> RequiredDims(v1::OpKind op) {
  switch (op) {
    case v1::GEMM:
      return {"M", "N", "K"};
    case v1::RMSNORM:
      return {"T", "D"};
    case v1::ROPE:
      return {"T", "H", "D"};
    case v1::ATTENTION_DECODE:
      return {"B", "H", "KVH", "D", "L"};
    case v1::ATTENTION_PREFILL:
      return {"B", "H", "KVH", "D", "S"};
    case v1::SOFTMAX:
      return {"T", "N"};
    case v1::SWIGLU:
      return {"T", "F"};
    case v1::MOE_ROUTER:
      return {"T", "D", "E", "TOPK"};
    case v1::MOE_GEMM:
      return {"T", "E", "TOPK", "N", "K"};
    case v1::SSM_SCAN:
      return {"B", "T", "D", "S"};
    case v1::CONV1D:
      return {"B", "T", "D", "W"};
    default:
      return {};
  }
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
  std::vector<std::string> need = RequiredDims(w.op());
  if (need.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".op: operator ", OpName(w.op()), " has no dimension convention"));
  bool bf16_ok = w.op() == v1::GEMM || w.op() == v1::MOE_GEMM;
  if (w.dtype() == v1::BF16 && !bf16_ok)
    return absl::InvalidArgumentError(absl::StrCat(field,
                                                   ".dtype: bf16 is supported for gemm and "
                                                   "moe_gemm weights only, not ",
                                                   OpName(w.op())));
  if (IsQuantized(w.dtype())) {
    if (w.op() != v1::GEMM)
      return absl::InvalidArgumentError(absl::StrCat(field, ".dtype: ", DTypeName(w.dtype()),
                                                     " is supported for gemm weights only, not ",
                                                     OpName(w.op())));
    auto k = w.dims().find("K");
    if (k != w.dims().end() && k->second % 32 != 0)
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dims: K=", k->second, " is not a multiple of ",
                       DTypeName(w.dtype()), "'s group of 32 weights (one scale per 32 along K)"));
  }
  if (!w.epilogue().empty()) {
    const std::set<std::string> gemm = {"bias", "silu", "gelu", "residual"};
    const bool ok = w.op() == v1::GEMM ? gemm.count(w.epilogue()) > 0
                                       : w.op() == v1::RMSNORM && w.epilogue() == "residual";
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".epilogue: '", w.epilogue(), "' is not an epilogue of ", OpName(w.op()),
          " (gemm takes bias, silu, gelu or residual; rmsnorm takes residual; others none)"));
  }
  std::set<std::string> needed(need.begin(), need.end());
  for (const auto& [name, value] : w.dims())
    if (!needed.count(name))
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", OpName(w.op()),
                                                     " has no dimension ", name, " (it takes ",
                                                     absl::StrJoin(need, ", "), ")"));
  for (const auto& name : need) {
    auto it = w.dims().find(name);
    if (it == w.dims().end())
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", OpName(w.op()), " needs dimension ", name));
    if (it->second < 1 || it->second > kMaxDim)
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", name, "=", it->second,
                                                     " is out of range; ", name, " must be in 1..",
                                                     kMaxDim));
  }
  const auto& d = w.dims();
  auto rule = [&](bool holds, absl::string_view what) {
    return holds ? absl::OkStatus()
                 : absl::InvalidArgumentError(
                       absl::StrCat(field, ": ", what, " (", WorkloadKey(w), ")"));
  };
  if (d.count("KVH")) RETURN_IF_ERROR(rule(d.at("H") % d.at("KVH") == 0, "KVH must divide H"));
  if (d.count("TOPK")) RETURN_IF_ERROR(rule(d.at("TOPK") <= d.at("E"), "TOPK must be <= E"));
  if (w.op() == v1::ROPE) RETURN_IF_ERROR(rule(d.at("D") % 2 == 0, "D must be even for rope"));
  // The operands must fit in memory a worker can reasonably hold.
  double gib = WorkloadBytes(w) / (1LL << 30);
  if (gib > 16)
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", WorkloadKey(w), " would move ", gib,
                                                   " GiB of operands; the limit is 16 GiB"));
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

namespace {

double D(const v1::Workload& w, const char* name) {
  auto it = w.dims().find(name);
  return it == w.dims().end() ? 0 : static_cast<double>(it->second);
}

}  // namespace

double WorkloadFlops(const v1::Workload& w) {
  switch (w.op()) {
    case v1::GEMM:
      return 2 * D(w, "M") * D(w, "N") * D(w, "K");
    case v1::RMSNORM:
      return 4 * D(w, "T") * D(w, "D");
    case v1::ROPE:
      return 3 * D(w, "T") * D(w, "H") * D(w, "D");
    case v1::ATTENTION_DECODE:
      return 4 * D(w, "B") * D(w, "H") * D(w, "D") * D(w, "L");
    case v1::ATTENTION_PREFILL:  // causal: half of the S x S scores
      return 2 * D(w, "B") * D(w, "H") * D(w, "D") * D(w, "S") * D(w, "S");
    case v1::SOFTMAX:
      return 5 * D(w, "T") * D(w, "N");
    case v1::SWIGLU:
      return 6 * D(w, "T") * D(w, "F");
    case v1::MOE_ROUTER:
      return 2 * D(w, "T") * D(w, "D") * D(w, "E");
    case v1::MOE_GEMM:
      return 2 * D(w, "T") * D(w, "TOPK") * D(w, "N") * D(w, "K");
    case v1::SSM_SCAN:
      return 9 * D(w, "B") * D(w, "T") * D(w, "D") * D(w, "S");
    case v1::CONV1D:
      return 2 * D(w, "B") * D(w, "T") * D(w, "D") * D(w, "W");
    default:
      return 0;
  }
}

double WorkloadBytes(const v1::Workload& w) {
  const double wb = WeightBytes(w.dtype());  // weights' element size; activations are fp32
  switch (w.op()) {
    case v1::GEMM:
      return wb * D(w, "K") * D(w, "N") + 4 * (D(w, "M") * D(w, "K") + D(w, "M") * D(w, "N"));
    case v1::RMSNORM:
      return 4 * (2 * D(w, "T") * D(w, "D") + D(w, "D"));
    case v1::ROPE:
      return 4 * 2 * D(w, "T") * D(w, "H") * D(w, "D");
    case v1::ATTENTION_DECODE:  // the KV cache dominates
      return 4 * (2 * D(w, "B") * D(w, "KVH") * D(w, "L") * D(w, "D") +
                  2 * D(w, "B") * D(w, "H") * D(w, "D"));
    case v1::ATTENTION_PREFILL:
      return 4 * D(w, "B") * D(w, "S") * D(w, "D") * (2 * D(w, "H") + 2 * D(w, "KVH"));
    case v1::SOFTMAX:
      return 4 * 2 * D(w, "T") * D(w, "N");
    case v1::SWIGLU:
      return 4 * 3 * D(w, "T") * D(w, "F");
    case v1::MOE_ROUTER:
      return 4 * (D(w, "T") * D(w, "D") + D(w, "D") * D(w, "E") + D(w, "T") * D(w, "E"));
    case v1::MOE_GEMM: {  // at most min(E, T*TOPK) experts' weights are read
      double experts = std::min(D(w, "E"), D(w, "T") * D(w, "TOPK"));
      return wb * experts * D(w, "K") * D(w, "N") +
             4 * D(w, "T") * D(w, "TOPK") * (D(w, "K") + D(w, "N"));
    }
    case v1::SSM_SCAN:
      return 4 * D(w, "B") * D(w, "T") * (3 * D(w, "D") + 2 * D(w, "S")) +
             4 * 2 * D(w, "D") * D(w, "S");
    case v1::CONV1D:
      return 4 * (2 * D(w, "B") * D(w, "T") * D(w, "D") + D(w, "D") * D(w, "W"));
    default:
      return 0;
  }
}

}  // namespace kiln::codegen
