#include "server/export.h"

#include <cctype>

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

std::string HowToBuild(const codegen::Kernel& k) {
  if (k.dialect == "cpp")
    return absl::StrCat("c++ -O3 -march=native -fopenmp -shared -fPIC -o kernel.so FILE; call ",
                        k.entry, " (extern \"C\"; its arguments in the template's comment below)");
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
        "// Build: ", CommentSafe(HowToBuild(k), 4096), ".\n");
    for (const auto& [name, value] : k.defines) {
      if (!IsIdentifier(name))
        return absl::InternalError(absl::StrCat("template ", t->name(), " defines '",
                                                ShortQuote(name),
                                                "', not an identifier: nothing exported"));
      absl::StrAppend(&src, "#define ", name, " ", value, "\n");
    }
    absl::StrAppend(&src, "\n", k.source);
    v1::ExportKernelsResponse::Kernel* e = out.add_kernels();
    e->set_workload_key(key);
    *e->mutable_config() = task.best_config();
    e->set_source(std::move(src));
    e->set_dialect(k.dialect);
    e->set_entry(k.entry);
    e->set_file_name(FileName(key, k.dialect));
    *e->mutable_best() = task.best();
  }
  if (out.kernels_size() == 0)
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " has no verified kernel yet: nothing to export"));
  return out;
}

}  // namespace kiln::server
