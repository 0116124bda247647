// Reference GEMM in double precision and the verification of a kernel's output against it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::hardware {

// ref = A*B and mag = |A|*|B| (element-wise absolute values), row-major, accumulated in double.
// mag scales the tolerance: rounding error grows with sum_k |a_ik * b_kj|, not with |c_ij|.
void ReferenceGemm(int M, int N, int K, const float* A, const float* B, double* ref, double* mag);

struct GemmCheck {
  bool ok = false;
  std::string message;   // names the first bad element (or row), the count and max_error
  double max_error = 0;  // max_ij |c - ref| / sum_k |a_ik*b_kj| (infinite for NaN)
  int rows_checked = 0;  // rows compared element by element (all M unless sampled)
};

// Tolerance for fp32: an element passes when |c - ref| <= kGemmRelTol * sum_k |a_ik*b_kj| +
// 1e-30. Blocked fp32 summation errs by about sqrt(K) * 6e-8 of that sum in practice and
// K * 6e-8 at worst, so 1e-4 accepts every sane summation order for the shapes we tune, while
// a wrong index, a lost K slice or a stale value fails by orders of magnitude. NaN (such as an
// element never written: outputs are pre-filled with NaN) always fails.
inline constexpr double kGemmRelTol = 1e-4;

// Up to this many multiply-adds (~0.2 s) every element is compared with the reference.
inline constexpr double kFullCheckMacs = double{1 << 30};

// Verifies C (MxN) = A*B. Every element must be finite. When M*N*K <= max_macs every element
// is compared with the reference; above it, a spread of rows (the first, the last, evenly
// spaced and pseudo-random ones) is compared element by element and every row is checked by
// a randomised checksum (Freivalds: C*x against A*(B*x), tolerance summed over the row), which
// catches gross errors anywhere in O(MN + NK) time.
GemmCheck CheckGemm(int M, int N, int K, const float* A, const float* B, const float* C,
                    double max_macs = kFullCheckMacs);

// CheckGemm in two halves: the reference side, computed once from A and B (the sampled rows and
// the checksums of every row), and Check(C), which compares an output with it in O(M*N) time plus
// the sampled rows. A process that verifies many kernels on the same inputs keeps one
// (hardware/cpu/gemm_harness.cc): computing it was 0.04-0.25 s of every tuning trial.
class GemmReference {
 public:
  GemmReference(int M, int N, int K, const float* A, const float* B,
                double max_macs = kFullCheckMacs);
  GemmCheck Check(const float* C) const;

 private:
  int M_, N_;
  std::vector<int> rows_;                   // compared element by element
  std::vector<double> ref_, mag_;           // their reference and tolerance scale
  std::vector<float> x_;                    // the checksum vector (when rows are sampled)
  std::vector<double> row_want_, row_mag_;  // A*(B*x) and |A|*|B*x|, per row
};

}  // namespace kiln::hardware
