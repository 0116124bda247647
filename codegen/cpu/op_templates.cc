#include "codegen/cpu/op_templates.h"

#include <algorithm>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/gen/op_sources.h"  // generated: kKilnCpu*Source
#include "codegen/workload.h"

namespace kiln::codegen {
namespace {

int64_t Dim(const v1::Workload& w, const char* name) {
  auto it = w.dims().find(name);
  return it == w.dims().end() ? 1 : std::max<int64_t>(1, it->second);
}

// Thread counts 1, 2, 4, ..., cores. `all_first`: the safe default (first value) is every core,
// for operators that stream enough memory to need them; otherwise one thread, for the small
// element-wise operators of a decode step, where waking a team costs more than it saves.
// (Every template hands out work items dynamically, so a thread that a co-tenant process
// preempts does not hold the others up.)
std::vector<int64_t> Threads(const ChipTraits& chip, bool all_first = true) {
  std::vector<int64_t> t;
  for (int64_t n = 1; n < chip.cores; n *= 2) t.push_back(n);
  t.push_back(std::max(1, chip.cores));
  if (all_first) std::reverse(t.begin(), t.end());
  return t;
}

// The smallest value of `domain` >= extent (or the largest), so block knobs never oversize.
bool NotOversized(const std::vector<int64_t>& domain, int64_t v, int64_t extent) {
  if (v <= extent) return true;
  const int64_t largest = *std::max_element(domain.begin(), domain.end());
  int64_t smallest = largest;  // of the values >= extent (the largest when none is)
  for (int64_t d : domain)
    if (d >= extent) smallest = std::min(smallest, d);
  return v == smallest;
}

bool IsFp32(const v1::Workload& w) { return w.dtype() == v1::FP32 || w.dtype() == 0; }

struct OpDef {
  std::string name;
  v1::OpKind op;
  const char* source;
  std::function<bool(const v1::Workload&)> supports;  // beyond op, dtype and validation
  std::function<void(const v1::Workload&, const ChipTraits&, KnobSpace&)> knobs;
  // Compile-time constants that follow from the workload, not knobs.
  std::function<std::vector<std::pair<std::string, int64_t>>(const v1::Workload&)> fixed;
  // KernelTemplate::StartingConfigs (none when unset).
  std::function<std::vector<Config>(const v1::Workload&, const ChipTraits&)> starts = nullptr;
};

void StreamingGemmKnobs(int64_t rows, int64_t n, const ChipTraits& chip, KnobSpace& s) {
  const std::vector<int64_t> mr = {1, 2, 4, 8}, nb = {256, 512, 1024, 128, 64};
  s.AddKnob("NT", Threads(chip), "threads over column blocks");
  s.AddKnob("NB", nb, "columns per block (one thread's unit of work, accumulated in L1)");
  s.AddKnob("KU", {4, 2, 8, 1}, "rows of weights streamed per pass");
  s.AddKnob("MR", mr, "rows of activations per pass over the weights");
  s.AddConstraint(absl::StrCat("MR <= rows=", rows, " or the smallest MR >= rows"),
                  [=](const Config& c) { return NotOversized(mr, c.at("MR"), rows); });
  s.AddConstraint(absl::StrCat("NB <= N=", n, " or the smallest NB >= N"),
                  [=](const Config& c) { return NotOversized(nb, c.at("NB"), n); });
}

// The quantized GEMM kernel's knobs (codegen/cpu/templates/gemm_quant.cc); `rows`: the most rows
// one pass over the weights can take (M, or every (token, slot) row of a grouped GEMM).
void QuantGemmKnobs(int64_t rows, int64_t n, const ChipTraits& chip, KnobSpace& s) {
  const std::vector<int64_t> mr = {1, 2, 4}, nb = {64, 32, 128, 256, 16};
  s.AddKnob("NT", Threads(chip), "threads over column blocks");
  s.AddKnob("NB", nb, "columns per block (16-column strips, one thread's unit)");
  s.AddKnob("MR", mr, "rows of activations per pass over a strip");
  s.AddKnob("AQ", {1, 0},
            "1: activations quantized to int8 per group, integer dot products (VNNI, or AVX2 "
            "vpmaddubsw); 0: weights widened to fp32, FMAs on fp32 activations");
  s.AddKnob("PF", {0, 512, 1024, 2048}, "bytes ahead the weights are prefetched");
  s.AddConstraint(absl::StrCat("MR <= rows=", rows, " or the smallest MR >= rows"),
                  [=](const Config& c) { return NotOversized(mr, c.at("MR"), rows); });
  s.AddConstraint(absl::StrCat("NB <= N=", n, " or the smallest NB >= N"),
                  [=](const Config& c) { return NotOversized(nb, c.at("NB"), n); });
}

int64_t QBits(const v1::Workload& w) { return w.dtype() == v1::INT4 ? 4 : 8; }

std::vector<OpDef> Defs() {
  auto none = [](const v1::Workload&) { return std::vector<std::pair<std::string, int64_t>>{}; };
  auto plain = [](const v1::Workload& w) { return IsFp32(w) && w.epilogue().empty(); };
  std::vector<OpDef> d;
  // Prefill-sized bf16 GEMMs (M >= 64) get the register-blocked dot-product kernel; smaller ones
  // the streaming kernel below, which reads the weights once.
  d.push_back(
      {"cpu-gemm-bf16", v1::GEMM, kKilnCpuGemmBf16Source,
       [](const v1::Workload& w) {
         return EpilogueCode(w.epilogue()) >= 0 && w.dtype() == v1::BF16 && Dim(w, "M") >= 64;
       },
       [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
         const std::vector<int64_t> nc = {256, 128, 512, 1024};
         const int64_t n = Dim(w, "N");
         s.AddKnob("NT", Threads(c), "threads over (row block, column block) items");
         if (c.vector_registers >= 32) {
           s.AddKnob("MR", {8, 6, 4, 12, 14}, "rows of the register tile");
           s.AddKnob("NR", {32, 16}, "columns of the register tile (16-lane vectors)");
         } else {  // 16 registers (AVX2): MR x 2 accumulators, 4 of weights, 2 broadcasts;
           // MR=5 fills them, and measured faster than MR=4 at prefill sizes (benchmarks.md)
           s.AddKnob("MR", {5, 4, 3, 6, 2}, "rows of the register tile");
           s.AddKnob("NR", {16}, "columns of the register tile (two 8-lane vectors)");
         }
         // Deep slices first: each slice ends with the tile's partial sums stored and reloaded.
         s.AddKnob("KC", {1024, 512, 256, 128}, "depth of a K slice");
         s.AddKnob("NC", nc, "columns per work item");
         s.AddKnob("MT", {8, 4, 16, 32}, "register tiles of rows per work item");
         s.AddConstraint("MR*NR/16 <= 28 (accumulators fit in 32 vector registers)",
                         [](const Config& c) { return c.at("MR") * c.at("NR") <= 28 * 16; });
         s.AddConstraint(absl::StrCat("NC <= N=", n, " or the smallest NC >= N"),
                         [=](const Config& c) { return NotOversized(nc, c.at("NC"), n); });
       },
       [](const v1::Workload& w) {
         return std::vector<std::pair<std::string, int64_t>>{{"EPI", EpilogueCode(w.epilogue())}};
       }});
  d.push_back({"cpu-gemm-epilogue", v1::GEMM, kKilnCpuGemmEpilogueSource,
               [](const v1::Workload& w) {
                 return EpilogueCode(w.epilogue()) >= 0 && (w.dtype() == v1::BF16 || IsFp32(w));
               },
               [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
                 StreamingGemmKnobs(Dim(w, "M"), Dim(w, "N"), c, s);
                 s.AddKnob("PREPACK", {1, 0},
                           "1: weights packed ahead of time into contiguous NB-column blocks");
                 if (w.dtype() == v1::BF16)
                   s.AddKnob(
                       "DOT", {0, 1},
                       "1: AVX512-BF16 dot products (activations rounded to bf16) where the chip "
                       "has them; 0: widen bf16 weights to fp32 and FMA");
               },
               [](const v1::Workload& w) {
                 return std::vector<std::pair<std::string, int64_t>>{
                     {"EPI", EpilogueCode(w.epilogue())}, {"WBF16", w.dtype() == v1::BF16 ? 1 : 0}};
               }});
  d.push_back({"cpu-gemm-quant", v1::GEMM, kKilnCpuGemmQuantSource,
               [](const v1::Workload& w) {
                 return EpilogueCode(w.epilogue()) >= 0 && IsQuantized(w.dtype());
               },
               [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
                 QuantGemmKnobs(Dim(w, "M"), Dim(w, "N"), c, s);
               },
               [](const v1::Workload& w) {
                 return std::vector<std::pair<std::string, int64_t>>{
                     {"EPI", EpilogueCode(w.epilogue())}, {"QBITS", QBits(w)}};
               }});
  d.push_back({"cpu-rmsnorm", v1::RMSNORM, kKilnCpuRmsnormSource,
               [](const v1::Workload& w) {
                 return IsFp32(w) && (w.epilogue().empty() || w.epilogue() == "residual");
               },
               [](const v1::Workload&, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over rows");
                 s.AddKnob("VU", {2, 1, 4}, "partial sums of squares");
               },
               [](const v1::Workload& w) {
                 return std::vector<std::pair<std::string, int64_t>>{
                     {"RESIDUAL", w.epilogue() == "residual" ? 1 : 0}};
               }});
  d.push_back({"cpu-rope", v1::ROPE, kKilnCpuRopeSource,
               [plain](const v1::Workload& w) { return plain(w) && Dim(w, "D") <= 1024; },
               [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over (token, head block)");
                 s.AddKnob("HB", {4, 1, 2, 8, 16}, "heads sharing one cos/sin row");
               },
               none});
  d.push_back(
      {"cpu-attention-decode", v1::ATTENTION_DECODE, kKilnCpuAttentionDecodeSource, plain,
       [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
         s.AddKnob("NT", Threads(c), "threads over (sequence, kv head, split)");
         s.AddKnob("SPLIT", {4, 1, 2, 8, 16, 32}, "context chunks per kv head");
         s.AddKnob("TAIL", {1, 2, 4},
                   "each thread's last kv head in SPLIT*TAIL chunks (pieces the first thread "
                   "to finish takes over)",
                   /*absent_means=*/1);
         s.AddConstraint("TAIL == 1 when NT == 1 (one thread: nothing to take over)",
                         [](const Config& c) { return c.at("NT") > 1 || c.at("TAIL") == 1; });
         s.AddKnob("PF", {1, 2, 0}, "prefetch distance in blocks of cached positions (0: none)");
         s.AddKnob("PFL", {2, 1}, "cache level prefetched into (2: L2, T1 hint; 1: L1, T0)",
                   /*absent_means=*/2);
         s.AddConstraint("PFL == 2 when PF == 0 (no prefetch: its level is moot)",
                         [](const Config& c) { return c.at("PF") > 0 || c.at("PFL") == 2; });
         if (c.vector_floats == 16)  // AVX-512: its 16-lane vectors, or 8-lane ones
           s.AddKnob("VEC", {16, 8},
                     "vector width in floats (8: AVX2-width vectors with AVX-512's 32 registers)");
       },
       [](const v1::Workload& w) {  // the head size, for the vector path's registers
         return std::vector<std::pair<std::string, int64_t>>{{"HD", Dim(w, "D")}};
       }});
  // Decode reads the KV cache once: all cores, the fewest context chunks that still give every
  // thread two items (one chunk per kv head when there are enough heads: on a Zen 5 VM SPLIT=1
  // ran context 512 in 100-118 us where budget-16 searches that never measured it settled on
  // SPLIT=2-4 at 127-156 us), each thread's last kv head in two chunks when there are two
  // threads or more (TAIL=2: 0-4% faster cold at context 512 there, the thread that finishes
  // first waiting 7-8 instead of 16-20 us), the next block prefetched into L1 (faster than L2 in
  // five of six alternated pairs there), full-width vectors.
  d.back().starts = [](const v1::Workload& w, const ChipTraits& c) {
    const int64_t cores = std::max(1, c.cores), items = Dim(w, "B") * Dim(w, "KVH");
    int64_t split = 1;
    while (split < 32 && items * split < 2 * cores) split *= 2;
    Config start = {
        {"NT", cores}, {"SPLIT", split}, {"TAIL", cores > 1 ? 2 : 1}, {"PF", 1}, {"PFL", 1}};
    if (c.vector_floats == 16) start["VEC"] = 16;
    return std::vector<Config>{start};
  };
  d.push_back({"cpu-attention-prefill", v1::ATTENTION_PREFILL, kKilnCpuAttentionPrefillSource,
               plain,
               [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c), "threads over (sequence, head, query tile)");
                 s.AddKnob("BQ", {8, 1, 4, 16, 32}, "queries per tile");
                 s.AddKnob("BK", {64, 16, 32, 128}, "keys per tile");
               },
               none});
  d.push_back({"cpu-softmax", v1::SOFTMAX, kKilnCpuSoftmaxSource, plain,
               [](const v1::Workload&, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over rows");
                 s.AddKnob("ONLINE", {0, 1}, "1: online max+sum pass; 0: three passes");
               },
               none});
  d.push_back({"cpu-swiglu", v1::SWIGLU, kKilnCpuSwigluSource, plain,
               [](const v1::Workload&, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over chunks");
                 s.AddKnob("CH", {4096, 1024, 16384}, "elements per chunk");
               },
               none});
  d.push_back({"cpu-moe-router", v1::MOE_ROUTER, kKilnCpuMoeRouterSource,
               [plain](const v1::Workload& w) { return plain(w) && Dim(w, "E") <= 1024; },
               [](const v1::Workload&, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over tokens");
                 s.AddKnob("EB", {8, 4, 16}, "experts accumulated per pass over a row");
               },
               none});
  d.push_back(
      {"cpu-moe-gemm", v1::MOE_GEMM, kKilnCpuMoeGemmSource,
       [](const v1::Workload& w) { return w.epilogue().empty() && !IsQuantized(w.dtype()); },
       [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
         StreamingGemmKnobs(Dim(w, "T") * Dim(w, "TOPK"), Dim(w, "N"), c, s);
       },
       [](const v1::Workload& w) {
         return std::vector<std::pair<std::string, int64_t>>{
             {"WBF16", w.dtype() == v1::BF16 ? 1 : 0}};
       }});
  // The quantized grouped GEMM is the quantized GEMM's kernel run over each selected expert.
  d.push_back(
      {"cpu-moe-gemm-quant", v1::MOE_GEMM, kKilnCpuGemmQuantSource,
       [](const v1::Workload& w) { return w.epilogue().empty() && IsQuantized(w.dtype()); },
       [](const v1::Workload& w, const ChipTraits& c, KnobSpace& s) {
         QuantGemmKnobs(Dim(w, "T") * Dim(w, "TOPK"), Dim(w, "N"), c, s);
       },
       [](const v1::Workload& w) {
         return std::vector<std::pair<std::string, int64_t>>{{"MOE", 1}, {"QBITS", QBits(w)}};
       }});
  d.push_back({"cpu-ssm-scan", v1::SSM_SCAN, kKilnCpuSsmScanSource, plain,
               [](const v1::Workload&, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over (sequence, channel block)");
                 s.AddKnob("DB", {64, 16, 256}, "channels per block");
               },
               none});
  d.push_back({"cpu-conv1d", v1::CONV1D, kKilnCpuConv1dSource, plain,
               [](const v1::Workload&, const ChipTraits& c, KnobSpace& s) {
                 s.AddKnob("NT", Threads(c, false), "threads over (sequence, channel block)");
                 s.AddKnob("DB", {256, 64, 1024}, "channels per block");
               },
               none});
  return d;
}

class CpuOpTemplate final : public KernelTemplate {
 public:
  explicit CpuOpTemplate(OpDef def) : def_(std::move(def)) {}
  std::string name() const override { return def_.name; }

  bool Supports(const v1::Workload& w) const override {
    return w.op() == def_.op && ValidateWorkload(w).ok() && def_.supports(w);
  }

  KnobSpace Space(const v1::Workload& w, const ChipTraits& chip) const override {
    KnobSpace s;
    def_.knobs(w, chip, s);
    return s;
  }

  std::vector<Config> StartingConfigs(const v1::Workload& w,
                                      const ChipTraits& chip) const override {
    if (!def_.starts || !Supports(w)) return {};
    const KnobSpace space = Space(w, chip);
    std::vector<Config> out;
    for (Config& c : def_.starts(w, chip))
      if (space.IsValid(c)) out.push_back(std::move(c));
    return out;
  }

  absl::StatusOr<Kernel> Render(const v1::Workload& w, const Config& config,
                                const ChipTraits& chip) const override {
    if (!Supports(w))
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": workload ", WorkloadKey(w), " is not supported"));
    KnobSpace space = Space(w, chip);
    absl::Status ok = space.Check(config);
    if (!ok.ok()) return absl::InvalidArgumentError(absl::StrCat(name(), ": ", ok.message()));
    Kernel k;
    k.dialect = "cpp";
    k.entry = kCpuOpEntry;
    k.source = WithCpuRuntime(absl::StrCat(name(), ".cc"), def_.source);
    for (const auto& knob : space.knobs()) k.defines.emplace_back(knob.name, config.at(knob.name));
    for (const auto& kv : def_.fixed(w)) k.defines.push_back(kv);
    k.defines.emplace_back("VW", chip.vector_floats);
    return k;
  }

 private:
  OpDef def_;
};

}  // namespace

int64_t EpilogueCode(const std::string& e) {
  if (e.empty()) return 0;
  if (e == "bias") return 1;
  if (e == "silu") return 2;
  if (e == "gelu") return 3;
  if (e == "residual") return 4;
  return -1;
}

std::vector<std::unique_ptr<KernelTemplate>> NewCpuOpTemplates() {
  std::vector<std::unique_ptr<KernelTemplate>> out;
  for (auto& def : Defs()) out.push_back(std::make_unique<CpuOpTemplate>(std::move(def)));
  return out;
}

std::string WithCpuRuntime(std::string_view file, std::string_view source) {
  std::string out(kKilnCpuParallelSource);
  out.append("\n#line 1 \"").append(file).append("\"\n").append(source);
  return out;
}

}  // namespace kiln::codegen
