// Reference GEMM in double precision and the verification of a kernel's output against it.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace kiln::hardware
