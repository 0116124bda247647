#include "hardware/reference/gemm_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hardware/buffers.h"

namespace kiln::hardware {
namespace {

// One row update: r += a*b, g += |a|*|b|. Compiled for several ISAs, picked at load time.
__attribute__((target_clones("avx512f", "avx2,fma", "default"))) void RowUpdate(
    int n, double a, const float* __restrict b, double* __restrict r, double* __restrict g) {
  const double abs_a = std::fabs(a);
  for (int j = 0; j < n; ++j) {
    const double bj = b[j];
    r[j] += a * bj;
    g[j] += abs_a * std::fabs(bj);
  }
}

// The rows compared element by element: all of them, or a spread of `count`.
std::vector<int> RowsToCheck(int M, int count) {
  if (count >= M) {
    std::vector<int> all(M);
    for (int i = 0; i < M; ++i) all[i] = i;
    return all;
  }
  std::vector<int> rows;
  const int even = std::max(2, count / 2);
  for (int t = 0; t < even; ++t)
    rows.push_back(static_cast<int>(int64_t{t} * (M - 1) / (even - 1)));
  uint64_t state = 0x2545F4914F6CDD1DULL;
  while (static_cast<int>(rows.size()) < count) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    rows.push_back(static_cast<int>((state >> 33) % M));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace

void ReferenceGemm(int M, int N, int K, const float* A, const float* B, double* ref, double* mag) {
  std::fill(ref, ref + static_cast<size_t>(M) * N, 0.0);
  std::fill(mag, mag + static_cast<size_t>(M) * N, 0.0);
  // Columns split over the cores. In each part, rows of C in blocks whose double accumulators (16
  // bytes per element) fit in ~512 KiB, so B streams from memory once per block; i-k-j order
  // inside a block keeps every access contiguous.
  ParallelChunks(
      N,
      [&](size_t j0, size_t j1) {
        const int n = static_cast<int>(j1 - j0);
        const int rows =
            std::clamp<int>(static_cast<int>((512 << 10) / (16.0 * n)), 1, std::max(1, M));
        for (int i0 = 0; i0 < M; i0 += rows) {
          const int i1 = std::min(M, i0 + rows);
          for (int k = 0; k < K; ++k) {
            const float* b = B + static_cast<size_t>(k) * N + j0;
            for (int i = i0; i < i1; ++i)
              RowUpdate(n, A[static_cast<size_t>(i) * K + k], b,
                        ref + static_cast<size_t>(i) * N + j0,
                        mag + static_cast<size_t>(i) * N + j0);
          }
        }
      },
      /*min_chunk=*/256);
}

namespace {

// The first non-finite element of C, as a failed check; ok when there is none.
GemmCheck AllFinite(int M, int N, const float* C) {
  GemmCheck check;
  const size_t n = static_cast<size_t>(M) * N;
  for (size_t e = 0; e < n; ++e) {
    if (std::isfinite(C[e])) continue;
    check.max_error = std::numeric_limits<double>::infinity();
    check.message = absl::StrCat("wrong result: C[", e / N, "][", e % N, "] = ", C[e],
                                 std::isnan(C[e]) ? " (NaN: element unwritten or poisoned)" : "");
    return check;
  }
  check.ok = true;
  return check;
}

}  // namespace

GemmReference::GemmReference(int M, int N, int K, const float* A, const float* B, double max_macs)
    : M_(M), N_(N) {
  const double row_macs = double{1} * N * K;
  rows_ = RowsToCheck(M, static_cast<int>(std::max(16.0, std::floor(max_macs / row_macs))));
  // The sampled rows of A, gathered, against the full B.
  std::vector<float> a_rows(rows_.size() * size_t{1} * K);
  for (size_t r = 0; r < rows_.size(); ++r)
    std::copy_n(A + static_cast<size_t>(rows_[r]) * K, K, a_rows.begin() + r * K);
  ref_.resize(rows_.size() * size_t{1} * N);
  mag_.resize(ref_.size());
  ReferenceGemm(static_cast<int>(rows_.size()), N, K, a_rows.data(), B, ref_.data(), mag_.data());
  if (static_cast<int>(rows_.size()) == M) return;
  // Freivalds' checksum of every row: (C x)_i against (A (B x))_i for a random x, with the
  // element tolerances summed along the row.
  x_.resize(N);
  FillUniform(x_.data(), N, 0xF4E1);
  std::vector<double> bx(K, 0), bx_mag(K, 0);
  for (int k = 0; k < K; ++k) {
    const float* b = B + static_cast<size_t>(k) * N;
    for (int j = 0; j < N; ++j) {
      bx[k] += double{b[j]} * x_[j];
      bx_mag[k] += std::fabs(double{b[j]} * x_[j]);
    }
  }
  row_want_.assign(M, 0);
  row_mag_.assign(M, 0);
  for (int i = 0; i < M; ++i) {
    const float* a = A + static_cast<size_t>(i) * K;
    for (int k = 0; k < K; ++k) {
      row_want_[i] += a[k] * bx[k];
      row_mag_[i] += std::fabs(double{a[k]}) * bx_mag[k];
    }
  }
}

GemmCheck GemmReference::Check(const float* C) const {
  GemmCheck check = AllFinite(M_, N_, C);
  if (!check.ok) return check;
  check.ok = false;
  const int N = N_;
  check.rows_checked = static_cast<int>(rows_.size());
  size_t bad = 0, first = 0;
  for (size_t r = 0; r < rows_.size(); ++r) {
    for (int j = 0; j < N; ++j) {
      const size_t e = r * N + j;
      const double err = std::fabs(C[static_cast<size_t>(rows_[r]) * N + j] - ref_[e]);
      check.max_error = std::max(check.max_error, err / (mag_[e] + 1e-30));
      if (!(err <= kGemmRelTol * mag_[e] + 1e-30) && bad++ == 0) first = e;
    }
  }
  const std::string scope =
      check.rows_checked == M_
          ? absl::StrCat(size_t{1} * M_ * N, " elements")
          : absl::StrCat(size_t{1} * check.rows_checked * N, " checked elements (",
                         check.rows_checked, " of ", M_, " rows sampled)");
  if (bad > 0) {
    const size_t i = rows_[first / N], j = first % N;
    check.message =
        absl::StrCat("wrong result: C[", i, "][", j, "] = ", C[i * N + j], ", want ", ref_[first],
                     "; ", bad, " of ", scope, " outside |c - ref| <= ", kGemmRelTol,
                     " * sum_k|a*b|; max_error ", check.max_error);
    return check;
  }
  for (int i = 0; i < static_cast<int>(row_want_.size()); ++i) {
    const float* c = C + static_cast<size_t>(i) * N;
    double got = 0;
    for (int j = 0; j < N; ++j) got += double{c[j]} * x_[j];
    if (!(std::fabs(got - row_want_[i]) <= kGemmRelTol * row_mag_[i] + 1e-30)) {
      check.message = absl::StrCat("wrong result: row ", i,
                                   " of C fails the randomised checksum C*x = A*(B*x); ",
                                   "max_error of the sampled rows ", check.max_error);
      return check;
    }
  }
  check.ok = true;
  return check;
}

GemmCheck CheckGemm(int M, int N, int K, const float* A, const float* B, const float* C,
                    double max_macs) {
  GemmCheck finite = AllFinite(M, N, C);  // before the reference: an unwritten C fails at once
  if (!finite.ok) return finite;
  return GemmReference(M, N, K, A, B, max_macs).Check(C);
}

}  // namespace kiln::hardware
