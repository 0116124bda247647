// The OpenCL GEMM template's knob space, default configuration and launch geometry.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/opencl/gemm_cl.h"  // generated: kKilnOpenClGemmSource
#include "codegen/opencl/opencl_templates.h"

namespace kiln::codegen {
namespace {

// On wide-SIMD devices (CPUs: 8 or more fp32 lanes, where OpenCL vectorisation is mostly
// explicit) the narrowest useful vector: half a register, or the widest that divides N.
int64_t MinVectorWidth(const v1::Workload& w, const ChipTraits& chip) {
  if (chip.vector_floats < 8) return 1;
  int64_t v = chip.vector_floats / 2;
  while (DimOf(w, "N") % v != 0) v /= 2;
  return v;
}

KnobSpace GemmSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t M = DimOf(w, "M"), N = DimOf(w, "N"), K = DimOf(w, "K");
  const int64_t max_wg = chip.max_work_group_size, local = chip.local_mem_bytes;
  KnobSpace s;
  s.AddKnob("WGM", PowersOfTwo(1, 32), "work-group size along M (local y)");
  s.AddKnob("WGN", PowersOfTwo(1, 64), "work-group size along N (local x)");
  s.AddKnob("TM", PowersOfTwo(1, 16), "rows of C per work-item");
  s.AddKnob("TN", PowersOfTwo(1, 32), "columns of C per work-item");
  s.AddKnob("VW", PowersOfTwo(1, 16), "vector width of B loads and C stores");
  s.AddKnob("KU", PowersOfTwo(1, 8), "unroll factor of the k loop");
  s.AddKnob("LOCAL", {0, 1}, "1: stage A and B slices in local memory");
  s.AddKnob("TK", PowersOfTwo(8, 64), "depth of a local-memory slice");
  s.AddKnob("RASTER", {0, 1}, "order of work-groups: 0 along N, 1 along M (B panel reuse)");
  auto v = [](const Config& c, const char* k) { return c.at(k); };
  s.AddConstraint("TN % VW == 0 (a work-item's columns are whole vectors)",
                  [=](const Config& c) { return v(c, "TN") % v(c, "VW") == 0; });
  s.AddConstraint(absl::StrCat("N=", N, " % VW == 0 (vector loads stay inside a row)"),
                  [=](const Config& c) { return N % v(c, "VW") == 0; });
  s.AddConstraint(absl::StrCat("WGM*WGN <= ", max_wg, " (the device's work-group size limit)"),
                  [=](const Config& c) { return v(c, "WGM") * v(c, "WGN") <= max_wg; });
  s.AddConstraint("TM*TN <= 256 (a work-item's accumulators fit in private memory)",
                  [=](const Config& c) { return v(c, "TM") * v(c, "TN") <= 256; });
  const int64_t min_outputs = std::min<int64_t>(4, Pow2Ceil(M) * Pow2Ceil(N));
  s.AddConstraint(absl::StrCat("TM*TN >= ", min_outputs,
                               " (register tiling: a work-item reuses "
                               "each A and B value it loads)"),
                  [=](const Config& c) { return v(c, "TM") * v(c, "TN") >= min_outputs; });
  const int64_t vmin = MinVectorWidth(w, chip);
  if (vmin > 1)
    s.AddConstraint(absl::StrCat("VW >= ", vmin, " (a wide-SIMD device, ", chip.vector_floats,
                                 " lanes: narrower vectors leave most lanes idle)"),
                    [=](const Config& c) { return v(c, "VW") >= vmin; });
  const int64_t simd = std::min<int64_t>(chip.vector_floats, Pow2Ceil(N)), n2 = Pow2Ceil(N);
  s.AddConstraint(absl::StrCat("VW*WGN >= ", simd, " or WGN*TN >= ", n2,
                               " (a work-group row spans a SIMD register of columns, by explicit "
                               "vectors or across work-items, unless it spans all of N)"),
                  [=](const Config& c) {
                    return v(c, "VW") * v(c, "WGN") >= simd || v(c, "WGN") * v(c, "TN") >= n2;
                  });
  s.AddConstraint(absl::StrCat("WGM*TM/2 < M=", M, " (a block is not mostly padding)"),
                  [=](const Config& c) { return v(c, "WGM") * v(c, "TM") / 2 < M; });
  s.AddConstraint(absl::StrCat("WGN*TN/2 < N=", N, " (a block is not mostly padding)"),
                  [=](const Config& c) { return v(c, "WGN") * v(c, "TN") / 2 < N; });
  s.AddConstraint(absl::StrCat("KU/2 < K=", K),
                  [=](const Config& c) { return v(c, "KU") / 2 < K; });
  s.AddConstraint("LOCAL == 0 implies TK == 8 (TK only matters with local memory)",
                  [=](const Config& c) { return v(c, "LOCAL") == 1 || v(c, "TK") == 8; });
  s.AddConstraint(absl::StrCat("LOCAL == 1 implies (WGM*TM + WGN*TN)*TK*4 <= ", local,
                               " bytes (the device's local memory)"),
                  [=](const Config& c) {
                    return v(c, "LOCAL") == 0 ||
                           (v(c, "WGM") * v(c, "TM") + v(c, "WGN") * v(c, "TN")) * v(c, "TK") * 4 <=
                               local;
                  });
  s.AddConstraint(
      "LOCAL == 1 implies TK % KU == 0, and TK/2 < K unless TK == 8", [=](const Config& c) {
        return v(c, "LOCAL") == 0 ||
               (v(c, "TK") % v(c, "KU") == 0 && (v(c, "TK") == 8 || v(c, "TK") / 2 < K));
      });
  return s;
}

// The untuned configuration a portable OpenCL GEMM ships with (CLBlast-style register and
// local-memory tiling with middle-of-the-road sizes): 4x4 outputs per work-item (4 x half a
// SIMD register on CPUs), float4 loads (half-register vectors on CPUs), 8x8 work-groups (wider
// along N when vectors are narrower than the SIMD width), 16-deep local-memory slices, no
// unrolling; smaller for tiny shapes.
Config GemmDefault(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t m = Pow2Ceil(DimOf(w, "M")), n = Pow2Ceil(DimOf(w, "N"));
  const int64_t vmin = MinVectorWidth(w, chip);
  const int64_t tm = std::min<int64_t>(4, m), tn = std::min<int64_t>(std::max<int64_t>(4, vmin), n);
  int64_t vw = std::max(tn, vmin);
  while (DimOf(w, "N") % vw != 0) vw /= 2;
  const int64_t wgm = std::clamp<int64_t>(m / tm, 1, 8);
  const int64_t wgn = std::clamp<int64_t>(std::max<int64_t>(8, chip.vector_floats / vw), 1, n / tn);
  return {{"WGM", wgm}, {"WGN", wgn},
          {"TM", tm},   {"TN", tn},
          {"VW", vw},   {"KU", 1},
          {"LOCAL", 1}, {"TK", std::clamp<int64_t>(Pow2Ceil(DimOf(w, "K")), 8, 16)},
          {"RASTER", 0}};
}

Launch GemmLaunch(const v1::Workload& w, const Config& c) {
  const int64_t bm = c.at("WGM") * c.at("TM"), bn = c.at("WGN") * c.at("TN");
  Launch l;
  l.local[0] = c.at("WGN");
  l.local[1] = c.at("WGM");
  l.global[0] = CeilDiv(DimOf(w, "N"), bn) * l.local[0];
  l.global[1] = CeilDiv(DimOf(w, "M"), bm) * l.local[1];
  return l;
}

}  // namespace

std::unique_ptr<DeviceTemplate> NewOpenClGemmTemplate() {
  return std::make_unique<DeviceTemplate>(
      DeviceTemplateSpec{"opencl-gemm", "opencl", "kiln_gemm", kKilnOpenClGemmSource, v1::GEMM,
                         GemmSpace, GemmDefault, GemmLaunch, nullptr});
}

}  // namespace kiln::codegen
