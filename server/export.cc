#include "server/export.h"

#include <cctype>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/kernel_template.h"
#include "codegen/knob_space.h"
#include "codegen/workload.h"
#include "common/status.h"
#include "common/text.h"

namespace kiln::server {
namespace {

// "gemm m=1 n=2560 k=2048 fp32" -> "gemm_m1_n2560_k2048_fp32" (+ the dialect's extension): a
// plain base name (letters, digits, '_', one '.'), at most 200 characters before it.
std::string FileName(const std::string& key, const std::string& dialect) {
  std::string out;
  for (char c : key) {
    if (out.size() >= 200) break;
    if (c == ' ')
      out += '_';
    else if (c == '+')
      out += "plus_";
    else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
      out += c;
  }
  if (out.empty()) out = "kernel";
  return out + (dialect == "cpp" ? ".cc" : dialect == "cuda" ? ".cu" : ".cl");
}

// A C identifier: what a #define may name.
bool IsIdentifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

// "gemm m=8 n=1024 k=1024 +bias fp32" -> "kiln_gemm_m8_n1024_k1024_bias": the C name of a
// kernel in an exported library, unique per workload (fp32 is left out, other types are kept).
std::string SymbolName(const v1::Workload& w) {
  std::string out = "kiln_";
  for (char c : codegen::WorkloadKey(w)) {
    if (c == ' ')
      out += '_';
    else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const std::string fp32 = "_fp32";
  if (out.size() > fp32.size() && out.compare(out.size() - fp32.size(), fp32.size(), fp32) == 0)
    out.resize(out.size() - fp32.size());
  while (out.find("__") != std::string::npos) out.replace(out.find("__"), 2, "_");
  return out;
}

// The #defines that give a CPU kernel's entry points their unique names, so that several
// kernels link into one program (every operator template but GEMM's exports kiln_op). The
// template keeps its own names: the worker loads what it compiles by those (kernel_package).
// GEMM: NAME(M, N, K, A, B, C), NAME_prepack, NAME_prepack_floats; operators: NAME_op(dims,
// args, params), NAME_op_prepack, NAME_op_prepack_bytes (kiln export wraps them in typed
// functions named NAME). Empty for a template with another entry.
std::vector<std::pair<std::string, std::string>> EntryRenames(const codegen::Kernel& k,
                                                              const std::string& name) {
  if (k.entry == "kiln_gemm")
    return {{"kiln_gemm", name},
            {"kiln_gemm_prepack", name + "_prepack"},
            {"kiln_gemm_prepack_floats", name + "_prepack_floats"}};
  if (k.entry == "kiln_op")
    return {{"kiln_op", name + "_op"},
            {"kiln_op_prepack", name + "_op_prepack"},
            {"kiln_op_prepack_bytes", name + "_op_prepack_bytes"}};
  return {};
}

std::string HowToBuild(const codegen::Kernel& k, const std::string& entry) {
  if (k.dialect == "cpp")
    return absl::StrCat(
        "with the other kernels: the CMakeLists.txt and kiln_kernels.h that kiln export writes "
        "next to this file; alone: c++ -O3 -march=native -shared -fPIC -o kernel.so FILE; call ",
        entry,
        " (extern \"C\"; its arguments in the template's comment below, where the entry is "
        "named ",
        k.entry, ")");
  if (k.dialect == "cuda") return absl::StrCat("NVRTC or nvcc -cubin; kernel ", k.entry);
  return absl::StrCat("clBuildProgram; kernel ", k.entry);
}

}  // namespace

absl::StatusOr<v1::ExportKernelsResponse> ExportJobKernels(const v1::Job& job) {
  v1::ExportKernelsResponse out;
  out.set_job_id(job.id());
  *out.mutable_chip() = job.chip();
  const std::string kind = job.chip().kind();
  if (kind.empty())
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " has not run on any worker yet: no kernel to export"));
  const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(job.chip());
  std::set<std::string> symbols;
  for (const v1::TaskResult& task : job.tasks()) {
    if (!task.has_best() || task.best().status() != v1::OK) continue;
    ASSIGN_OR_RETURN(const codegen::KernelTemplate* t,
                     codegen::FindTemplate(task.workload(), kind));
    const codegen::Config config = codegen::FromProto(task.best_config());
    ASSIGN_OR_RETURN(codegen::Kernel k, t->Render(task.workload(), config, traits));
    if (k.dialect != "cpp" && k.dialect != "opencl" && k.dialect != "cuda")
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.id(), " ran on a ", kind,
          " device, whose kernels are measurements or a model, not code: nothing to export"));
    const std::string key =
        task.workload_key().empty() ? codegen::WorkloadKey(task.workload()) : task.workload_key();
    // From the workload itself, not the stored key: the name goes into a #define.
    std::string symbol = SymbolName(task.workload());
    for (int n = 2; !symbols.insert(symbol).second; ++n)
      symbol = absl::StrCat(SymbolName(task.workload()), "_v", n);
    const auto renames = k.dialect == "cpp" ? EntryRenames(k, symbol)
                                            : std::vector<std::pair<std::string, std::string>>{};
    const std::string entry = renames.empty() ? k.entry : renames.front().second;
    // Every string from a job, a worker's fingerprint or a template goes into a // comment
    // through CommentSafe: a worker names its own chip, and a newline there would put code of
    // its choosing into a file that a user compiles and loads.
    std::string src = absl::StrCat(
        "// Kiln kernel for ", CommentSafe(key), ", exported from job ", CommentSafe(job.id()),
        ".\n", "// Tuned and verified on ", CommentSafe(job.chip().chip_type()), " (",
        CommentSafe(job.chip().model()), ", ", job.chip().cores(), " cores): best median ",
        absl::StrFormat("%.3f", task.best().median_us()), " us over ",
        task.best().samples_us_size(), " samples.\n", "// Template ", CommentSafe(t->name()),
        ", configuration ", CommentSafe(codegen::ConfigKey(config), 4096), ".\n",
        "// Build: ", CommentSafe(HowToBuild(k, entry), 4096), ".\n");
    for (const auto& [name, value] : k.defines) {
      if (!IsIdentifier(name))
        return absl::InternalError(absl::StrCat("template ", t->name(), " defines '",
                                                ShortQuote(name),
                                                "', not an identifier: nothing exported"));
      absl::StrAppend(&src, "#define ", name, " ", value, "\n");
    }
    if (!renames.empty())
      absl::StrAppend(&src, "// The entry points' exported names (unique per kernel):\n");
    for (const auto& [from, to] : renames) {
      if (!IsIdentifier(to))
        return absl::InternalError(absl::StrCat("the kernel name '", ShortQuote(to),
                                                "' is not an identifier: nothing exported"));
      absl::StrAppend(&src, "#define ", from, " ", to, "\n");
    }
    absl::StrAppend(&src, "\n", k.source);
    v1::ExportKernelsResponse::Kernel* e = out.add_kernels();
    e->set_workload_key(key);
    *e->mutable_config() = task.best_config();
    e->set_source(std::move(src));
    e->set_dialect(k.dialect);
    e->set_entry(entry);
    e->set_file_name(FileName(key, k.dialect));
    *e->mutable_best() = task.best();
  }
  if (out.kernels_size() == 0)
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " has no verified kernel yet: nothing to export"));
  return out;
}

}  // namespace kiln::server
