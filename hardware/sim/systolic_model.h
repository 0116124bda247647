// An analytic model of a systolic-array accelerator with on-chip SRAM, in the manner of
// SCALE-Sim: deterministic GEMM latencies from the PE array, SRAM, off-chip bandwidth and the
// mapping (dataflow, SRAM tiling, loop order, double buffering).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codegen/knob_space.h"

namespace kiln::hardware {

struct SystolicArray {
  int rows = 128, cols = 128;         // PE array
  int64_t sram_bytes = 8192LL << 10;  // unified on-chip SRAM for A, B and C tiles
  double bandwidth_gbs = 200;         // off-chip bytes per nanosecond
  double clock_mhz = 1000;
  std::string Name() const;  // canonical NAME: defaults omitted ("systolic-128x128")
};

// Parses a sim device NAME: "systolic-RxC[-<S>kb][-<B>gbs][-<F>mhz]", e.g.
// "systolic-128x128", "systolic-32x64-512kb-50gbs". INVALID_ARGUMENT names the bad part.
absl::StatusOr<SystolicArray> ParseSystolicName(absl::string_view name);

struct GemmMapping {
  int dataflow = 0;  // 0 output-, 1 weight-, 2 input-stationary
  int64_t tm = 128, tn = 128, tk = 128;
  int order = 0;  // tile loop order, outermost first: mnk nmk mkn kmn nkm knm
  bool double_buffer = false;
  static absl::StatusOr<GemmMapping> FromConfig(const codegen::Config& c);
};

struct SimResult {
  double cycles = 0;          // total
  double compute_cycles = 0;  // the array busy (fill and drain included)
  double stall_cycles = 0;    // waiting for off-chip transfers
  double dram_bytes = 0;      // off-chip traffic
  double utilization = 0;     // useful MACs / (cycles * rows * cols)
  double microseconds(const SystolicArray& a) const { return cycles / a.clock_mhz; }
};

// Runs the tile loop nest of C[M,N] = A[M,K] * B[K,N] (A and C fp32, B `b_bytes` per element).
// Each SRAM tile computes in ceil(Sr/rows) * ceil(Sc/cols) folds of (2*rows + cols + T - 2)
// cycles (SCALE-Sim's fold latency), where (Sr, Sc, T) is (tm, tn, tk) output-stationary,
// (tk, tn, tm) weight-stationary and (tk, tm, tn) input-stationary. Tiles are loaded when they
// change between steps; a C tile left before its last K slice is written back and read again.
// Double buffering overlaps a step's transfers with its compute.
// `on_tile`, when given, sees every step's tile (origin and extent) in execution order.
using TileVisitor =
    std::function<void(int64_t m0, int64_t n0, int64_t k0, int64_t tm, int64_t tn, int64_t tk)>;
SimResult SimulateGemm(const SystolicArray& array, int64_t M, int64_t N, int64_t K,
                       const GemmMapping& mapping, int b_bytes = 4,
                       const TileVisitor& on_tile = nullptr);

// One step of a tile loop nest: the C tile at (m0, n0) gets the K slice k0..k0+tk.
struct GemmTile {
  int64_t m0, n0, k0, tm, tn, tk;
};
// The steps of `mapping`'s loop nest, in execution order.
std::vector<GemmTile> GemmTiles(const SystolicArray& array, int64_t M, int64_t N, int64_t K,
                                const GemmMapping& mapping);

// Proves that a tile loop nest computes every element of C = A*B exactly once per K slice: its
// tiles stay inside the matrices, their M and N extents cut the output into blocks that never
// overlap, and each block gets its K slices from 0 to K in order, each once (the first, at
// k0 = 0, is the one that zeroes the partial sums). That is what running the nest on data tests,
// decided for every element in time linear in the number of steps. "" when it holds, else what
// is wrong.
std::string CheckTileCoverage(int64_t M, int64_t N, int64_t K, const std::vector<GemmTile>& tiles);

}  // namespace kiln::hardware
