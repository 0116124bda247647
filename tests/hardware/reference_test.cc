// The reference GEMM, the verification tolerance and the seeded input fill.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "codegen/workload.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hardware/buffers.h"
#include "hardware/op_cases.h"
#include "hardware/reference/gemm_reference.h"
#include "hardware/reference/model_ops_reference.h"

namespace kiln::hardware {
namespace {

using ::testing::HasSubstr;

TEST(ReferenceGemmTest, SmallKnownProduct) {
  const float A[] = {1, 2, -3, 4, 5, 6};    // 2x3
  const float B[] = {1, -1, 2, 0, 0.5, 3};  // 3x2
  double ref[4], mag[4];
  ReferenceGemm(2, 2, 3, A, B, ref, mag);
  EXPECT_THAT(std::vector<double>(ref, ref + 4), ::testing::ElementsAre(3.5, -10, 17, 14));
  EXPECT_THAT(std::vector<double>(mag, mag + 4), ::testing::ElementsAre(6.5, 10, 17, 22));
}

struct Problem {
  int M, N, K;
  std::vector<float> a, b, c;
  Problem(int m, int n, int k)
      : M(m), N(n), K(k), a(size_t{1} * m * k), b(size_t{1} * k * n), c(size_t{1} * m * n) {
    FillUniform(a.data(), a.size(), 1);
    FillUniform(b.data(), b.size(), 2);
    // A plain fp32 i-k-j product: a legitimate summation order the check must accept.
    for (int i = 0; i < M; ++i)
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < N; ++j)
          c[size_t{1} * i * N + j] += a[size_t{1} * i * K + k] * b[size_t{1} * k * N + j];
  }
  GemmCheck Check() const { return CheckGemm(M, N, K, a.data(), b.data(), c.data()); }
};

TEST(CheckGemmTest, AcceptsFp32Rounding) {
  Problem p(5, 7, 3000);
  GemmCheck check = p.Check();
  EXPECT_TRUE(check.ok) << check.message;
  EXPECT_GT(check.max_error, 0);
  EXPECT_LT(check.max_error, 1e-5);
}

TEST(CheckGemmTest, NamesTheFirstBadElement) {
  Problem p(4, 5, 20);
  p.c[2 * 5 + 3] *= 1.01f;
  GemmCheck check = p.Check();
  EXPECT_FALSE(check.ok);
  EXPECT_THAT(check.message, HasSubstr("C[2][3] = "));
  EXPECT_THAT(check.message, HasSubstr("1 of 20 elements"));
  EXPECT_GT(check.max_error, 1e-4);
}

TEST(CheckGemmTest, NaNIsAlwaysWrong) {
  Problem p(3, 3, 3);
  p.c[8] = std::numeric_limits<float>::quiet_NaN();
  GemmCheck check = p.Check();
  EXPECT_FALSE(check.ok);
  EXPECT_THAT(check.message, HasSubstr("C[2][2] = nan"));
  EXPECT_THAT(check.message, HasSubstr("unwritten"));
  EXPECT_TRUE(std::isinf(check.max_error));
}

TEST(CheckGemmTest, LargeProblemsSampleRowsAndChecksumTheRest) {
  Problem p(200, 64, 64);
  const double macs = 20.0 * 64 * 64;  // room for 20 rows
  GemmCheck check = CheckGemm(p.M, p.N, p.K, p.a.data(), p.b.data(), p.c.data(), macs);
  EXPECT_TRUE(check.ok) << check.message;
  EXPECT_GE(check.rows_checked, 16);
  EXPECT_LE(check.rows_checked, 20);
  for (int j = 0; j < p.N; ++j) p.c[101 * p.N + j] += 1.0f;  // a whole wrong row
  check = CheckGemm(p.M, p.N, p.K, p.a.data(), p.b.data(), p.c.data(), macs);
  EXPECT_FALSE(check.ok);
  EXPECT_THAT(check.message, ::testing::AnyOf(HasSubstr("row 101 "), HasSubstr("C[101]")));
  EXPECT_EQ(CheckGemm(p.M, p.N, p.K, p.a.data(), p.b.data(), p.c.data()).rows_checked, 200);
}

// A large bf16 GEMM case is verified by sampled rows and checksums, not a full double product.
TEST(OpCaseTest, LargeBf16GemmIsSampledAndStillCatchesAWrongRow) {
  auto w = codegen::ParseWorkload("gemm", "M=64,N=1024,K=4128", "bf16");
  ASSERT_TRUE(w.ok()) << w.status();
  auto c = MakeOpCase(*w);
  ASSERT_TRUE(c.ok()) << c.status();
  const int M = 64, N = 1024, K = 4128;
  std::vector<float> a(size_t{1} * M * K), out(size_t{1} * M * N);
  std::vector<uint16_t> b(size_t{1} * K * N);
  FillArg(c->args[0], a.data(), 1);
  FillArg(c->args[1], b.data(), 2);
  for (int i = 0; i < M; ++i)  // an fp32 product on the widened weights
    for (int k = 0; k < K; ++k) {
      const float x = a[size_t{1} * i * K + k];
      for (int j = 0; j < N; ++j)
        out[size_t{1} * i * N + j] += x * Bf16ToFloat(b[size_t{1} * k * N + j]);
    }
  const std::vector<const void*> in = {a.data(), b.data(), nullptr, nullptr, nullptr};
  const auto t0 = std::chrono::steady_clock::now();
  OpCheck good = c->check(in, {nullptr, nullptr, nullptr, nullptr, out.data()});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(good.ok) << good.message;
  EXPECT_LT(seconds, 5.0);  // the full double product took ~0.3 s per 10^8 MACs: not that
  // Activations rounded to bf16 (a DOT=1 kernel) pass too.
  std::vector<float> rounded(out.size());
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) {
      const float x = Bf16ToFloat(FloatToBf16(a[size_t{1} * i * K + k]));
      for (int j = 0; j < N; ++j)
        rounded[size_t{1} * i * N + j] += x * Bf16ToFloat(b[size_t{1} * k * N + j]);
    }
  OpCheck dot = c->check(in, {nullptr, nullptr, nullptr, nullptr, rounded.data()});
  EXPECT_TRUE(dot.ok) << dot.message;
  // One row that lost its last eighth of K (a dropped slice) fails.
  for (int k = K - K / 8; k < K; ++k)
    for (int j = 0; j < N; ++j)
      out[size_t{37} * N + j] -= a[size_t{37} * K + k] * Bf16ToFloat(b[size_t{1} * k * N + j]);
  OpCheck bad = c->check(in, {nullptr, nullptr, nullptr, nullptr, out.data()});
  EXPECT_FALSE(bad.ok);
  EXPECT_THAT(bad.message, HasSubstr("rounded to bf16"));
}

// One reference, many outputs: what a long-lived trial process does for kernel after kernel.
TEST(GemmReferenceTest, OneReferenceChecksManyOutputs) {
  Problem p(200, 64, 64);
  const GemmReference ref(p.M, p.N, p.K, p.a.data(), p.b.data(), 20.0 * 64 * 64);
  std::vector<float> good = p.c;
  EXPECT_TRUE(ref.Check(good.data()).ok);
  std::vector<float> bad_row = p.c;
  for (int j = 0; j < p.N; ++j) bad_row[101 * p.N + j] += 1.0f;
  EXPECT_FALSE(ref.Check(bad_row.data()).ok);
  std::vector<float> nan = p.c;
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(ref.Check(nan.data()).message, HasSubstr("C[0][5] = nan"));
  GemmCheck again = ref.Check(good.data());  // unchanged by the failures before
  EXPECT_TRUE(again.ok) << again.message;
  EXPECT_EQ(
      again.rows_checked,
      CheckGemm(p.M, p.N, p.K, p.a.data(), p.b.data(), good.data(), 20.0 * 64 * 64).rows_checked);
}

TEST(CheckGemmTest, DecodeShapeVerifiesQuickly) {
  const int M = 8, N = 4096, K = 4096;
  FloatBuffer a(size_t{1} * M * K), b(size_t{1} * K * N), c(size_t{1} * M * N);
  FillUniform(a.data(), a.size(), 3);
  FillUniform(b.data(), b.size(), 4);
  auto start = std::chrono::steady_clock::now();
  GemmCheck check = CheckGemm(M, N, K, a.data(), b.data(), c.data());  // c = 0: wrong
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("verification of M=8 N=4096 K=4096 took %.3f s\n", s);
  EXPECT_FALSE(check.ok);
  EXPECT_LT(s, 1.0);  // ~0.1 s when the machine is idle; generous for shared CI machines
}

TEST(FillTest, SeededUniformValues) {
  std::vector<float> x(1000), y(1000), z(1000);
  FillUniform(x.data(), x.size(), 7);
  FillUniform(y.data(), y.size(), 7);
  FillUniform(z.data(), z.size(), 8);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  double mean = 0;
  for (float v : x) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    mean += v / x.size();
  }
  EXPECT_NEAR(mean, 0, 0.1);
  FillNaN(z.data(), z.size());
  EXPECT_TRUE(std::isnan(z[999]));
}

}  // namespace
}  // namespace kiln::hardware
