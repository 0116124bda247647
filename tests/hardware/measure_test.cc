// The timing harness: statistics, adaptive repetition, rotating sets (and the arena that holds
// them) and the roofline guard.
#include "hardware/measure.h"

#include <chrono>
#include <cmath>

#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hardware/buffers.h"
#include "hardware/cpu/read_sweep.h"
#include "hardware/toolchain.h"

namespace kiln::hardware {
namespace {

using ::testing::HasSubstr;

// Busy-waits, so the duration is accurate even on a loaded machine's scheduler tick.
void Spin(double us) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

v1::Workload Gemm(const char* shape) { return *codegen::ParseWorkload("gemm", shape); }

TEST(SummarizeTest, QuantilesAndSpread) {
  v1::Measurement m;
  for (double x : {10, 1, 9, 2, 8, 3, 7, 4, 6, 5}) m.add_samples_us(x);
  Summarize(&m);
  EXPECT_DOUBLE_EQ(m.median_us(), 5.5);
  EXPECT_NEAR(m.p10_us(), 1.9, 1e-12);
  EXPECT_NEAR(m.p90_us(), 9.1, 1e-12);
  EXPECT_NEAR(m.cv(), std::sqrt(55.0 / 6) / 5.5, 1e-12);  // sample sd / mean

  v1::Measurement one;
  one.add_samples_us(42);
  Summarize(&one);
  EXPECT_EQ(one.median_us(), 42);
  EXPECT_EQ(one.p10_us(), 42);
  EXPECT_EQ(one.cv(), 0);
  v1::Measurement none;
  Summarize(&none);
  EXPECT_EQ(none.median_us(), 0);
}

// The roof a bf16 GEMM is held to: the probe's bf16 peak; without one, twice the FMA peak where
// the CPU has bf16 dot products (a fingerprint from before the probe), the FMA peak on AVX2.
TEST(ComputePeakTest, Bf16RoofFollowsTheInstructions) {
  v1::Workload w = *codegen::ParseWorkload("gemm", "M=512,N=64,K=64", "bf16");
  v1::ChipFingerprint chip;
  chip.set_peak_gflops(100);
  chip.add_isa_features("avx2");
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 100);
  chip.add_isa_features("avx512_bf16");
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 200);
  chip.set_peak_bf16_gflops(170);
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 170);
  w.set_dtype(v1::FP32);
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 100);
}

// The roof an int8/int4 GEMM is held to: the probe's int8 peak (on AVX2 it times vpmaddubsw
// chains); without one, 4x the FMA peak with VNNI, 2x with AVX2 alone, the FMA peak otherwise.
TEST(ComputePeakTest, Int8RoofFollowsTheInstructions) {
  v1::Workload w = *codegen::ParseWorkload("gemm", "M=512,N=64,K=64", "int8");
  v1::ChipFingerprint chip;
  chip.set_peak_gflops(100);
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 400);  // a fingerprint without its ISA: generous
  chip.add_isa_features("sse4_2");
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 100);
  chip.add_isa_features("avx2");
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 200);
  chip.add_isa_features("avx512_vnni");
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 400);
  chip.set_peak_int8_gops(150);
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 150);
  chip.set_peak_int8_gops(80);  // never below the FMA peak
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 100);
  w.set_dtype(v1::INT4);
  EXPECT_DOUBLE_EQ(ComputePeak(w, chip), 100);
}

TEST(TimeRepeatedTest, StableRunsStopAtMinSamples) {
  MeasureOptions opts;
  opts.warmup = 1;
  opts.min_samples = 7;
  opts.target_ci = 0.5;  // generous: a busy-wait is stable well within this
  v1::Measurement m = TimeRepeated([](int) { Spin(200); }, 1, opts);
  EXPECT_EQ(m.status(), v1::OK);
  EXPECT_GE(m.samples_us_size(), 7);
  EXPECT_LE(m.samples_us_size(), 20);
  EXPECT_GE(m.median_us(), 200);
  EXPECT_LT(m.median_us(), 2000);
  EXPECT_GT(m.measure_seconds(), 0);
}

TEST(TimeRepeatedTest, NoisyRunsContinueToMaxSamples) {
  MeasureOptions opts;
  opts.max_samples = 40;
  opts.max_seconds = 10;
  int calls = 0;
  // Alternating 100 / 300 us: the median's confidence interval never narrows below 2%.
  v1::Measurement m = TimeRepeated([&](int) { Spin(calls++ % 2 ? 300 : 100); }, 1, opts);
  EXPECT_EQ(m.samples_us_size(), 40);
}

TEST(TimeRepeatedTest, RacingStopsWhatIsSurelySlowerOrSurelyFasterThanTheBest) {
  MeasureOptions opts;
  opts.max_samples = 40;
  opts.max_seconds = 10;
  int calls = 0;
  auto noisy = [&](int) { Spin(calls++ % 2 ? 300 : 100); };  // 100 / 300 us, alternating
  opts.race_us = 80;  // the best so far: 80 us; these runs take 100-300 us
  v1::Measurement m = TimeRepeated(noisy, 1, opts);
  EXPECT_TRUE(m.raced());
  EXPECT_FALSE(m.raced_ahead());
  EXPECT_EQ(m.samples_us_size(), opts.min_samples);
  opts.race_us = 1e6;  // a best far slower: surely a new best, re-measured in full elsewhere
  calls = 0;
  m = TimeRepeated(noisy, 1, opts);
  EXPECT_FALSE(m.raced());
  EXPECT_TRUE(m.raced_ahead());
  EXPECT_EQ(m.samples_us_size(), opts.min_samples);
  opts.race_us = 200;  // inside the spread: neither side is sure, the runs go to max_samples
  calls = 0;
  m = TimeRepeated(noisy, 1, opts);
  EXPECT_FALSE(m.raced());
  EXPECT_FALSE(m.raced_ahead());
  EXPECT_EQ(m.samples_us_size(), 40);
}

TEST(TimeRepeatedTest, RacingStopsAfterTwoRunsFarBehindTheBest) {
  MeasureOptions opts;
  opts.warmup = 0;
  opts.max_samples = 40;
  opts.max_seconds = 10;
  opts.race_us = 100;  // these runs take 300-600 us: two of them are enough
  int calls = 0;
  v1::Measurement m = TimeRepeated([&](int) { Spin(calls++ % 2 ? 600 : 300); }, 1, opts);
  EXPECT_TRUE(m.raced());
  EXPECT_EQ(m.samples_us_size(), 2);
  opts.race_us = 250;  // 300 us is not far enough behind: racing waits for min_samples
  calls = 0;
  m = TimeRepeated([&](int) { Spin(calls++ % 2 ? 600 : 300); }, 1, opts);
  EXPECT_TRUE(m.raced());
  EXPECT_EQ(m.samples_us_size(), opts.min_samples);
}

TEST(TimeRepeatedTest, TimeCapStopsLongRuns) {
  MeasureOptions opts;
  opts.warmup = 0;
  opts.min_samples = 100;
  opts.max_seconds = 0.05;
  v1::Measurement m = TimeRepeated([](int) { Spin(20000); }, 1, opts);
  EXPECT_GE(m.samples_us_size(), 1);
  EXPECT_LE(m.samples_us_size(), 4);
}

TEST(TimeRepeatedTest, RotatesThroughTheSets) {
  MeasureOptions opts;
  opts.warmup = 2;
  opts.min_samples = 5;
  opts.max_samples = 5;
  std::vector<int> seen;
  TimeRepeated([&](int set) { seen.push_back(set); }, 3, opts);
  EXPECT_THAT(seen, ::testing::ElementsAre(0, 1, 2, 0, 1, 2, 0));
}

TEST(RotatingSetsTest, ExceedFourTimesTheLastLevelCacheAndHalfAGigabyte) {
  v1::ChipFingerprint chip;
  chip.set_l3_bytes(32 << 20);  // 4 x 32 MiB < 512 MiB: the floor decides
  EXPECT_EQ(RotatingSets(64 << 20, chip, /*warm=*/true), 1);
  EXPECT_EQ(RotatingSets(64 << 20, chip, false), 9);
  EXPECT_EQ(RotatingSets(1 << 20, chip, false), 513);
  EXPECT_EQ(RotatingSets(600 << 20, chip, false), 1);
  chip.set_l3_bytes(256 << 20);  // 4 x 256 MiB decides, capped at 1 GiB in total
  EXPECT_EQ(RotatingSets(100 << 20, chip, false), 10);
  EXPECT_EQ(RotatingSets(100 << 20, chip, false, 512 << 20), 5);
  v1::ChipFingerprint unknown;  // no cache sizes: assume 32 MiB
  EXPECT_EQ(RotatingSets(64 << 20, unknown, false), 9);
}

// A long-lived trial process keeps its operand memory: the next arena of about the same size is
// the same memory, zeroed again; a much smaller or larger one is fresh, and so is any once reuse
// is off.
TEST(RotatingArenaTest, KeptArenaIsHandedOutAgainZeroed) {
  constexpr size_t kSet = size_t{1} << 18;
  KeepArenasForReuse(true);
  int sets = 4;
  Arena first = RotatingArena(kSet, &sets);
  ASSERT_EQ(sets, 4);
  float* const memory = first->data();
  first->data()[5] = 3;
  first->data()[4 * kSet - 1] = 7;
  first.reset();  // parked
  int again = 3;  // 3/4 of it: close enough to reuse
  Arena second = RotatingArena(kSet, &again);
  EXPECT_EQ(second->data(), memory);
  EXPECT_EQ(second->size(), 4 * kSet);
  EXPECT_EQ(second->data()[5], 0.0f);
  EXPECT_EQ(second->data()[3 * kSet - 1], 0.0f);
  second.reset();
  int fewer = 1;  // a quarter of it: fresh
  EXPECT_EQ(RotatingArena(kSet, &fewer)->size(), kSet);
  int more = 8;  // larger than what is parked: fresh
  EXPECT_EQ(RotatingArena(kSet, &more)->size(), 8 * kSet);
  KeepArenasForReuse(false);  // what one-shot processes do: every arena is fresh
  int off = 7;
  EXPECT_EQ(RotatingArena(kSet, &off)->size(), 7 * kSet);
}

TEST(ThroughputTest, FromMedian) {
  v1::Measurement m;
  m.set_median_us(1000);
  FillThroughput(Gemm("M=1000,N=1000,K=1000"), &m);
  EXPECT_DOUBLE_EQ(m.gflops(), 2000);
  EXPECT_DOUBLE_EQ(m.gbytes_per_s(), 12);
}

TEST(RooflineGuardTest, FasterThanPeakIsSuspect) {
  v1::ChipFingerprint chip;
  chip.set_peak_gflops(100);
  chip.set_read_gbytes_per_s(10);
  const v1::Workload cube = Gemm("M=1000,N=1000,K=1000");  // 20000 us at 100 GFLOP/s
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(15000);
  ApplyRooflineGuard(cube, chip, false, &m);
  EXPECT_EQ(m.status(), v1::OK);  // within the 1.5x headroom
  m.set_median_us(10000);
  ApplyRooflineGuard(cube, chip, false, &m);
  EXPECT_EQ(m.status(), v1::SUSPECT);
  EXPECT_THAT(m.message(), HasSubstr("roofline bound is 20000 us"));
  EXPECT_THAT(m.message(), HasSubstr("flops / peak"));
}

TEST(RooflineGuardTest, BandwidthBoundOnlyWhenCold) {
  v1::ChipFingerprint chip;
  chip.set_peak_gflops(1000);
  chip.set_read_gbytes_per_s(10);
  const v1::Workload decode = Gemm("M=8,N=4096,K=4096");  // ~67 MB: ~6.7 ms at 10 GB/s
  v1::Measurement cold;
  cold.set_status(v1::OK);
  cold.set_median_us(1000);
  v1::Measurement warm = cold;
  ApplyRooflineGuard(decode, chip, false, &cold);
  EXPECT_EQ(cold.status(), v1::SUSPECT);
  EXPECT_THAT(cold.message(), HasSubstr("read bandwidth"));
  ApplyRooflineGuard(decode, chip, true, &warm);
  EXPECT_EQ(warm.status(), v1::OK);
}

TEST(RooflineGuardTest, BandwidthIsReadAgainBeforeAColdResultIsCalledSuspect) {
  v1::ChipFingerprint chip;
  chip.set_peak_gflops(1e6);
  chip.set_read_gbytes_per_s(0.01);  // a fingerprint probed at a very busy moment
  chip.set_cores(2);
  const v1::Workload decode = Gemm("M=8,N=4096,K=4096");  // 67 MB: 6.7 s at 0.01 GB/s
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(100000);  // 0.67 GB/s: every machine reads that
  v1::Measurement against_fingerprint = m;
  ApplyRooflineGuard(decode, chip, false, &against_fingerprint);
  EXPECT_EQ(against_fingerprint.status(), v1::SUSPECT);
  ApplyRooflineGuardNow(decode, chip, false, &m);
  EXPECT_EQ(m.status(), v1::OK) << m.message();
  // Faster than any memory system (67 TB/s): still SUSPECT, against the bandwidth read now.
  v1::Measurement fast;
  fast.set_status(v1::OK);
  fast.set_median_us(1);
  ApplyRooflineGuardNow(decode, chip, false, &fast);
  EXPECT_EQ(fast.status(), v1::SUSPECT);
  EXPECT_THAT(fast.message(), HasSubstr("read bandwidth"));
  EXPECT_THAT(fast.message(), ::testing::Not(HasSubstr("read bandwidth 0.01 GB/s")));
}

TEST(RooflineGuardTest, PeaksAreProbedAgainBeforeAResultIsCalledFasterThanTheChip) {
  if (!FindToolchain().ok()) GTEST_SKIP() << "no compiler for the peak probe";
  v1::ChipFingerprint chip;
  chip.set_kind("cpu");
  chip.set_peak_gflops(0.5);  // kept from a probe at a very busy moment
  chip.set_read_gbytes_per_s(1e6);
  chip.set_cores(2);
  const v1::Workload square = Gemm("M=256,N=256,K=256");  // 33.6 MFLOP: 67 ms at 0.5 GFLOP/s
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(10000);    // 3.4 GFLOP/s: every machine computes that
  v1::Measurement warm = m;  // a warm result is judged against the compute peak alone
  ApplyRooflineGuardNow(square, chip, false, &m);
  EXPECT_EQ(m.status(), v1::OK) << m.message();
  ApplyRooflineGuardNow(square, chip, true, &warm);
  EXPECT_EQ(warm.status(), v1::OK) << warm.message();
  // Faster than any chip (34 PFLOP/s): still SUSPECT, against the peak probed now.
  v1::Measurement fast;
  fast.set_status(v1::OK);
  fast.set_median_us(0.001);
  ApplyRooflineGuardNow(square, chip, false, &fast);
  EXPECT_EQ(fast.status(), v1::SUSPECT);
  EXPECT_THAT(fast.message(), HasSubstr("flops / peak"));
  EXPECT_THAT(fast.message(), ::testing::Not(HasSubstr("peak 0.5 GFLOP/s")));
}

TEST(RooflineGuardTest, NoOpWithoutPeaksOrOnFailure) {
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(0.001);
  ApplyRooflineGuard(Gemm("M=1000,N=1000,K=1000"), v1::ChipFingerprint(), false, &m);
  EXPECT_EQ(m.status(), v1::OK);
  v1::ChipFingerprint chip;
  chip.set_peak_gflops(1);
  m.set_status(v1::WRONG_RESULT);
  ApplyRooflineGuard(Gemm("M=1000,N=1000,K=1000"), chip, false, &m);
  EXPECT_EQ(m.status(), v1::WRONG_RESULT);
}

}  // namespace
}  // namespace kiln::hardware
