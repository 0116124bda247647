// Measurement integrity (DESIGN.md §5): every timed output is NaN-poisoned outside the sample and
// one timed set is verified after timing, so an implementation that stops computing after its
// first calls comes back WRONG_RESULT instead of fast.
#include <chrono>
#include <cmath>
#include <set>
#include <vector>

#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hardware/cpu/gemm_harness.h"
#include "hardware/cpu/op_harness.h"
#include "hardware/measure.h"
#include "hardware/reference/model_ops_reference.h"

namespace kiln::hardware {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

void Spin(double us) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

MeasureOptions Quick(bool warm) {
  MeasureOptions o;
  o.warm = warm;
  o.warmup = 2;
  o.min_samples = 5;
  o.max_samples = 8;
  o.max_seconds = 0.5;
  return o;
}

void NaiveGemm(int M, int N, int K, const float* A, const float* B, float* C) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float s = 0;
      for (int k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
      C[i * N + j] = s;
    }
}

// Correct on its first `honest` calls (verification, then warm-up), then returns at once.
GemmFn LazyGemm(int honest) {
  auto calls = std::make_shared<int>(0);
  return [calls, honest](int M, int N, int K, const float* A, const float* B, float* C) {
    if ((*calls)++ < honest) NaiveGemm(M, N, K, A, B, C);
  };
}

OpFn LazyOp(OpFn op, int honest) {
  auto calls = std::make_shared<int>(0);
  return [calls, honest, op](const long long* d, void* const* a, const float* p) {
    if ((*calls)++ < honest) op(d, a, p);
  };
}

void Softmax(const long long* d, void* const* a, const float*) {
  std::vector<double> out(d[0] * d[1]);
  ReferenceSoftmaxD(d[0], d[1], static_cast<const float*>(a[0]), out.data());
  float* y = static_cast<float*>(a[1]);
  for (size_t i = 0; i < out.size(); ++i) y[i] = static_cast<float>(out[i]);
}

// In place: x[T,H,D] is rotated where it lies.
void Rope(const long long* d, void* const* a, const float* p) {
  float* x = static_cast<float*>(a[0]);
  std::vector<double> out(d[0] * d[1] * d[2]);
  ReferenceRope(d[0], d[1], d[2], x, static_cast<const int32_t*>(a[1]), p[0], out.data());
  for (size_t i = 0; i < out.size(); ++i) x[i] = static_cast<float>(out[i]);
}

void ExpectCaught(const v1::Measurement& m) {
  EXPECT_EQ(m.status(), v1::WRONG_RESULT) << m.message();
  EXPECT_THAT(m.message(), HasSubstr("output after timing differs"));
  EXPECT_THAT(m.message(), ContainsRegex("\\[[0-9]+\\] = "));  // names the element and its value
  EXPECT_EQ(m.samples_us_size(), 0);                           // no time to rank it by
  EXPECT_EQ(m.median_us(), 0);
}

TEST(TimeRepeatedPrepareTest, RunsBeforeEveryRunOnItsSetOutsideTheSample) {
  MeasureOptions opts = Quick(true);
  opts.target_ci = 1e-9;  // run to max_samples
  std::vector<int> prepared, ran;
  v1::Measurement m = TimeRepeated(
      [&](int set) {
        ran.push_back(set);
        Spin(100);
      },
      3, opts,
      [&](int set) {
        prepared.push_back(set);
        Spin(3000);
      });
  EXPECT_EQ(m.samples_us_size(), opts.max_samples);
  EXPECT_EQ(ran.size(), static_cast<size_t>(opts.warmup + opts.max_samples));
  EXPECT_EQ(prepared, ran);
  EXPECT_LT(m.median_us(), 1500);  // the 3 ms prepare is not in the samples
}

TEST(PoisonWordsTest, PoisonsAndCopiesWithAndWithoutTheCache) {
  for (bool bypass : {false, true}) {
    std::vector<uint32_t> buf(1027, 0), src(1027);
    for (size_t i = 0; i < src.size(); ++i) src[i] = i * 7;
    PoisonWords(buf.data() + 1, 1025, 0x7fc00000u, bypass);  // unaligned head and tail
    EXPECT_EQ(buf[0], 0u);
    EXPECT_EQ(buf[1026], 0u);
    for (size_t i = 1; i < 1026; ++i) ASSERT_EQ(buf[i], 0x7fc00000u) << i;
    CopyWords(buf.data() + 3, src.data() + 3, 1021, bypass);
    for (size_t i = 3; i < 1024; ++i) ASSERT_EQ(buf[i], src[i]) << i;
    EXPECT_EQ(buf[1024], 0x7fc00000u);
  }
}

TEST(GemmIntegrityTest, GemmThatStopsComputingAfterItsFirstCallsIsWrongResult) {
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=4,N=64,K=48");
  const v1::ChipFingerprint chip;
  for (bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "warm" : "cold");
    const MeasureOptions opts = Quick(warm);
    // Only the verification call; verification and warm-up; and one timed call more.
    for (int honest : {1, 1 + opts.warmup, 2 + opts.warmup}) {
      SCOPED_TRACE(honest);
      ExpectCaught(MeasureGemm(w, LazyGemm(honest), chip, opts));
    }
    std::set<const float*> outputs;
    v1::Measurement ok = MeasureGemm(
        w,
        [&](int M, int N, int K, const float* A, const float* B, float* C) {
          outputs.insert(C);
          NaiveGemm(M, N, K, A, B, C);
        },
        chip, opts);
    EXPECT_EQ(ok.status(), v1::OK) << ok.message();
    EXPECT_GE(ok.samples_us_size(), opts.min_samples);
    if (!warm) {
      EXPECT_GT(outputs.size(), 2u);  // rotating sets: poisoned around the cache
    }
  }
}

TEST(GemmIntegrityTest, PrepackedGemmIsCheckedAfterTimingToo) {
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=3,N=40,K=24");
  GemmPrepack identity{[](int N, int K) { return long{N} * K; },
                       [](int N, int K, const float* B, float* packed) {
                         std::copy(B, B + size_t{1} * N * K, packed);
                       }};
  const MeasureOptions opts = Quick(true);
  ExpectCaught(MeasureGemm(w, LazyGemm(1), v1::ChipFingerprint(), opts, &identity));
  EXPECT_EQ(MeasureGemm(w, NaiveGemm, v1::ChipFingerprint(), opts, &identity).status(), v1::OK);
}

TEST(OpIntegrityTest, PureOperatorThatStopsComputingIsWrongResult) {
  const v1::Workload w = *codegen::ParseWorkload("softmax", "T=3,N=101");
  for (bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "warm" : "cold");
    const MeasureOptions opts = Quick(warm);
    ExpectCaught(MeasureOp(w, LazyOp(Softmax, 1), v1::ChipFingerprint(), opts));
    ExpectCaught(MeasureOp(w, LazyOp(Softmax, 1 + opts.warmup), v1::ChipFingerprint(), opts));
    v1::Measurement ok = MeasureOp(w, Softmax, v1::ChipFingerprint(), opts);
    EXPECT_EQ(ok.status(), v1::OK) << ok.message();
    EXPECT_GE(ok.samples_us_size(), opts.min_samples);
  }
}

// An in-place operator's input is restored before every timed run: a correct kernel stays
// correct however often it rotates the same buffer, and one that stops leaves x unrotated.
TEST(OpIntegrityTest, InPlaceOperatorThatStopsComputingIsWrongResult) {
  const v1::Workload w = *codegen::ParseWorkload("rope", "T=3,H=5,D=18");
  for (bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "warm" : "cold");
    const MeasureOptions opts = Quick(warm);
    ExpectCaught(MeasureOp(w, LazyOp(Rope, 1), v1::ChipFingerprint(), opts));
    ExpectCaught(MeasureOp(w, LazyOp(Rope, 1 + opts.warmup), v1::ChipFingerprint(), opts));
    v1::Measurement ok = MeasureOp(w, Rope, v1::ChipFingerprint(), opts);
    EXPECT_EQ(ok.status(), v1::OK) << ok.message();
    EXPECT_GE(ok.samples_us_size(), opts.min_samples);
  }
}

}  // namespace
}  // namespace kiln::hardware
