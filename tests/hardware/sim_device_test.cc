// The simulated systolic-array backend: NAME parsing, the analytic model's invariants,
// deterministic and labelled measurements, the default-mapping baseline, and that the mapping
// knobs matter.
#include <string>

#include "absl/strings/match.h"
#include "codegen/device_template.h"
#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hardware/sim/systolic_model.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(SystolicNameTest, ParsesWithDefaults) {
  auto a = ParseSystolicName("systolic-128x128");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rows, 128);
  EXPECT_EQ(a->cols, 128);
  EXPECT_EQ(a->sram_bytes, SystolicArray().sram_bytes);
  EXPECT_EQ(a->Name(), "systolic-128x128");
  auto b = ParseSystolicName("systolic-32x64-512kb-50gbs-700mhz");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rows, 32);
  EXPECT_EQ(b->cols, 64);
  EXPECT_EQ(b->sram_bytes, 512 << 10);
  EXPECT_EQ(b->bandwidth_gbs, 50);
  EXPECT_EQ(b->clock_mhz, 700);
  EXPECT_EQ(b->Name(), "systolic-32x64-512kb-50gbs-700mhz");
  for (const char* bad : {"", "systolic", "systolic-0x4", "systolic-4x", "tpu-4x4",
                          "systolic-8x8-12zz", "systolic-8x8-0kb"})
    EXPECT_EQ(ParseSystolicName(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
}

TEST(SystolicModelTest, RespectsPeakAndBandwidth) {
  SystolicArray a;  // 128x128, 200 GB/s, 1 GHz
  for (int df = 0; df < 3; ++df)
    for (int order = 0; order < 6; ++order)
      for (bool db : {false, true}) {
        GemmMapping map{df, 64, 256, 128, order, db};
        SimResult r = SimulateGemm(a, 64, 1024, 1024, map);
        const double macs = 64.0 * 1024 * 1024;
        EXPECT_GE(r.compute_cycles, macs / (a.rows * a.cols));
        EXPECT_LE(r.utilization, 1.0);
        const double compulsory = 4.0 * (64 * 1024 + 1024 * 1024 + 64 * 1024);
        EXPECT_GE(r.dram_bytes, compulsory);
        EXPECT_GE(r.cycles, r.dram_bytes / (a.bandwidth_gbs) - 1);  // 1 GHz: bytes/ns
        EXPECT_NEAR(r.cycles, r.compute_cycles + r.stall_cycles, 1e-6 * r.cycles);
      }
}

TEST(SystolicModelTest, DoubleBufferingAndBiggerArraysHelp) {
  GemmMapping single{0, 128, 128, 128, 0, false}, dbuf = single;
  dbuf.double_buffer = true;
  SystolicArray a;
  EXPECT_LT(SimulateGemm(a, 512, 512, 512, dbuf).cycles,
            SimulateGemm(a, 512, 512, 512, single).cycles);
  SystolicArray small = *ParseSystolicName("systolic-32x32");
  EXPECT_LT(SimulateGemm(a, 512, 512, 512, single).cycles,
            SimulateGemm(small, 512, 512, 512, single).cycles);
}

TEST(SimDeviceTest, DeterministicLabelledMeasurements) {
  auto d = OpenDevice("sim:systolic-128x128");
  ASSERT_TRUE(d.ok()) << d.status();
  const v1::ChipFingerprint& fp = (*d)->Fingerprint();
  EXPECT_EQ(fp.kind(), "sim");
  EXPECT_EQ(fp.vendor(), "simulated");
  EXPECT_EQ(fp.chip_type(), "sim-systolic-128x128");
  EXPECT_THAT(fp.model(), StartsWith("simulated"));
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=64,N=1024,K=1024");
  EXPECT_TRUE((*d)->Supports(w));
  EXPECT_FALSE((*d)->Supports(*codegen::ParseWorkload("softmax", "T=1,N=64")));
  auto t = codegen::FindDeviceTemplate(w, "sim");
  ASSERT_TRUE(t.ok());
  const codegen::Config c = {{"DATAFLOW", 1}, {"TM", 64},   {"TN", 256},
                             {"TK", 512},     {"ORDER", 1}, {"DB", 1}};
  v1::Measurement m1 = testing::RunConfig(**d, **t, w, c), m2 = testing::RunConfig(**d, **t, w, c);
  ASSERT_EQ(m1.status(), v1::OK) << m1.message();
  EXPECT_EQ(m1.median_us(), m2.median_us());
  EXPECT_EQ(m1.cv(), 0);
  EXPECT_THAT(m1.message(), StartsWith("simulated:"));
  EXPECT_THAT(m1.message(), HasSubstr("weight-stationary"));
  EXPECT_THAT(m1.message(), HasSubstr("coverage proven"));
  EXPECT_GT(m1.gflops(), 0);
  EXPECT_EQ((*d)->BaselineName(w), "sim-default-mapping");
  v1::Measurement base = (*d)->MeasureBaseline(w, testing::QuickOptions());
  ASSERT_EQ(base.status(), v1::OK) << base.message();
  EXPECT_THAT(base.message(), StartsWith("simulated:"));
}

TEST(SimDeviceTest, TheMappingMatters) {
  auto d = OpenDevice("sim:systolic-128x128");
  ASSERT_TRUE(d.ok());
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=64,N=1024,K=1024");
  auto t = codegen::FindDeviceTemplate(w, "sim");
  const codegen::ChipTraits traits = codegen::TraitsFromFingerprint((*d)->Fingerprint());
  const SystolicArray a = *ParseSystolicName("systolic-128x128");
  double best = 1e30, worst = 0;
  for (const auto& c : (*t)->Space(w, traits).EnumerateValid(20000)) {
    const double cycles = SimulateGemm(a, 64, 1024, 1024, *GemmMapping::FromConfig(c)).cycles;
    best = std::min(best, cycles);
    worst = std::max(worst, cycles);
  }
  const double def =
      SimulateGemm(a, 64, 1024, 1024, *GemmMapping::FromConfig((*t)->DefaultConfig(w, traits)))
          .cycles;
  EXPECT_LT(best * 1.5, def) << "tuning the mapping beats the default mapping";
  EXPECT_GT(worst, 3 * best);
}

TEST(TileCoverageTest, EveryMappingOfTheSpaceCoversEachElementOnce) {
  const SystolicArray a = *ParseSystolicName("systolic-32x32");
  // Edge tiles in every dimension (none of M, N, K a multiple of the tiles).
  for (int64_t order = 0; order < 6; ++order)
    for (int64_t tile : {16, 48}) {
      GemmMapping map;
      map.order = order;
      map.tm = tile, map.tn = 2 * tile, map.tk = tile / 2;
      EXPECT_EQ(CheckTileCoverage(100, 70, 90, GemmTiles(a, 100, 70, 90, map)), "")
          << "order " << order << " tile " << tile;
    }
}

TEST(TileCoverageTest, NamesWhatANestGetsWrong) {
  const SystolicArray a = *ParseSystolicName("systolic-32x32");
  GemmMapping map;
  map.tm = map.tn = map.tk = 16;
  const std::vector<GemmTile> good = GemmTiles(a, 32, 32, 32, map);
  ASSERT_EQ(good.size(), 8u);
  ASSERT_EQ(CheckTileCoverage(32, 32, 32, good), "");
  auto without = [&](size_t i) {
    std::vector<GemmTile> t = good;
    t.erase(t.begin() + i);
    return t;
  };
  std::vector<GemmTile> twice = good;
  twice.push_back(good[0]);
  std::vector<GemmTile> swapped = good;  // a block's K slices in the wrong order
  for (size_t i = 0; i < swapped.size(); ++i)
    for (size_t j = i + 1; j < swapped.size(); ++j)
      if (swapped[i].m0 == swapped[j].m0 && swapped[i].n0 == swapped[j].n0) {
        std::swap(swapped[i], swapped[j]);
        i = j = swapped.size();
      }
  std::vector<GemmTile> outside = good;
  outside[0].tk = 48;
  std::vector<GemmTile> ragged = good;  // two heights at the same row
  ragged[0].tm = 8;
  EXPECT_THAT(CheckTileCoverage(32, 32, 32, without(good.size() - 1)), HasSubstr("covers K only"));
  EXPECT_THAT(CheckTileCoverage(32, 32, 32, twice), HasSubstr("a slice twice"));
  EXPECT_THAT(CheckTileCoverage(32, 32, 32, swapped), HasSubstr("out of order"));
  EXPECT_THAT(CheckTileCoverage(32, 32, 32, outside), HasSubstr("leaves the 32x32x32 problem"));
  EXPECT_THAT(CheckTileCoverage(32, 32, 32, ragged), HasSubstr("with extents"));
  EXPECT_THAT(CheckTileCoverage(48, 32, 32, good), HasSubstr("M 32..48 is never covered"));
}

TEST(SimDeviceTest, KnownFingerprintMustMatch) {
  auto d = OpenDevice("sim:systolic-128x128");
  ASSERT_TRUE(d.ok());
  v1::ChipFingerprint fp = (*d)->Fingerprint();
  EXPECT_TRUE(OpenDevice("sim:systolic-128x128", &fp).ok());
  EXPECT_EQ(OpenDevice("sim:systolic-64x64", &fp).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(OpenDevice("sim:bogus").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::hardware
