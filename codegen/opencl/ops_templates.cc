// The OpenCL row-wise (rmsnorm, softmax), element-wise (swiglu) and decode-attention templates:
// knob spaces, default configurations and launch geometry.
#include "absl/strings/str_cat.h"
#include "codegen/opencl/attention_decode_cl.h"  // generated: kKilnOpenClAttentionDecodeSource
#include "codegen/opencl/opencl_templates.h"
#include "codegen/opencl/rmsnorm_cl.h"  // generated: kKilnOpenClRmsNormSource
#include "codegen/opencl/softmax_cl.h"  // generated: kKilnOpenClSoftmaxSource
#include "codegen/opencl/swiglu_cl.h"   // generated: kKilnOpenClSwigluSource

namespace kiln::codegen {
namespace {

int64_t At(const Config& c, const char* k) { return c.at(k); }

// Rows of width `width` (dims T x width): WG work-items per row, RPG rows per work-group.
// `partials` floats of local memory per work-item for the reductions.
KnobSpace RowSpace(const v1::Workload& w, const ChipTraits& chip, const char* width_dim,
                   int partials, bool online_knob) {
  const int64_t T = DimOf(w, "T"), width = DimOf(w, width_dim);
  const int64_t max_wg = chip.max_work_group_size, local = chip.local_mem_bytes;
  KnobSpace s;
  s.AddKnob("WG", PowersOfTwo(1, 1024), "work-items sharing one row (local x)");
  s.AddKnob("RPG", PowersOfTwo(1, 8), "rows per work-group (local y)");
  s.AddKnob("VW", PowersOfTwo(1, 16), "vector width of loads and stores");
  if (online_knob) s.AddKnob("ONLINE", {0, 1}, "1: one pass for max and sum; 0: two passes");
  s.AddConstraint(absl::StrCat(width_dim, "=", width, " % VW == 0"),
                  [=](const Config& c) { return width % At(c, "VW") == 0; });
  s.AddConstraint(absl::StrCat("WG*RPG <= ", max_wg, " (the device's work-group size limit)"),
                  [=](const Config& c) { return At(c, "WG") * At(c, "RPG") <= max_wg; });
  s.AddConstraint(absl::StrCat("WG*RPG*", 4 * partials, " <= ", local,
                               " bytes (reduction partials in local memory)"),
                  [=](const Config& c) {
                    return At(c, "WG") == 1 || At(c, "WG") * At(c, "RPG") * 4 * partials <= local;
                  });
  s.AddConstraint(absl::StrCat("WG/2 < ", width_dim, "/VW (every work-item has a vector)"),
                  [=](const Config& c) { return At(c, "WG") / 2 < width / At(c, "VW"); });
  s.AddConstraint(absl::StrCat("RPG/2 < T=", T),
                  [=](const Config& c) { return At(c, "RPG") / 2 < T; });
  return s;
}

Config RowDefault(const v1::Workload& w, const char* width_dim, bool online_knob) {
  Config c{{"WG", std::min<int64_t>(64, Pow2Ceil(DimOf(w, width_dim)))}, {"RPG", 1}, {"VW", 1}};
  if (online_knob) c["ONLINE"] = 0;
  return c;
}

Launch RowLaunch(const v1::Workload& w, const Config& c) {
  Launch l;
  l.local[0] = l.global[0] = At(c, "WG");
  l.local[1] = At(c, "RPG");
  l.global[1] = CeilDiv(DimOf(w, "T"), At(c, "RPG")) * At(c, "RPG");
  return l;
}

KnobSpace SwigluSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t F = DimOf(w, "F"), total = DimOf(w, "T") * F;
  const int64_t max_wg = chip.max_work_group_size;
  KnobSpace s;
  s.AddKnob("WG", PowersOfTwo(1, 1024), "work-group size");
  s.AddKnob("VW", PowersOfTwo(1, 16), "vector width");
  s.AddKnob("EPT", PowersOfTwo(1, 16), "vectors per work-item");
  s.AddKnob("FAST", {0, 1}, "1: native_exp and native_divide approximations");
  s.AddConstraint(absl::StrCat("F=", F, " % VW == 0"),
                  [=](const Config& c) { return F % At(c, "VW") == 0; });
  s.AddConstraint(absl::StrCat("WG <= ", max_wg, " (the device's work-group size limit)"),
                  [=](const Config& c) { return At(c, "WG") <= max_wg; });
  s.AddConstraint("WG*EPT/2 < T*F/VW (one work-group is not mostly idle)", [=](const Config& c) {
    return At(c, "WG") * At(c, "EPT") / 2 < total / At(c, "VW");
  });
  return s;
}

Config SwigluDefault(const v1::Workload& w, const ChipTraits&) {
  return {{"WG", std::min<int64_t>(64, Pow2Ceil(DimOf(w, "T") * DimOf(w, "F")))},
          {"VW", 1},
          {"EPT", 1},
          {"FAST", 0}};
}

Launch SwigluLaunch(const v1::Workload& w, const Config& c) {
  const int64_t vectors = DimOf(w, "T") * DimOf(w, "F") / At(c, "VW");
  Launch l;
  l.local[0] = At(c, "WG");
  l.global[0] = CeilDiv(vectors, At(c, "WG") * At(c, "EPT")) * At(c, "WG");
  return l;
}

const std::vector<int64_t> kChunk = PowersOfTwo(16, 1024);

KnobSpace AttentionSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t D = DimOf(w, "D"), L = DimOf(w, "L");
  const int64_t max_wg = chip.max_work_group_size, local = chip.local_mem_bytes;
  KnobSpace s;
  s.AddKnob("WG", PowersOfTwo(1, 256), "work-items per (sequence, head)");
  s.AddKnob("CHUNK", kChunk, "context positions scored per step (in local memory)");
  s.AddKnob("VW", PowersOfTwo(1, 16), "vector width of the q.k dot products");
  s.AddConstraint(absl::StrCat("D=", D, " % VW == 0"),
                  [=](const Config& c) { return D % At(c, "VW") == 0; });
  s.AddConstraint(absl::StrCat("WG <= ", max_wg, " (the device's work-group size limit)"),
                  [=](const Config& c) { return At(c, "WG") <= max_wg; });
  s.AddConstraint(absl::StrCat("(D + CHUNK + WG)*4 <= ", local, " bytes of local memory"),
                  [=](const Config& c) { return (D + At(c, "CHUNK") + At(c, "WG")) * 4 <= local; });
  s.AddConstraint("CHUNK >= WG (every work-item scores a position)",
                  [](const Config& c) { return At(c, "CHUNK") >= At(c, "WG"); });
  s.AddConstraint(absl::StrCat("CHUNK <= L=", L, ", or CHUNK is the smallest value >= L"),
                  [=](const Config& c) { return NotOversized(kChunk, At(c, "CHUNK"), L); });
  s.AddConstraint("ceil(D/WG) <= 32 (a work-item's outputs fit in private memory)",
                  [=](const Config& c) { return CeilDiv(D, At(c, "WG")) <= 32; });
  return s;
}

Config AttentionDefault(const v1::Workload& w, const ChipTraits&) {
  int64_t chunk = 16;
  while (chunk < 256 && chunk < DimOf(w, "L")) chunk *= 2;
  return {{"WG", std::min<int64_t>(64, chunk)}, {"CHUNK", chunk}, {"VW", 1}};
}

Launch AttentionLaunch(const v1::Workload& w, const Config& c) {
  Launch l;
  l.local[0] = At(c, "WG");
  l.global[0] = DimOf(w, "B") * DimOf(w, "H") * At(c, "WG");
  return l;
}

void AttentionDerived(const v1::Workload& w, const Config& c, Defines* d) {
  d->emplace_back("DPT", CeilDiv(DimOf(w, "D"), At(c, "WG")));
}

}  // namespace

std::unique_ptr<DeviceTemplate> NewOpenClRmsNormTemplate() {
  return std::make_unique<DeviceTemplate>(DeviceTemplateSpec{
      "opencl-rmsnorm", "opencl", "kiln_rmsnorm", kKilnOpenClRmsNormSource, v1::RMSNORM,
      [](const v1::Workload& w, const ChipTraits& t) { return RowSpace(w, t, "D", 1, false); },
      [](const v1::Workload& w, const ChipTraits&) { return RowDefault(w, "D", false); }, RowLaunch,
      nullptr});
}

std::unique_ptr<DeviceTemplate> NewOpenClSoftmaxTemplate() {
  return std::make_unique<DeviceTemplate>(DeviceTemplateSpec{
      "opencl-softmax", "opencl", "kiln_softmax", kKilnOpenClSoftmaxSource, v1::SOFTMAX,
      [](const v1::Workload& w, const ChipTraits& t) { return RowSpace(w, t, "N", 2, true); },
      [](const v1::Workload& w, const ChipTraits&) { return RowDefault(w, "N", true); }, RowLaunch,
      nullptr});
}

std::unique_ptr<DeviceTemplate> NewOpenClSwigluTemplate() {
  return std::make_unique<DeviceTemplate>(
      DeviceTemplateSpec{"opencl-swiglu", "opencl", "kiln_swiglu", kKilnOpenClSwigluSource,
                         v1::SWIGLU, SwigluSpace, SwigluDefault, SwigluLaunch, nullptr});
}

std::unique_ptr<DeviceTemplate> NewOpenClAttentionDecodeTemplate() {
  return std::make_unique<DeviceTemplate>(
      DeviceTemplateSpec{"opencl-attention-decode", "opencl", "kiln_attention_decode",
                         kKilnOpenClAttentionDecodeSource, v1::ATTENTION_DECODE, AttentionSpace,
                         AttentionDefault, AttentionLaunch, AttentionDerived});
}

std::vector<std::unique_ptr<KernelTemplate>> NewOpenClTemplates() {
  std::vector<std::unique_ptr<KernelTemplate>> all;
  all.push_back(NewOpenClGemmTemplate());
  all.push_back(NewOpenClRmsNormTemplate());
  all.push_back(NewOpenClSoftmaxTemplate());
  all.push_back(NewOpenClSwigluTemplate());
  all.push_back(NewOpenClAttentionDecodeTemplate());
  return all;
}

}  // namespace kiln::codegen
