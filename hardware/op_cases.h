// The operator table, verification half (the shape half is codegen/op_table.h): for every
// operator, the buffers it takes in kernel-argument order, how inputs are drawn, its scalars, and
// the check of its outputs against the double-precision reference with its tolerance. Every
// backend verifies with it: the CPU harness (cpu/op_harness.cc) and the accelerators'
// (operands.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// kQuant: bytes of a quantized weight matrix in the plain layout (reference/quant_format.h).
enum class Elem { kF32, kBF16, kI32, kQuant };
// How an argument is filled before a call: uniform [-1,1), negative (-(0..1], Mamba's A),
// positions (0..4095), distinct experts per token (< E), or NaN (outputs, verified written).
enum class Fill { kUniform, kNegative, kPositions, kExperts, kNaN };

struct ArgSpec {
  std::string name;
  size_t count = 0;  // elements
  Elem elem = Elem::kF32;
  Fill fill = Fill::kUniform;
  bool inout = false;  // an input the operator updates in place (residual, state, rope's x)
  // Read only when the workload has an epilogue (gemm's bias and R, rmsnorm's residual): the
  // accelerator kernels, which take no epilogue, have no such argument.
  bool epilogue_only = false;
  // kQuant: the matrix's K x N and bits (8 or 4); filled by quantizing uniform weights.
  int64_t quant_k = 0, quant_n = 0;
  int quant_bits = 0;
  size_t Bytes() const { return count * (elem == Elem::kBF16 ? 2 : elem == Elem::kQuant ? 1 : 4); }
};

struct OpCheck {
  bool ok = false;
  std::string message;
  double max_error = 0;
};

struct OpCase {
  std::vector<long long> dims;  // the workload's dims in the table's order (OrderedDims)
  std::vector<float> params;    // the operator's scalars
  std::vector<ArgSpec> args;
  int experts = 1, topk = 1;  // for Fill::kExperts
  // before: every argument as filled before the call; after: as the kernel left them.
  std::function<OpCheck(const std::vector<const void*>& before,
                        const std::vector<const void*>& after)>
      check;
};

// The case of a workload: every operator of the table (UNIMPLEMENTED for one without a case).
absl::StatusOr<OpCase> MakeOpCase(const v1::Workload& w);

// Fills `data` (spec.count elements) per spec.fill from `seed`; `experts`/`topk` for kExperts.
void FillArg(const ArgSpec& spec, void* data, uint64_t seed, int experts = 1, int topk = 1);

// |got - ref| <= rtol * scale + atol elementwise (scale: |ref| or the given magnitudes), every
// element finite. Names the first bad element.
OpCheck Compare(const std::string& what, const float* got, const double* ref, size_t n, double rtol,
                double atol, const double* mag = nullptr);

}  // namespace kiln::hardware
