#include "codegen/kernel_template.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cpu/gemm_template.h"
#include "codegen/cpu/op_templates.h"
#include "codegen/cuda/cuda_templates.h"
#include "codegen/opencl/opencl_templates.h"
#include "codegen/replay_template.h"
#include "codegen/sim/sim_templates.h"
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

namespace {

// Every kernel template, by chip kind. A backend adds its templates here; the first one whose
// Supports() accepts the workload is used.
struct Registered {
  std::string chip_kind;
  const KernelTemplate* tmpl;
};

const std::vector<Registered>& Registry() {
  static const std::vector<Registered>* const all = [] {
    auto* r = new std::vector<Registered>{
        {"cpu", NewCpuGemmTemplate().release()},
    };
    for (auto& t : NewCpuOpTemplates()) r->push_back({"cpu", t.release()});  // model operators
    for (auto& t : NewOpenClTemplates()) r->push_back({"opencl", t.release()});
    for (auto& t : NewCudaTemplates()) r->push_back({"cuda", t.release()});
    for (auto& t : NewSimTemplates()) r->push_back({"sim", t.release()});
    r->push_back({"replay", NewReplayTemplate().release()});  // recorded data sets
    return r;
  }();
  return *all;
}

}  // namespace

absl::StatusOr<const KernelTemplate*> FindTemplate(const v1::Workload& w,
                                                   const std::string& chip_kind) {
  bool kind_known = false;
  std::vector<std::string> names;
  for (const auto& r : Registry()) {
    if (r.chip_kind != chip_kind) continue;
    kind_known = true;
    if (r.tmpl->Supports(w)) return r.tmpl;
    names.push_back(r.tmpl->name());
  }
  if (!kind_known)
    return absl::UnimplementedError(
        absl::StrCat("no kernel templates for chip kind '", chip_kind, "'"));
  return absl::NotFoundError(absl::StrCat("no ", chip_kind, " kernel template supports ",
                                          WorkloadKey(w),
                                          " (templates: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<KnobSpace> SpaceFor(const v1::Workload& w, const v1::ChipFingerprint& chip) {
  if (chip.kind() == "replay") return ReplaySpaceFromFingerprint(chip);  // space in fingerprint
  auto tmpl = FindTemplate(w, chip.kind());
  if (!tmpl.ok()) return tmpl.status();
  return (*tmpl)->Space(w, TraitsFromFingerprint(chip));
}

absl::StatusOr<Kernel> RenderFor(const v1::Workload& w, const v1::ChipFingerprint& chip,
                                 const Config& config) {
  auto tmpl = FindTemplate(w, chip.kind());
  if (!tmpl.ok()) return tmpl.status();
  return (*tmpl)->Render(w, config, TraitsFromFingerprint(chip));
}

}  // namespace kiln::codegen
