// Knob spaces, default configurations and launch geometry of the CUDA templates.
#include "codegen/cuda/cuda_templates.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/attention_decode_cu.h"  // generated: kKilnCudaAttentionDecodeSource
#include "codegen/cuda/gemm_cu.h"              // generated: kKilnCudaGemmSource
#include "codegen/cuda/rmsnorm_cu.h"           // generated: kKilnCudaRmsNormSource
#include "codegen/cuda/softmax_cu.h"           // generated: kKilnCudaSoftmaxSource
#include "codegen/cuda/swiglu_cu.h"            // generated: kKilnCudaSwigluSource

namespace kiln::codegen {
namespace {

int64_t At(const Config& c, const char* k) { return c.at(k); }
int64_t MaxThreads(const ChipTraits& chip) {
  return std::min<int64_t>(1024, chip.max_work_group_size);
}

const std::vector<int64_t> kTile = PowersOfTwo(16, 128);
const std::vector<int64_t> kBK = PowersOfTwo(8, 32);

KnobSpace GemmSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t M = DimOf(w, "M"), N = DimOf(w, "N"), K = DimOf(w, "K");
  const int64_t max_t = MaxThreads(chip), smem = chip.local_mem_bytes;
  KnobSpace s;
  s.AddKnob("BM", kTile, "rows of C per thread block");
  s.AddKnob("BN", kTile, "columns of C per thread block");
  s.AddKnob("BK", kBK, "depth of the shared-memory slices");
  s.AddKnob("TM", PowersOfTwo(1, 8), "rows of C per thread");
  s.AddKnob("TN", PowersOfTwo(1, 8), "columns of C per thread (strided by BN/TN)");
  s.AddKnob("VEC", {1, 2, 4}, "width of B's global loads");
  auto threads = [](const Config& c) {
    return (At(c, "BM") / At(c, "TM")) * (At(c, "BN") / At(c, "TN"));
  };
  s.AddConstraint(absl::StrCat("32 <= (BM/TM)*(BN/TN) <= ", max_t, " threads per block"),
                  [=](const Config& c) { return threads(c) >= 32 && threads(c) <= max_t; });
  s.AddConstraint(
      absl::StrCat("(BM + BN)*BK*4 <= ", smem, " bytes of shared memory"),
      [=](const Config& c) { return (At(c, "BM") + At(c, "BN")) * At(c, "BK") * 4 <= smem; });
  s.AddConstraint(absl::StrCat("N=", N, " % VEC == 0"),
                  [=](const Config& c) { return N % At(c, "VEC") == 0; });
  s.AddConstraint("TM*TN <= 64 accumulator registers per thread",
                  [](const Config& c) { return At(c, "TM") * At(c, "TN") <= 64; });
  s.AddConstraint(absl::StrCat("BM <= M=", M, ", or BM is the smallest value >= M"),
                  [=](const Config& c) { return NotOversized(kTile, At(c, "BM"), M); });
  s.AddConstraint(absl::StrCat("BN <= N=", N, ", or BN is the smallest value >= N"),
                  [=](const Config& c) { return NotOversized(kTile, At(c, "BN"), N); });
  s.AddConstraint(absl::StrCat("BK <= K=", K, ", or BK is the smallest value >= K"),
                  [=](const Config& c) { return NotOversized(kBK, At(c, "BK"), K); });
  return s;
}

// A textbook shared-memory tiled kernel: 32x32 blocks (smaller for tiny M or N), BK 8, 2x2
// outputs per thread (256 threads), scalar loads.
Config GemmDefault(const v1::Workload& w, const ChipTraits&) {
  auto tile = [&](const char* dim) { return std::clamp<int64_t>(Pow2Ceil(DimOf(w, dim)), 16, 32); };
  return {{"BM", tile("M")}, {"BN", tile("N")}, {"BK", 8}, {"TM", 2}, {"TN", 2}, {"VEC", 1}};
}

Launch GemmLaunch(const v1::Workload& w, const Config& c) {
  Launch l;
  l.local[0] = (At(c, "BM") / At(c, "TM")) * (At(c, "BN") / At(c, "TN"));
  l.global[0] = CeilDiv(DimOf(w, "N"), At(c, "BN")) * l.local[0];
  l.global[1] = CeilDiv(DimOf(w, "M"), At(c, "BM"));
  return l;
}

const std::vector<int64_t> kTpr = PowersOfTwo(32, 1024);

KnobSpace RowSpace(const v1::Workload& w, const ChipTraits& chip, const char* width_dim,
                   bool online) {
  const int64_t T = DimOf(w, "T"), width = DimOf(w, width_dim), max_t = MaxThreads(chip);
  KnobSpace s;
  s.AddKnob("TPR", kTpr, "threads per row");
  s.AddKnob("RPB", PowersOfTwo(1, 8), "rows per block");
  s.AddKnob("VEC", {1, 2, 4}, "width of loads and stores");
  if (online) s.AddKnob("ONLINE", {0, 1}, "1: one pass for max and sum; 0: two passes");
  s.AddConstraint(absl::StrCat(width_dim, "=", width, " % VEC == 0"),
                  [=](const Config& c) { return width % At(c, "VEC") == 0; });
  s.AddConstraint(absl::StrCat("TPR*RPB <= ", max_t, " threads per block"),
                  [=](const Config& c) { return At(c, "TPR") * At(c, "RPB") <= max_t; });
  s.AddConstraint(
      absl::StrCat("TPR <= ", width_dim, "/VEC, or TPR is the smallest value >= it"),
      [=](const Config& c) { return NotOversized(kTpr, At(c, "TPR"), width / At(c, "VEC")); });
  s.AddConstraint(absl::StrCat("RPB/2 < T=", T),
                  [=](const Config& c) { return At(c, "RPB") / 2 < T; });
  return s;
}

Config RowDefault(const v1::Workload& w, const char* width_dim, bool online) {
  Config c{
      {"TPR", std::clamp<int64_t>(Pow2Ceil(DimOf(w, width_dim)), 32, 256)}, {"RPB", 1}, {"VEC", 1}};
  if (online) c["ONLINE"] = 0;
  return c;
}

Launch RowLaunch(const v1::Workload& w, const Config& c) {
  Launch l;
  l.local[0] = At(c, "TPR");
  l.local[1] = l.global[1] = At(c, "RPB");
  l.global[0] = CeilDiv(DimOf(w, "T"), At(c, "RPB")) * At(c, "TPR");
  return l;
}

KnobSpace SwigluSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t F = DimOf(w, "F"), total = DimOf(w, "T") * F, max_t = MaxThreads(chip);
  KnobSpace s;
  s.AddKnob("BLOCK", PowersOfTwo(32, 1024), "threads per block");
  s.AddKnob("VEC", {1, 2, 4}, "width of loads and stores");
  s.AddKnob("EPT", PowersOfTwo(1, 8), "vectors per thread");
  s.AddKnob("FAST", {0, 1}, "1: __expf and __fdividef intrinsics");
  s.AddConstraint(absl::StrCat("F=", F, " % VEC == 0"),
                  [=](const Config& c) { return F % At(c, "VEC") == 0; });
  s.AddConstraint(absl::StrCat("BLOCK <= ", max_t),
                  [=](const Config& c) { return At(c, "BLOCK") <= max_t; });
  s.AddConstraint("BLOCK*EPT/2 < T*F/VEC, or BLOCK=32 and EPT=1 (one block is not mostly idle)",
                  [=](const Config& c) {
                    return At(c, "BLOCK") * At(c, "EPT") / 2 < total / At(c, "VEC") ||
                           (At(c, "BLOCK") == 32 && At(c, "EPT") == 1);
                  });
  return s;
}

Config SwigluDefault(const v1::Workload& w, const ChipTraits&) {
  const int64_t total = DimOf(w, "T") * DimOf(w, "F");
  return {{"BLOCK", std::clamp<int64_t>(Pow2Ceil(total) / 2, 32, 256)},
          {"VEC", 1},
          {"EPT", 1},
          {"FAST", 0}};
}

Launch SwigluLaunch(const v1::Workload& w, const Config& c) {
  const int64_t vectors = DimOf(w, "T") * DimOf(w, "F") / At(c, "VEC");
  Launch l;
  l.local[0] = At(c, "BLOCK");
  l.global[0] = CeilDiv(vectors, At(c, "BLOCK") * At(c, "EPT")) * At(c, "BLOCK");
  return l;
}

const std::vector<int64_t> kChunk = PowersOfTwo(32, 1024);

KnobSpace AttentionSpace(const v1::Workload& w, const ChipTraits& chip) {
  const int64_t D = DimOf(w, "D"), L = DimOf(w, "L"), max_t = MaxThreads(chip);
  const int64_t smem = chip.local_mem_bytes;
  KnobSpace s;
  s.AddKnob("BLOCK", PowersOfTwo(32, 512), "threads per (sequence, head)");
  s.AddKnob("CHUNK", kChunk, "context positions scored per step (in shared memory)");
  s.AddKnob("VEC", {1, 2, 4}, "width of the q.k loads");
  s.AddConstraint(absl::StrCat("D=", D, " % VEC == 0"),
                  [=](const Config& c) { return D % At(c, "VEC") == 0; });
  s.AddConstraint(absl::StrCat("BLOCK <= ", max_t),
                  [=](const Config& c) { return At(c, "BLOCK") <= max_t; });
  s.AddConstraint(
      absl::StrCat("(D + CHUNK + BLOCK/32)*4 <= ", smem, " bytes of shared memory"),
      [=](const Config& c) { return (D + At(c, "CHUNK") + At(c, "BLOCK") / 32) * 4 <= smem; });
  s.AddConstraint(absl::StrCat("CHUNK <= L=", L, ", or CHUNK is the smallest value >= L"),
                  [=](const Config& c) { return NotOversized(kChunk, At(c, "CHUNK"), L); });
  s.AddConstraint("ceil(D/BLOCK) <= 32 outputs per thread",
                  [=](const Config& c) { return CeilDiv(D, At(c, "BLOCK")) <= 32; });
  return s;
}

Config AttentionDefault(const v1::Workload& w, const ChipTraits&) {
  int64_t chunk = 32;
  while (chunk < 256 && chunk < DimOf(w, "L")) chunk *= 2;
  return {{"BLOCK", 128}, {"CHUNK", chunk}, {"VEC", 1}};
}

Launch AttentionLaunch(const v1::Workload& w, const Config& c) {
  Launch l;
  l.local[0] = At(c, "BLOCK");
  l.global[0] = DimOf(w, "B") * DimOf(w, "H") * At(c, "BLOCK");
  return l;
}

std::unique_ptr<KernelTemplate> Make(DeviceTemplateSpec spec) {
  return std::make_unique<DeviceTemplate>(std::move(spec));
}

}  // namespace

std::vector<std::unique_ptr<KernelTemplate>> NewCudaTemplates() {
  std::vector<std::unique_ptr<KernelTemplate>> all;
  all.push_back(
      Make({"cuda-gemm", "cuda", "kiln_gemm", kKilnCudaGemmSource, v1::GEMM, GemmSpace, GemmDefault,
            GemmLaunch, [](const v1::Workload&, const Config& c, Defines* d) {
              d->emplace_back("THREADS", (At(c, "BM") / At(c, "TM")) * (At(c, "BN") / At(c, "TN")));
            }}));
  all.push_back(
      Make({"cuda-rmsnorm", "cuda", "kiln_rmsnorm", kKilnCudaRmsNormSource, v1::RMSNORM,
            [](const v1::Workload& w, const ChipTraits& t) { return RowSpace(w, t, "D", false); },
            [](const v1::Workload& w, const ChipTraits&) { return RowDefault(w, "D", false); },
            RowLaunch, nullptr}));
  all.push_back(
      Make({"cuda-softmax", "cuda", "kiln_softmax", kKilnCudaSoftmaxSource, v1::SOFTMAX,
            [](const v1::Workload& w, const ChipTraits& t) { return RowSpace(w, t, "N", true); },
            [](const v1::Workload& w, const ChipTraits&) { return RowDefault(w, "N", true); },
            RowLaunch, nullptr}));
  all.push_back(Make({"cuda-swiglu", "cuda", "kiln_swiglu", kKilnCudaSwigluSource, v1::SWIGLU,
                      SwigluSpace, SwigluDefault, SwigluLaunch, nullptr}));
  all.push_back(
      Make({"cuda-attention-decode", "cuda", "kiln_attention_decode",
            kKilnCudaAttentionDecodeSource, v1::ATTENTION_DECODE, AttentionSpace, AttentionDefault,
            AttentionLaunch, [](const v1::Workload& w, const Config& c, Defines* d) {
              d->emplace_back("DPT", CeilDiv(DimOf(w, "D"), At(c, "BLOCK")));
            }}));
  return all;
}

}  // namespace kiln::codegen
