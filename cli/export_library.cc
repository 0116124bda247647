#include "cli/export_library.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/templates/kiln_selftest_source.h"  // generated: kKilnSelftestSource
#include "codegen/cpu/gen/parallel_source.h"     // generated: kKilnCpuParallelSource
#include "codegen/workload.h"
#include "common/status.h"
#include "common/text.h"

namespace kiln::cli {
namespace {

using Kernel = v1::ExportKernelsResponse::Kernel;

// One buffer a kernel takes, in its ABI's argument order.
struct Operand {
  std::string name;
  std::string type;                // element type: float, uint16_t (bf16 bits), int32_t
  std::vector<std::string> shape;  // dimension names, outermost first; row-major
  std::string role;                // in, out, inout
  std::string doc;
  bool used = true;      // false: the variant ignores it (left out of the typed function)
  bool weights = false;  // what PREPACK packs ahead of time
};

struct Param {
  std::string name, type, doc;  // type: float or int (passed to the kernel as a float)
};

// A kernel's interface: what the typed function takes, for the header, the wrappers, the
// manifest and the self-test.
struct Api {
  Kernel kernel;
  v1::Workload w;
  std::string name;       // NAME: the typed function (plain GEMM: the renamed entry itself)
  bool gemm_abi = false;  // kiln_gemm's (M, N, K, A, B, C); else kiln_op's (dims, args, params)
  bool prepack = false;
  int64_t threads = 1;
  std::string what;  // the operation, one line
  std::vector<std::string> dim_names;
  std::vector<int64_t> dims;
  std::vector<Operand> operands;
  std::vector<Param> params;
  std::vector<std::string> param_values;  // what the kernel's params[] holds, as C expressions
  std::string test;                       // the self-test's Test* call, up to the lambda
};

int64_t Dim(const v1::Workload& w, const std::string& name) {
  auto it = w.dims().find(name);
  return it == w.dims().end() ? 0 : it->second;
}

int EpilogueCode(const std::string& e) {
  return e == "bias" ? 1 : e == "silu" ? 2 : e == "gelu" ? 3 : e == "residual" ? 4 : 0;
}

// "gemm m=8 n=1024 k=1024 +bias fp32" back into its workload.
absl::StatusOr<v1::Workload> ParseKey(const std::string& key) {
  std::vector<std::string> parts = absl::StrSplit(key, ' ', absl::SkipEmpty());
  if (parts.size() < 2)
    return absl::InvalidArgumentError(
        absl::StrCat("the workload key '", ShortQuote(key), "' is not 'op dims... dtype'"));
  v1::Workload w;
  ASSIGN_OR_RETURN(v1::OpKind op, codegen::ParseOp(parts.front()));
  w.set_op(op);
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    int64_t v;
    if (p[0] == '+') {
      w.set_epilogue(p.substr(1));
    } else if (auto eq = p.find('='); eq != std::string::npos) {
      if (!absl::SimpleAtoi(p.substr(eq + 1), &v))
        return absl::InvalidArgumentError(
            absl::StrCat("the workload key '", ShortQuote(key), "' has a bad dimension"));
      (*w.mutable_dims())[absl::AsciiStrToUpper(p.substr(0, eq))] = v;
    } else {
      ASSIGN_OR_RETURN(v1::DType d, codegen::ParseDType(p));
      w.set_dtype(d);
    }
  }
  RETURN_IF_ERROR(codegen::ValidateWorkload(w));
  return w;
}

std::string Join(const std::vector<std::string>& v, const char* sep = ", ") {
  return absl::StrJoin(v, sep);
}

absl::StatusOr<Api> MakeApi(const Kernel& k) {
  Api a;
  a.kernel = k;
  auto w = ParseKey(k.workload_key());
  if (!w.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("kernel ", ShortQuote(k.file_name()), ": ", w.status().message()));
  a.w = *w;
  if (codegen::IsQuantized(a.w.dtype()))
    return absl::UnimplementedError(absl::StrCat(
        "kernel ", ShortQuote(k.file_name()), " takes ", codegen::DTypeName(a.w.dtype()),
        " weights: the library does not carry the quantized weight layout and its packing yet (the "
        "kernel's source is exported on its own)"));
  const std::string& entry = k.entry();
  // The entry and the file name go into generated C++ and CMake code: a C identifier and a
  // plain file name only, whatever the coordinator sent.
  auto plain = [](const std::string& s, bool identifier) {
    if (s.empty() || s.size() > 200 || (identifier && std::isdigit((unsigned char)s[0])))
      return false;
    for (char c : s)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' &&
          (identifier || (c != '.' && c != '-' && c != '+')))
        return false;
    return true;
  };
  if (!plain(entry, true))
    return absl::InvalidArgumentError(absl::StrCat("the coordinator sent the entry point '",
                                                   ShortQuote(entry), "', not a C identifier"));
  if (!plain(k.file_name(), false))
    return absl::InvalidArgumentError(
        absl::StrCat("the coordinator sent the file name '", ShortQuote(k.file_name()),
                     "', which a CMakeLists.txt cannot name as it is"));
  if (entry == "kiln_gemm" || entry == "kiln_op" || !absl::StartsWith(entry, "kiln_"))
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel ", ShortQuote(k.file_name()), " exports '", ShortQuote(entry),
        "', a name every kernel of its kind shares: the coordinator predates library exports; "
        "upgrade it to export a library"));
  a.gemm_abi = !absl::EndsWith(entry, "_op");
  a.name = a.gemm_abi ? entry : std::string(absl::StripSuffix(entry, "_op"));
  auto knob = [&](const char* n, int64_t otherwise) {
    auto it = k.config().knobs().find(n);
    return it == k.config().knobs().end() ? otherwise : it->second;
  };
  a.prepack = knob("PREPACK", 0) != 0;
  a.threads = knob("NT", 1);
  const bool bf16 = a.w.dtype() == v1::BF16;
  const std::string wt = bf16 ? "uint16_t" : "float";
  const std::string epi = a.w.epilogue();
  auto in = [](std::string n, std::string t, std::vector<std::string> s, std::string doc) {
    return Operand{std::move(n), std::move(t), std::move(s), "in", std::move(doc)};
  };
  auto out = [](std::string n, std::string t, std::vector<std::string> s, std::string doc) {
    return Operand{std::move(n), std::move(t), std::move(s), "out", std::move(doc)};
  };
  auto inout = [](std::string n, std::vector<std::string> s, std::string doc) {
    return Operand{std::move(n), "float", std::move(s), "inout", std::move(doc)};
  };
  switch (a.w.op()) {
    case v1::GEMM: {
      a.dim_names = {"M", "N", "K"};
      Operand B =
          in("B", wt, {"K", "N"},
             bf16 ? "weights, bf16 bit patterns (the upper 16 bits of an fp32)" : "weights");
      B.weights = true;
      if (a.gemm_abi) {
        a.what = "C = A * B";
        a.operands = {in("A", "float", {"M", "K"}, "activations"), B,
                      out("C", "float", {"M", "N"}, "result, overwritten")};
        a.test =
            absl::StrFormat("TestGemm(%d, %d, %d", Dim(a.w, "M"), Dim(a.w, "N"), Dim(a.w, "K"));
        break;
      }
      a.what = epi == "bias"       ? "C = A * B + bias (per column)"
               : epi == "silu"     ? "C = silu(A * B)"
               : epi == "gelu"     ? "C = gelu(A * B) (tanh form)"
               : epi == "residual" ? "C = A * B + R"
                                   : "C = A * B";
      Operand bias = in("bias", "float", {"N"}, "added to every row of the product");
      bias.used = epi == "bias";
      Operand R = in("R", "float", {"M", "N"}, "residual added to the product");
      R.used = epi == "residual";
      a.operands = {in("A", "float", {"M", "K"}, "activations"), B, bias, R,
                    out("C", "float", {"M", "N"}, "result, overwritten")};
      a.test = absl::StrFormat("TestGemmEpilogue(%d, %d, %d, %d, %s", Dim(a.w, "M"), Dim(a.w, "N"),
                               Dim(a.w, "K"), EpilogueCode(epi), bf16 ? "true" : "false");
      break;
    }
    case v1::RMSNORM: {
      a.dim_names = {"T", "D"};
      const bool res = epi == "residual";
      a.what = res ? "res += x (in place), then out = res / sqrt(mean(res^2) + eps) * w, per row"
                   : "out = x / sqrt(mean(x^2) + eps) * w, per row";
      Operand r = inout("res", {"T", "D"}, "the residual stream: x is added to it in place");
      r.used = res;
      a.operands = {in("x", "float", {"T", "D"}, "input rows"), in("w", "float", {"D"}, "scale"),
                    out("out", "float", {"T", "D"}, "normalised rows"), r};
      a.params = {{"eps", "float", "added to the mean square (e.g. 1e-5)"}};
      a.param_values = {"eps"};
      a.test = absl::StrFormat("TestRmsnorm(%d, %d, %s", Dim(a.w, "T"), Dim(a.w, "D"),
                               res ? "true" : "false");
      break;
    }
    case v1::ROPE:
      a.dim_names = {"T", "H", "D"};
      a.what =
          "rotary embedding in place (HuggingFace rotate_half): (x[i], x[i+D/2]) of each head of "
          "token t rotated by pos[t] * theta^(-2i/D)";
      a.operands = {inout("x", {"T", "H", "D"}, "queries or keys, rotated in place"),
                    in("pos", "int32_t", {"T"}, "each token's position")};
      a.params = {{"theta", "float", "the rotary base (e.g. 10000)"}};
      a.param_values = {"theta", "0.0f"};
      a.test = absl::StrFormat("TestRope(%d, %d, %d", Dim(a.w, "T"), Dim(a.w, "H"), Dim(a.w, "D"));
      break;
    case v1::ATTENTION_DECODE:
      a.dim_names = {"B", "H", "KVH", "D", "L"};
      a.what =
          "decode attention over a KV cache: out = softmax(q.k * scale) v over the L cached "
          "positions; query head h reads kv head h / (H / KVH)";
      a.operands = {in("q", "float", {"B", "H", "D"}, "queries"),
                    in("k", "float", {"B", "KVH", "L", "D"}, "key cache"),
                    in("v", "float", {"B", "KVH", "L", "D"}, "value cache"),
                    out("out", "float", {"B", "H", "D"}, "attention output")};
      a.params = {{"scale", "float", "score scale, usually 1 / sqrt(D)"}};
      a.param_values = {"scale"};
      a.test = absl::StrFormat("TestAttentionDecode(%d, %d, %d, %d, %d", Dim(a.w, "B"),
                               Dim(a.w, "H"), Dim(a.w, "KVH"), Dim(a.w, "D"), Dim(a.w, "L"));
      break;
    case v1::ATTENTION_PREFILL:
      a.dim_names = {"B", "H", "KVH", "D", "S"};
      a.what =
          "causal prefill attention: query i attends to keys 0..i; query head h reads kv head "
          "h / (H / KVH)";
      a.operands = {in("q", "float", {"B", "S", "H", "D"}, "queries"),
                    in("k", "float", {"B", "S", "KVH", "D"}, "keys"),
                    in("v", "float", {"B", "S", "KVH", "D"}, "values"),
                    out("out", "float", {"B", "S", "H", "D"}, "attention output")};
      a.params = {{"scale", "float", "score scale, usually 1 / sqrt(D)"}};
      a.param_values = {"scale"};
      a.test = absl::StrFormat("TestAttentionPrefill(%d, %d, %d, %d, %d", Dim(a.w, "B"),
                               Dim(a.w, "H"), Dim(a.w, "KVH"), Dim(a.w, "D"), Dim(a.w, "S"));
      break;
    case v1::SOFTMAX:
      a.dim_names = {"T", "N"};
      a.what = "row softmax: out[t] = exp(x[t] - max) / sum";
      a.operands = {in("x", "float", {"T", "N"}, "input rows"),
                    out("out", "float", {"T", "N"}, "probabilities")};
      a.test = absl::StrFormat("TestSoftmax(%d, %d", Dim(a.w, "T"), Dim(a.w, "N"));
      break;
    case v1::SWIGLU:
      a.dim_names = {"T", "F"};
      a.what = "out = silu(gate) * up, element-wise";
      a.operands = {in("gate", "float", {"T", "F"}, "gate projection"),
                    in("up", "float", {"T", "F"}, "up projection"),
                    out("out", "float", {"T", "F"}, "result")};
      a.test = absl::StrFormat("TestSwiglu(%d, %d", Dim(a.w, "T"), Dim(a.w, "F"));
      break;
    case v1::MOE_ROUTER:
      a.dim_names = {"T", "D", "E", "TOPK"};
      a.what =
          "MoE router: softmax(x * W) over the E experts, the TOPK largest (ties: lower index) and "
          "their weights renormalised to sum 1";
      a.operands = {in("x", "float", {"T", "D"}, "tokens"), in("W", "float", {"D", "E"}, "router"),
                    out("weights", "float", {"T", "TOPK"}, "the chosen experts' weights"),
                    out("experts", "int32_t", {"T", "TOPK"}, "the chosen experts")};
      a.test = absl::StrFormat("TestMoeRouter(%d, %d, %d, %d", Dim(a.w, "T"), Dim(a.w, "D"),
                               Dim(a.w, "E"), Dim(a.w, "TOPK"));
      break;
    case v1::MOE_GEMM: {
      a.dim_names = {"T", "E", "TOPK", "N", "K"};
      a.what = "grouped MoE GEMM: y[r] = x[r] * W[experts[r]] for each of the T*TOPK rows";
      Operand W = in("W", wt, {"E", "K", "N"}, "every expert's weights");
      W.weights = true;
      a.operands = {in("x", "float", {"T", "TOPK", "K"}, "one row per (token, slot)"), W,
                    in("experts", "int32_t", {"T", "TOPK"}, "each row's expert, < E"),
                    out("y", "float", {"T", "TOPK", "N"}, "result")};
      a.test =
          absl::StrFormat("TestMoeGemm(%d, %d, %d, %d, %d, %s", Dim(a.w, "T"), Dim(a.w, "E"),
                          Dim(a.w, "TOPK"), Dim(a.w, "N"), Dim(a.w, "K"), bf16 ? "true" : "false");
      break;
    }
    case v1::SSM_SCAN:
      a.dim_names = {"B", "T", "D", "S"};
      a.what =
          "Mamba selective scan: dt = softplus(delta) (or delta); h = exp(dt*A)*h + dt*Bm*u; "
          "y = (Cm.h + Dp*u) * silu(z); the state h is carried in place";
      a.operands = {in("u", "float", {"B", "T", "D"}, "input"),
                    in("delta", "float", {"B", "T", "D"}, "step sizes"),
                    in("A", "float", {"D", "S"}, "state matrix (negative)"),
                    in("Bm", "float", {"B", "T", "S"}, "input projection"),
                    in("Cm", "float", {"B", "T", "S"}, "output projection"),
                    in("Dp", "float", {"D"}, "skip"),
                    in("z", "float", {"B", "T", "D"}, "gate"),
                    inout("h", {"B", "D", "S"}, "state, advanced in place"),
                    out("y", "float", {"B", "T", "D"}, "output")};
      a.params = {{"softplus", "int", "1: dt = softplus(delta); 0: dt = delta"}};
      a.param_values = {"(float)softplus"};
      a.test = absl::StrFormat("TestSsmScan(%d, %d, %d, %d", Dim(a.w, "B"), Dim(a.w, "T"),
                               Dim(a.w, "D"), Dim(a.w, "S"));
      break;
    case v1::CONV1D:
      a.dim_names = {"B", "T", "D", "W"};
      a.what =
          "causal depthwise conv1d: out = act(bias + sum_j w[d,j] * in[t-(W-1)+j]), earlier "
          "inputs from state, which is advanced in place";
      a.operands = {in("x", "float", {"B", "T", "D"}, "input"),
                    in("w", "float", {"D", "W"}, "filters"), in("bias", "float", {"D"}, "bias"),
                    inout("state", {"B", "W-1", "D"}, "the previous W-1 inputs, advanced"),
                    out("out", "float", {"B", "T", "D"}, "output")};
      a.params = {{"silu", "int", "1: SiLU activation; 0: none"}};
      a.param_values = {"(float)silu"};
      a.test = absl::StrFormat("TestConv1d(%d, %d, %d, %d", Dim(a.w, "B"), Dim(a.w, "T"),
                               Dim(a.w, "D"), Dim(a.w, "W"));
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("kernel ", ShortQuote(k.file_name()),
                                                   ": no interface for operator ",
                                                   codegen::OpName(a.w.op())));
  }
  for (const auto& n : a.dim_names) a.dims.push_back(n == "W-1" ? 0 : Dim(a.w, n));
  return a;
}

// "[8 x 1024]" for an operand's extent; W-1 for the conv state.
std::string Extent(const Api& a, const Operand& o) {
  std::vector<std::string> parts;
  for (const auto& s : o.shape)
    parts.push_back(s == "W-1" ? absl::StrCat(Dim(a.w, "W") - 1) : absl::StrCat(Dim(a.w, s)));
  return absl::StrCat("[", Join(parts, " x "), "]");
}

std::string ParamDecl(const Operand& o, bool packed) {
  const std::string c = o.role == "in" ? "const " : "";
  return absl::StrCat(c, o.type, "* ", o.name, packed && o.weights ? " /* packed */" : "");
}

// The typed function's parameter list.
std::string Signature(const Api& a) {
  std::vector<std::string> p;
  if (a.gemm_abi) {
    return absl::StrCat("int M, int N, int K, const float* A, const float* B", ", float* C");
  }
  for (const auto& o : a.operands)
    if (o.used) p.push_back(ParamDecl(o, a.prepack));
  for (const auto& pr : a.params) p.push_back(absl::StrCat(pr.type, " ", pr.name));
  return Join(p);
}

std::string WeightsName(const Api& a) {
  for (const auto& o : a.operands)
    if (o.weights) return o.name;
  return "B";
}

std::string WeightsType(const Api& a) {
  for (const auto& o : a.operands)
    if (o.weights) return o.type;
  return "float";
}

std::string Declarations(const Api& a) {
  if (a.gemm_abi) {
    std::string s = absl::StrCat("void ", a.name, "(", Signature(a), ");\n");
    if (a.prepack)
      absl::StrAppend(&s, "long ", a.name, "_prepack_floats(int N, int K);\n", "void ", a.name,
                      "_prepack(int N, int K, const float* B, float* packed);\n");
    return s;
  }
  std::string s = absl::StrCat("void ", a.name, "(", Signature(a), ");\n");
  if (a.prepack)
    absl::StrAppend(&s, "long ", a.name, "_prepack_bytes(void);\n", "void ", a.name,
                    "_prepack(const ", WeightsType(a), "* ", WeightsName(a), ", void* packed);\n");
  return s;
}

std::string DimList(const Api& a) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < a.dim_names.size(); ++i)
    parts.push_back(absl::StrCat(a.dim_names[i], "=", a.dims[i]));
  return Join(parts);
}

// The header's comment block for one kernel: strings that came from the coordinator (the chip,
// the configuration) go through CommentSafe.
std::string DocComment(const Api& a, const v1::ChipFingerprint& chip) {
  std::vector<std::string> config;
  for (const auto& [n, v] : a.kernel.config().knobs()) config.push_back(absl::StrCat(n, "=", v));
  std::sort(config.begin(), config.end());
  std::string s = absl::StrCat("// ", CommentSafe(a.kernel.workload_key()), ": ", a.what, ".\n",
                               "//   ", DimList(a), ".",
                               a.gemm_abi ? " Any M, N, K work; the code is tuned for these." : "",
                               " Row-major, no padding.\n");
  for (const auto& o : a.operands) {
    if (!o.used && !a.gemm_abi) continue;
    absl::StrAppend(
        &s, absl::StrFormat("//   %-8s %-5s %-8s %s %s: %s%s\n", o.name, o.role, o.type,
                            absl::StrCat("[", Join(o.shape, ","), "]"), Extent(a, o), o.doc,
                            a.prepack && o.weights ? " (the PACKED buffer, see below)" : ""));
  }
  for (const auto& p : a.params)
    absl::StrAppend(&s, absl::StrFormat("//   %-8s %-5s %-8s %s\n", p.name, "in", p.type, p.doc));
  if (a.prepack) {
    if (a.gemm_abi)
      absl::StrAppend(&s, "//   PREPACK: ", a.name,
                      " does NOT take B as it is. Pack it once: float* P = ", "malloc(", a.name,
                      "_prepack_floats(N, K) * sizeof(float)); ", a.name,
                      "_prepack(N, K, B, P); then pass P as B on every call.\n");
    else
      absl::StrAppend(&s, "//   PREPACK: ", a.name, " does NOT take ", WeightsName(a),
                      " as it is. Pack it once into ", a.name, "_prepack_bytes() bytes with ",
                      a.name, "_prepack(", WeightsName(a), ", packed); then pass packed as ",
                      WeightsName(a), " on every call.\n");
  }
  absl::StrAppend(&s, "//   Threads: up to ", a.threads,
                  " (compiled in), on the library's shared pool. Tuned on ",
                  CommentSafe(chip.chip_type()), " (", CommentSafe(chip.model()), "): best median ",
                  absl::StrFormat("%.3f", a.kernel.best().median_us()), " us; ",
                  CommentSafe(Join(config, " "), 2048), ".\n");
  return s;
}

// The typed wrapper around a kiln_op-ABI kernel (and its prepack functions).
std::string Wrapper(const Api& a) {
  std::vector<std::string> dims, args;
  for (int64_t d : a.dims) dims.push_back(absl::StrCat(d, "LL"));
  for (const auto& o : a.operands)
    args.push_back(o.used ? absl::StrCat("(void*)", o.name) : "nullptr");
  std::vector<std::string> params = a.param_values;
  if (params.empty()) params.push_back("0.0f");
  const std::string dims_decl =
      absl::StrCat("  static const long long dims[] = {", Join(dims), "};\n");
  std::string s =
      absl::StrCat("extern \"C\" void ", a.name,
                   "_op(const long long* dims, void* const* args, const float* "
                   "params);\n",
                   "void ", a.name, "(", Signature(a), ") {\n", dims_decl,
                   "  void* const args[] = {", Join(args), "};\n", "  const float params[] = {",
                   Join(params), "};\n", "  ", a.name, "_op(dims, args, params);\n}\n");
  if (a.prepack)
    absl::StrAppend(&s, "extern \"C\" long ", a.name, "_op_prepack_bytes(const long long* dims);\n",
                    "extern \"C\" void ", a.name,
                    "_op_prepack(const long long* dims, const void* src, void* dst);\n", "long ",
                    a.name, "_prepack_bytes(void) {\n", dims_decl, "  return ", a.name,
                    "_op_prepack_bytes(dims);\n}\n", "void ", a.name, "_prepack(const ",
                    WeightsType(a), "* ", WeightsName(a), ", void* packed) {\n", dims_decl, "  ",
                    a.name, "_op_prepack(dims, ", WeightsName(a), ", packed);\n}\n");
  return s + "\n";
}

// The self-test's check of one kernel: the Test* function of kiln_selftest.h with a lambda
// calling the kernel the way the header says (prepacking first where it must).
std::string SelfTest(const Api& a) {
  std::string body;
  std::vector<std::string> lambda_params;
  if (a.gemm_abi) {
    const std::string mnk =
        absl::StrFormat("%d, %d, %d", Dim(a.w, "M"), Dim(a.w, "N"), Dim(a.w, "K"));
    const std::string nk = absl::StrFormat("%d, %d", Dim(a.w, "N"), Dim(a.w, "K"));
    lambda_params = {"const float* A", "const void* B", "float* C"};
    if (a.prepack)
      body = absl::StrCat("    std::vector<float> packed(", a.name, "_prepack_floats(", nk,
                          "));\n    ", a.name, "_prepack(", nk,
                          ", (const float*)B, packed.data());\n    ", a.name, "(", mnk,
                          ", A, packed.data(), C);\n");
    else
      body = absl::StrCat("    ", a.name, "(", mnk, ", A, (const float*)B, C);\n");
  } else {
    std::vector<std::string> call;
    for (const auto& o : a.operands) {
      lambda_params.push_back(absl::StrCat("auto ", o.name));
      if (!o.used) continue;
      const std::string c = o.role == "in" ? "const " : "";
      if (o.weights && a.prepack)
        call.push_back(absl::StrCat("(const ", o.type, "*)packed.data()"));
      else
        call.push_back(absl::StrCat("(", c, o.type, "*)", o.name));
    }
    for (const auto& p : a.params) {
      lambda_params.push_back(absl::StrCat("auto ", p.name));
      call.push_back(p.name);
    }
    if (a.prepack)
      absl::StrAppend(&body, "    std::vector<unsigned char> packed(", a.name,
                      "_prepack_bytes());\n    ", a.name, "_prepack((const ", WeightsType(a), "*)",
                      WeightsName(a), ", packed.data());\n");
    absl::StrAppend(&body, "    ", a.name, "(", Join(call), ");\n");
  }
  return absl::StrCat("  fails += Report(\"", a.name, "\", ", a.test, ", [](", Join(lambda_params),
                      ") {\n", body, "  }));\n");
}

constexpr char kRuntime[] =
    R"(// The one thread pool of every kernel in this library: the kernels are compiled with
// KILN_RT_HOSTED=1 (no pool of their own) and run their parallel loops through
// kiln_rt_parallel_for_v1, defined here. One loop runs at a time; a loop started while another
// runs (from a second thread of the program) runs on its caller's thread.
#define KILN_RT_HOST 1
#include "kiln_parallel.h"

static long kiln_loops = 0;

extern "C" __attribute__((visibility("default"))) void kiln_rt_parallel_for_v1(
    long n, int nt, void (*call)(const void*, long), const void* body) {
  __atomic_fetch_add(&kiln_loops, 1L, __ATOMIC_RELAXED);
  kiln_rt::the_pool.Run(n, nt, [&](long i) { call(body, i); });
}

extern "C" long kiln_kernels_parallel_loops(void) {
  return __atomic_load_n(&kiln_loops, __ATOMIC_RELAXED);
}
)";

}  // namespace

absl::StatusOr<nlohmann::ordered_json> KernelConvention(const Kernel& k) {
  if (k.dialect() != "cpp") return nlohmann::ordered_json();
  ASSIGN_OR_RETURN(Api a, MakeApi(k));
  nlohmann::ordered_json operands = nlohmann::ordered_json::array();
  for (const auto& o : a.operands) {
    if (!o.used && !a.gemm_abi) continue;
    std::vector<int64_t> extent;
    for (const auto& s : o.shape) extent.push_back(s == "W-1" ? Dim(a.w, "W") - 1 : Dim(a.w, s));
    operands.push_back({{"name", o.name},
                        {"type", o.type},
                        {"shape", o.shape},
                        {"extent", extent},
                        {"layout", "row-major, contiguous"},
                        {"role", o.role},
                        {"packed", a.prepack && o.weights},
                        {"doc", o.doc}});
  }
  nlohmann::ordered_json params = nlohmann::ordered_json::array();
  for (const auto& p : a.params)
    params.push_back({{"name", p.name}, {"type", p.type}, {"doc", p.doc}});
  nlohmann::ordered_json dims = nlohmann::ordered_json::object();
  for (size_t i = 0; i < a.dim_names.size(); ++i) dims[a.dim_names[i]] = a.dims[i];
  nlohmann::ordered_json prepack = nullptr;
  if (a.prepack) {
    if (a.gemm_abi)
      prepack = {
          {"required", true},
          {"size", absl::StrCat("long ", a.name, "_prepack_floats(int N, int K): floats")},
          {"function",
           absl::StrCat("void ", a.name, "_prepack(int N, int K, const float* B, float* packed)")},
          {"how",
           "pack B once (it is constant weights), then pass the packed buffer as B "
           "on every call; B itself gives wrong results"}};
    else
      prepack = {
          {"required", true},
          {"size", absl::StrCat("long ", a.name, "_prepack_bytes(void): bytes")},
          {"function", absl::StrCat("void ", a.name, "_prepack(const ", WeightsType(a), "* ",
                                    WeightsName(a), ", void* packed)")},
          {"how", absl::StrCat("pack ", WeightsName(a), " once, then pass the packed buffer as ",
                               WeightsName(a), " on every call; ", WeightsName(a),
                               " itself gives wrong results")}};
  }
  nlohmann::ordered_json out = {
      {"function", a.name},
      {"declaration", absl::StrCat("void ", a.name, "(", Signature(a), ")")},
      {"operation", a.what},
      {"dims", dims},
      {"any_shape", a.gemm_abi},
      {"operands", operands},
      {"params", params},
      {"prepack", prepack},
      {"threads", a.threads},
      {"raw_entry", a.gemm_abi ? a.name : absl::StrCat(a.name, "_op")},
  };
  return out;
}

nlohmann::ordered_json LibraryManifest(const v1::ExportKernelsResponse& kernels) {
  bool any = false;
  for (const auto& k : kernels.kernels()) any = any || k.dialect() == "cpp";
  if (!any) return nullptr;
  return {{"header", "kiln_kernels.h"},
          {"build", "cmake -S DIR -B DIR/build && cmake --build DIR/build"},
          {"cmake_target", "kiln_kernels (static; -DKILN_KERNELS_SHARED=ON for shared)"},
          {"selftest",
           "kiln_kernels_selftest: every kernel against a double-precision "
           "reference on random inputs; exit status 0 only if all pass"},
          {"language",
           "C ABI (extern \"C\"); the kernels are C++17, built with -O3 "
           "-march=native for the machine that builds them"},
          {"threads",
           "every kernel runs its parallel loops on one pool owned by the library "
           "(kiln_runtime.cc, symbol kiln_rt_parallel_for_v1), created on first use; each "
           "kernel uses up to its 'threads' (compiled in) including the calling thread; one "
           "parallel loop at a time: a kernel called while another runs on a second thread runs "
           "on that thread alone; results do not depend on the thread count"},
          {"operands",
           "all buffers row-major and contiguous with the shapes listed; outputs may not alias "
           "inputs; inout buffers are updated in place"}};
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LibraryFiles(
    const v1::ExportKernelsResponse& kernels) {
  std::vector<Api> apis;
  for (const auto& k : kernels.kernels()) {
    if (k.dialect() != "cpp") continue;
    ASSIGN_OR_RETURN(Api a, MakeApi(k));
    apis.push_back(std::move(a));
  }
  std::vector<std::pair<std::string, std::string>> files;
  if (apis.empty()) return files;

  std::string header = absl::StrCat(
      "// kiln_kernels.h: the kernels of Kiln job ", CommentSafe(kernels.job_id()), ", tuned on ",
      CommentSafe(kernels.chip().chip_type()), " (", CommentSafe(kernels.chip().model()), ").\n",
      "// Link the kiln_kernels library (CMakeLists.txt). Every buffer is row-major and "
      "contiguous, in the\n// shape given; outputs may not alias inputs. Kernels with PREPACK "
      "take their weights packed once\n// ahead of time by their _prepack function. All kernels "
      "share one thread pool, owned by the library.\n",
      "#ifndef KILN_KERNELS_H_\n#define KILN_KERNELS_H_\n\n#include <stdint.h>\n\n",
      "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  std::string wrappers =
      "// Typed entry points of the operator kernels (kiln_kernels.h): each fills in its "
      "kernel's\n// dimensions and scalars and calls the kernel's generic entry.\n"
      "#include \"kiln_kernels.h\"\n\nextern \"C\" {\n\n";
  std::string tests = absl::StrCat(
      "// kiln_kernels_selftest: every kernel of kiln_kernels.h against a double-precision "
      "reference\n// (kiln_selftest.h) on random inputs. Exit status 0 only if all pass.\n"
      "#include <cstdio>\n#include <vector>\n\n#include \"kiln_kernels.h\"\n"
      "#include \"kiln_selftest.h\"\n\n",
      "// The pool as the kernels see it (a weak reference, as theirs): null if it was not "
      "linked in.\nextern \"C\" __attribute__((weak)) void kiln_rt_parallel_for_v1(long, int, "
      "void (*)(const void*, long), const void*);\nextern \"C\" __attribute__((weak)) long "
      "kiln_kernels_parallel_loops(void);\n\n",
      "int main() {\n  using namespace kiln_selftest;\n  int fails = 0;\n");
  std::vector<std::string> sources;
  for (const Api& a : apis) {
    absl::StrAppend(&header, DocComment(a, kernels.chip()), Declarations(a), "\n");
    if (!a.gemm_abi) absl::StrAppend(&wrappers, Wrapper(a));
    absl::StrAppend(&tests, SelfTest(a));
    sources.push_back(a.kernel.file_name());
  }
  absl::StrAppend(&header,
                  "#ifdef __cplusplus\n}  // extern \"C\"\n#endif\n\n#endif  // KILN_KERNELS_H_\n");
  absl::StrAppend(&wrappers, "}  // extern \"C\"\n");
  absl::StrAppend(
      &tests,
      "  if (!kiln_rt_parallel_for_v1) {\n"
      "    std::printf(\"FAIL the shared thread pool (kiln_rt_parallel_for_v1) is not linked in: "
      "the kernels run single-threaded\\n\");\n    ++fails;\n  }\n",
      "  std::printf(\"%d of ", apis.size(),
      " kernels failed; %ld parallel loops ran on the shared pool\\n\", fails, "
      "kiln_kernels_parallel_loops ? kiln_kernels_parallel_loops() : 0L);\n",
      "  return fails == 0 ? 0 : 1;\n}\n");

  std::string cmake = absl::StrCat(
      "# The kernels of Kiln job ", CommentSafe(kernels.job_id()),
      " as one library, kiln_kernels, with one shared thread pool\n"
      "# (kiln_runtime.cc), and kiln_kernels_selftest, which checks every kernel against a "
      "reference.\n"
      "#   cmake -S . -B build && cmake --build build && build/kiln_kernels_selftest\n"
      "cmake_minimum_required(VERSION 3.16)\n"
      "project(kiln_kernels CXX)\n\n"
      "option(KILN_KERNELS_SHARED \"Build kiln_kernels as a shared library\" OFF)\n"
      "if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)\n"
      "  set(CMAKE_BUILD_TYPE Release)\nendif()\n"
      "set(KILN_KERNEL_SOURCES\n    ",
      Join(sources, "\n    "),
      ")\n"
      "if(KILN_KERNELS_SHARED)\n  add_library(kiln_kernels SHARED)\nelse()\n"
      "  add_library(kiln_kernels STATIC)\nendif()\n"
      "target_sources(kiln_kernels PRIVATE kiln_runtime.cc kiln_kernels.cc "
      "${KILN_KERNEL_SOURCES})\n"
      "target_include_directories(kiln_kernels PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})\n"
      "target_compile_features(kiln_kernels PUBLIC cxx_std_17)\n"
      "# As Kiln compiled them when it tuned and verified them.\n"
      "target_compile_options(kiln_kernels PRIVATE -O3 -march=native -fopenmp-simd)\n"
      "set_target_properties(kiln_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)\n"
      "# The kernels carry no thread pool of their own: they use kiln_runtime.cc's.\n"
      "set_source_files_properties(${KILN_KERNEL_SOURCES} PROPERTIES COMPILE_DEFINITIONS "
      "KILN_RT_HOSTED=1)\n"
      "find_package(Threads REQUIRED)\n"
      "target_link_libraries(kiln_kernels PUBLIC Threads::Threads m)\n"
      "# The kernels reach the pool through a weak reference, which does not pull kiln_runtime.o "
      "out of a\n# static archive: programs that link the library ask for it explicitly.\n"
      "target_link_options(kiln_kernels INTERFACE \"LINKER:--undefined=kiln_rt_parallel_for_v1\")"
      "\n\n"
      "add_executable(kiln_kernels_selftest kiln_kernels_selftest.cc)\n"
      "target_compile_options(kiln_kernels_selftest PRIVATE -O2)\n"
      "target_link_libraries(kiln_kernels_selftest PRIVATE kiln_kernels)\n"
      "enable_testing()\n"
      "add_test(NAME kiln_kernels_selftest COMMAND kiln_kernels_selftest)\n");

  // The README's example: the first kernel, prepacked if it must be.
  const Api& e = apis.front();
  std::string example;
  if (e.gemm_abi) {
    const std::string mnk =
        absl::StrFormat("%d, %d, %d", Dim(e.w, "M"), Dim(e.w, "N"), Dim(e.w, "K"));
    example = absl::StrCat(
        "#include <stdlib.h>\n#include \"kiln_kernels.h\"\n\n", "int main(void) {\n",
        "  const int M = ", Dim(e.w, "M"), ", N = ", Dim(e.w, "N"), ", K = ", Dim(e.w, "K"), ";\n",
        "  float* A = calloc((size_t)M * K, sizeof(float));  /* activations, row-major */\n",
        "  float* B = calloc((size_t)K * N, sizeof(float));  /* weights, row-major */\n",
        "  float* C = malloc((size_t)M * N * sizeof(float));\n");
    if (e.prepack)
      absl::StrAppend(&example, "  float* P = malloc(", e.name,
                      "_prepack_floats(N, K) * sizeof(float));\n", "  ", e.name,
                      "_prepack(N, K, B, P);  /* once: PREPACK kernels take packed weights */\n",
                      "  ", e.name, "(M, N, K, A, P, C);  /* C = A * B */\n");
    else
      absl::StrAppend(&example, "  ", e.name, "(M, N, K, A, B, C);  /* C = A * B */\n");
    absl::StrAppend(&example, "  return 0;\n}\n");
    (void)mnk;
  } else {
    example = absl::StrCat(
        "#include <stdlib.h>\n#include \"kiln_kernels.h\"\n\n/* see kiln_kernels.h for ", e.name,
        "'s operands and their shapes */\nvoid run(", Signature(e), ") {\n");
    if (e.prepack)
      absl::StrAppend(&example, "  /* once, at load time: */\n  void* packed = malloc(", e.name,
                      "_prepack_bytes());\n  ", e.name, "_prepack(", WeightsName(e),
                      ", packed);\n");
    std::vector<std::string> call;
    for (const auto& o : e.operands)
      if (o.used)
        call.push_back(e.prepack && o.weights ? absl::StrCat("(const ", o.type, "*)packed")
                                              : o.name);
    for (const auto& p : e.params) call.push_back(p.name);
    absl::StrAppend(&example, "  ", e.name, "(", Join(call), ");\n}\n");
  }
  std::string readme = absl::StrCat(
      "# Kiln kernels of job ", kernels.job_id(), "\n\n", "Tuned and verified on ",
      kernels.chip().chip_type(), " (", kernels.chip().model(), "). ", apis.size(), " kernel",
      apis.size() == 1 ? "" : "s",
      ", one C function each, declared and documented in `kiln_kernels.h`;\n"
      "`manifest.json` states each one's calling convention (operands, shapes, layouts, the "
      "prepack step, threads).\n\n",
      "## Build and check\n\n```sh\ncmake -S . -B build && cmake --build build\n"
      "build/kiln_kernels_selftest   # every kernel against a reference; exit 0 if all "
      "pass\n```\n\n",
      "Link your program with the `kiln_kernels` target (`add_subdirectory(this-dir)` then\n"
      "`target_link_libraries(app PRIVATE kiln_kernels)`), or with `build/libkiln_kernels.a` "
      "plus\n`-Wl,--undefined=kiln_rt_parallel_for_v1 -lstdc++ -lpthread -lm` (the option pulls in "
      "the thread pool).\n\n## Example\n\n```c\n",
      example,
      "```\n\n## Rules\n\n"
      "- Buffers are row-major and contiguous in the shapes `kiln_kernels.h` lists; outputs may "
      "not alias inputs.\n"
      "- A kernel marked PREPACK takes its weights packed: call its `_prepack` function once per "
      "weight matrix\n  (into a buffer of the size its size function gives) and pass the packed "
      "buffer on every call.\n"
      "- Threads: each kernel's thread count is compiled in (`threads` in manifest.json). All "
      "kernels share one\n  pool owned by the library; one parallel loop runs at a time (a kernel "
      "called meanwhile from another\n  thread runs on that thread alone).\n"
      "- GEMMs (`kiln_gemm_*`) take any M, N, K; the other kernels are built for the shape in "
      "their name.\n");
  files = {{"kiln_kernels.h", header},
           {"kiln_kernels.cc", wrappers},
           {"kiln_runtime.cc", kRuntime},
           {"kiln_parallel.h", kKilnCpuParallelSource},
           {"kiln_selftest.h", kKilnSelftestSource},
           {"kiln_kernels_selftest.cc", tests},
           {"CMakeLists.txt", cmake},
           {"README.md", readme}};
  return files;
}

}  // namespace kiln::cli
