#include "codegen/device_template.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "codegen/workload.h"

namespace kiln::codegen {
namespace {

constexpr const char* kGlobal[3] = {"KILN_GLOBAL_X", "KILN_GLOBAL_Y", "KILN_GLOBAL_Z"};
constexpr const char* kLocal[3] = {"KILN_LOCAL_X", "KILN_LOCAL_Y", "KILN_LOCAL_Z"};

}  // namespace

void AppendLaunchDefines(const Launch& launch, Defines* defines) {
  for (int i = 0; i < 3; ++i) defines->emplace_back(kGlobal[i], launch.global[i]);
  for (int i = 0; i < 3; ++i) defines->emplace_back(kLocal[i], launch.local[i]);
}

absl::StatusOr<Launch> LaunchFromDefines(const Defines& defines) {
  Launch l;
  int found = 0;
  for (const auto& [name, value] : defines)
    for (int i = 0; i < 3; ++i) {
      if (name == kGlobal[i]) l.global[i] = value, ++found;
      if (name == kLocal[i]) l.local[i] = value, ++found;
    }
  if (found != 6) return absl::InvalidArgumentError("kernel defines lack the launch geometry");
  for (int i = 0; i < 3; ++i)
    if (l.local[i] < 1 || l.global[i] < 1 || l.global[i] % l.local[i] != 0)
      return absl::InvalidArgumentError(absl::StrCat("launch: global size ", l.global[i],
                                                     " is not a multiple of local size ",
                                                     l.local[i], " in dimension ", i));
  return l;
}

bool DeviceTemplate::Supports(const v1::Workload& w) const {
  return w.op() == spec_.op && (w.dtype() == v1::FP32 || w.dtype() == v1::DTYPE_UNSPECIFIED) &&
         w.epilogue().empty() && ValidateWorkload(w).ok();
}

absl::StatusOr<Kernel> DeviceTemplate::Render(const v1::Workload& w, const Config& config,
                                              const ChipTraits& chip) const {
  if (!Supports(w))
    return absl::InvalidArgumentError(absl::StrCat(name(), ": workload ", WorkloadKey(w),
                                                   " is not supported (fp32, no epilogue)"));
  KnobSpace space = Space(w, chip);
  absl::Status ok = space.Check(config);
  if (!ok.ok()) return absl::InvalidArgumentError(absl::StrCat(name(), ": ", ok.message()));
  Kernel k;
  k.dialect = spec_.dialect;
  k.entry = spec_.entry;
  k.source = std::string(spec_.source);
  const std::map<std::string, int64_t> dims(w.dims().begin(), w.dims().end());  // stable order
  for (const auto& [dim, value] : dims) k.defines.emplace_back("DIM_" + dim, value);
  for (const auto& knob : space.knobs()) k.defines.emplace_back(knob.name, config.at(knob.name));
  if (spec_.derived) spec_.derived(w, config, &k.defines);
  AppendLaunchDefines(spec_.launch(w, config), &k.defines);
  return k;
}

absl::StatusOr<const DeviceTemplate*> FindDeviceTemplate(const v1::Workload& w,
                                                         const std::string& chip_kind) {
  auto t = FindTemplate(w, chip_kind);
  if (!t.ok()) return t.status();
  const auto* d = dynamic_cast<const DeviceTemplate*>(*t);
  if (!d) return absl::InternalError(absl::StrCat((*t)->name(), " is not a device template"));
  return d;
}

int64_t DimOf(const v1::Workload& w, const char* name) {
  auto it = w.dims().find(name);
  return it == w.dims().end() ? 1 : std::max<int64_t>(1, it->second);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool NotOversized(const std::vector<int64_t>& domain, int64_t v, int64_t extent) {
  if (v <= extent) return true;
  for (int64_t d : domain)
    if (d >= extent) return v == d;
  return false;
}

int64_t Pow2Ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

std::vector<int64_t> PowersOfTwo(int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (int64_t v = lo; v <= hi; v *= 2) out.push_back(v);
  return out;
}

}  // namespace kiln::codegen
