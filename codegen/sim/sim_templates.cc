#include "codegen/sim/sim_templates.h"

#include "absl/strings/str_cat.h"
#include "codegen/sim/gemm_mapping_txt.h"  // generated: kKilnSimGemmMapping

namespace kiln::codegen {
namespace {

const std::vector<int64_t> kTiles = PowersOfTwo(16, 4096);

KnobSpace GemmMappingSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t M = DimOf(w, "M"), N = DimOf(w, "N"), K = DimOf(w, "K");
  const int64_t sram = chip.l2_bytes;
  KnobSpace s;
  s.AddKnob("DATAFLOW", {kOutputStationary, kWeightStationary, kInputStationary},
            "0 output-, 1 weight-, 2 input-stationary");
  s.AddKnob("TM", kTiles, "rows of the SRAM tile (A and C)");
  s.AddKnob("TN", kTiles, "columns of the SRAM tile (B and C)");
  s.AddKnob("TK", kTiles, "depth of the SRAM tile (A and B)");
  s.AddKnob("ORDER", {0, 1, 2, 3, 4, 5}, "tile loop order: mnk nmk mkn kmn nkm knm");
  s.AddKnob("DB", {0, 1}, "1: double-buffered SRAM, transfers overlap compute");
  auto v = [](const Config& c, const char* k) { return c.at(k); };
  s.AddConstraint(
      absl::StrCat("(TM*TK + TK*TN)*4*(1+DB) + TM*TN*4 <= ", sram, " bytes of on-chip SRAM"),
      [=](const Config& c) { return SimSramBytes(c) <= sram; });
  s.AddConstraint(absl::StrCat("TM <= M=", M, ", or TM is the smallest value >= M"),
                  [=](const Config& c) { return NotOversized(kTiles, v(c, "TM"), M); });
  s.AddConstraint(absl::StrCat("TN <= N=", N, ", or TN is the smallest value >= N"),
                  [=](const Config& c) { return NotOversized(kTiles, v(c, "TN"), N); });
  s.AddConstraint(absl::StrCat("TK <= K=", K, ", or TK is the smallest value >= K"),
                  [=](const Config& c) { return NotOversized(kTiles, v(c, "TK"), K); });
  s.AddConstraint("at most 2^20 tiles (the simulator's step bound)", [=](const Config& c) {
    return CeilDiv(M, v(c, "TM")) * CeilDiv(N, v(c, "TN")) * CeilDiv(K, v(c, "TK")) <= (1 << 20);
  });
  return s;
}

// Output-stationary, 128x128x128 tiles (clipped to the shape), m,n,k order, single-buffered.
Config GemmMappingDefault(const v1::Workload& w, const ChipTraits&) {
  auto tile = [&](const char* dim) {
    return std::max<int64_t>(16, std::min<int64_t>(128, Pow2Ceil(DimOf(w, dim))));
  };
  return {{"DATAFLOW", kOutputStationary},
          {"TM", tile("M")},
          {"TN", tile("N")},
          {"TK", tile("K")},
          {"ORDER", 0},
          {"DB", 0}};
}

}  // namespace

int64_t SimSramBytes(const Config& c) {
  const int64_t tm = c.at("TM"), tn = c.at("TN"), tk = c.at("TK");
  return (tm * tk + tk * tn) * 4 * (1 + c.at("DB")) + tm * tn * 4;
}

std::vector<std::unique_ptr<KernelTemplate>> NewSimTemplates() {
  std::vector<std::unique_ptr<KernelTemplate>> all;
  all.push_back(std::make_unique<DeviceTemplate>(DeviceTemplateSpec{
      "sim-gemm-mapping", "sim", "kiln_sim_gemm", kKilnSimGemmMapping, v1::GEMM, GemmMappingSpace,
      GemmMappingDefault, [](const v1::Workload&, const Config&) { return Launch{}; }, nullptr}));
  return all;
}

}  // namespace kiln::codegen
