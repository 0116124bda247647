#include "codegen/kernel_template.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/gemm_template.h"
#include "codegen/workload.h"

namespace kiln::codegen {

// FNV-1a, 64 bit: stable across runs, platforms and library versions.
std::string Kernel::Hash() const {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](std::string_view s) {
    for (unsigned char ch : s) {
      h ^= ch;
      h *= 0x100000001b3ULL;
    }
    h ^= 0xff;  // field separator, so ("ab","c") and ("a","bc") differ
    h *= 0x100000001b3ULL;
  };
  mix(dialect);
  mix(source);
  for (const auto& [name, value] : defines) mix(absl::StrCat(name, "=", value));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

absl::StatusOr<const KernelTemplate*> FindTemplate(const v1::Workload& w,
                                                   const std::string& chip_kind) {
  static const KernelTemplate* const cpu_gemm = NewCpuGemmTemplate().release();
  if (chip_kind != "cpu")
    return absl::UnimplementedError(
        absl::StrCat("no kernel templates for chip kind '", chip_kind, "' (known: cpu)"));
  if (w.op() == v1::GEMM) {
    if (!cpu_gemm->Supports(w))
      return absl::NotFoundError(absl::StrCat("template ", cpu_gemm->name(), " does not support ",
                                              WorkloadKey(w), " (fp32 gemm without epilogue)"));
    return cpu_gemm;
  }
  return absl::NotFoundError(absl::StrCat("no cpu kernel template for operator ", OpName(w.op())));
}

absl::StatusOr<KnobSpace> SpaceFor(const v1::Workload& w, const v1::ChipFingerprint& chip) {
  auto tmpl = FindTemplate(w, chip.kind());
  if (!tmpl.ok()) return tmpl.status();
  return (*tmpl)->Space(w, TraitsFromFingerprint(chip));
}

}  // namespace kiln::codegen
