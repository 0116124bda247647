#include "codegen/cpu/gemm_template.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "codegen/cpu/gemm_source.h"  // generated: kKilnCpuGemmSource
#include "codegen/cpu/op_templates.h"
#include "codegen/workload.h"

namespace kiln::codegen {
namespace {

// Domains. NC includes multiples of 48 (3 AVX-512 vectors) next to the powers of two.
const std::vector<int64_t> kMR = {1, 2, 3, 4, 5, 6, 8, 12, 14};
const std::vector<int64_t> kNR = {8, 16, 32, 48, 64};
const std::vector<int64_t> kMC = {16, 32, 64, 128, 256, 512};
const std::vector<int64_t> kKC = {64, 128, 256, 512, 1024};
const std::vector<int64_t> kNC = {64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};

// True when v <= extent, or v is the smallest domain value >= extent: a block (or register
// tile) larger than that only adds padding, so it would duplicate a smaller configuration.
bool NotOversized(const std::vector<int64_t>& domain, int64_t v, int64_t extent) {
  if (v <= extent) return true;
  for (int64_t d : domain)
    if (d >= extent) return v == d;
  return false;
}

int64_t Dim(const v1::Workload& w, const char* name) {
  auto it = w.dims().find(name);
  return it == w.dims().end() ? 1 : std::max<int64_t>(1, it->second);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest NR of the domain, at most `cap`, that is whole vectors and leaves MR x NR
// accumulators room in the registers (0 when none does).
int64_t WidestNR(int64_t mr, int64_t cap, const ChipTraits& chip) {
  int64_t best = 0;
  for (int64_t nr : kNR)
    if (nr <= cap && nr % chip.vector_floats == 0 &&
        mr * nr / chip.vector_floats <= chip.vector_registers - 4)
      best = nr;
  return best;
}

// The share of the threads' time spent working when they claim M x N's tiles one at a time: the
// work in whole-tile units (a ragged tile counted by its size) over what the busiest thread is
// handed, ceil(tiles / nt) tiles. 1 for an even split.
double TileBalance(int64_t M, int64_t N, int64_t mc, int64_t nc, int64_t nt) {
  const int64_t tiles = CeilDiv(M, mc) * CeilDiv(N, nc);
  const double work = static_cast<double>(M) / std::min(mc, M) * N / std::min(nc, N);
  return work / static_cast<double>(nt * CeilDiv(tiles, nt));
}

// `wish` made valid by shrinking its blocks and, if need be, its threads: the point with the most
// busy threads (threads x TileBalance, a balance of 95% or more counting as even), and among
// those the most threads, then the largest MC, KC and NC (each at most the wished value). N=14336
// in 2048-column blocks is 7 tiles (4 for one thread, 3 for the other: 0.875), in 1536-column ones
// 10 with a third of one (0.93), in 1024 14 (1.0): at M=16 on a Zen 5 VM 7.3-7.6 ms against
// 7.9-8.1 ms for 1536. Empty when no point is valid.
Config FitBlocks(const KnobSpace& space, Config wish, int64_t M, int64_t N) {
  constexpr double kEven = 0.95;
  Config best;
  double best_busy = 0;
  auto down_from = [&](const char* knob) {
    std::vector<int64_t> out;
    const std::vector<int64_t>& domain = space.FindKnob(knob)->values;
    for (auto it = domain.rbegin(); it != domain.rend(); ++it)
      if (*it <= wish[knob]) out.push_back(*it);
    return out;
  };
  const std::vector<int64_t> threads = down_from("NT");
  for (int64_t nt : threads)
    for (int64_t mc : down_from("MC"))
      for (int64_t kc : down_from("KC"))
        for (int64_t nc : down_from("NC")) {
          Config c = wish;
          c["NT"] = nt, c["MC"] = mc, c["KC"] = kc, c["NC"] = nc;
          if (!space.IsValid(c)) continue;
          const double balance = TileBalance(M, N, mc, nc, nt);
          const double busy = nt * (balance >= kEven ? 1.0 : balance);
          if (busy >= threads.front()) return c;  // every thread busy: none comes out ahead
          if (busy > best_busy) best = c, best_busy = busy;
        }
  return best;
}

class CpuGemmTemplate final : public KernelTemplate {
 public:
  std::string name() const override { return "cpu-gemm"; }

  // Plain fp32 GEMMs at any M; with an epilogue from 64 rows on (prefill's o_proj and down_proj
  // with their residual, a bias), where the register tiles' compute wins. Fewer rows with an
  // epilogue go to the streaming kernel (cpu-gemm-epilogue), which reads the weights once.
  bool Supports(const v1::Workload& w) const override {
    return w.op() == v1::GEMM && (w.dtype() == v1::FP32 || w.dtype() == v1::DTYPE_UNSPECIFIED) &&
           (w.epilogue().empty() || (EpilogueCode(w.epilogue()) > 0 && Dim(w, "M") >= 64)) &&
           ValidateWorkload(w).ok();
  }

  KnobSpace Space(const v1::Workload& w, const ChipTraits& chip) const override {
    const int64_t M = Dim(w, "M"), N = Dim(w, "N"), K = Dim(w, "K");
    const int64_t vw = chip.vector_floats, regs = chip.vector_registers;
    const int64_t cores = std::max(1, chip.cores);
    const int64_t l2 = chip.l2_bytes, l3 = chip.l3_bytes;
    std::vector<int64_t> threads;
    for (int64_t t = 1; t < cores; t *= 2) threads.push_back(t);
    threads.push_back(cores);

    KnobSpace s;
    s.AddKnob("MR", kMR, "register-tile rows of C");
    s.AddKnob("NR", kNR, "register-tile columns of C (whole SIMD vectors)");
    s.AddKnob("MC", kMC, "rows of C per cache block (A block kept in L2)");
    s.AddKnob("KC", kKC, "depth of each K slice");
    s.AddKnob("NC", kNC, "columns of C per cache block (B panel kept in L3)");
    s.AddKnob("PACK", {0, 1}, "1: pack A/B into contiguous micro-panels; 0: strided access");
    s.AddKnob("UNROLL", {1, 2, 4, 8}, "unroll factor of the micro-kernel's k loop");
    s.AddKnob("LOOP_ORDER", {0, 1},
              "0: N blocks / column panels outer; 1: M blocks / row panels outer");
    s.AddKnob("NT", threads, "OpenMP threads sharing the MC x NC tiles of C");
    s.AddKnob("PREPACK", {0, 1}, "1: weights B packed once ahead of time into NR-column panels");
    // Configurations recorded before PF existed ran without a prefetch.
    s.AddKnob("PF", {0, 1024, 2048, 4096, 8192},
              "bytes ahead the packed weights are prefetched (PREPACK=1)", /*absent_means=*/0);
    s.AddKnob("PFN", {0, 1, 2},
              "micro-panels ahead the packed weights are prefetched into L2, shared among the row "
              "panels' passes (PREPACK=1, LOOP_ORDER=0; in place of PF)",
              /*absent_means=*/0);

    auto at = [](const Config& c, const char* k) { return c.at(k); };
    s.AddConstraint(absl::StrCat("NR % ", vw, " == 0 (NR is whole ", vw, "-lane SIMD vectors)"),
                    [=](const Config& c) { return at(c, "NR") % vw == 0; });
    s.AddConstraint(absl::StrCat("MR*NR/", vw, " <= ", regs - 4, " (accumulators fit in ", regs,
                                 " vector registers, 4 left for B vectors and A broadcasts)"),
                    [=](const Config& c) { return at(c, "MR") * at(c, "NR") / vw <= regs - 4; });
    s.AddConstraint(absl::StrCat("MR <= M=", M, ", or MR is the smallest MR value >= M"),
                    [=](const Config& c) { return NotOversized(kMR, at(c, "MR"), M); });
    s.AddConstraint("MC >= MR", [](const Config& c) { return c.at("MC") >= c.at("MR"); });
    s.AddConstraint(absl::StrCat("MC <= M=", M, ", or MC is the smallest MC value >= M"),
                    [=](const Config& c) { return NotOversized(kMC, at(c, "MC"), M); });
    s.AddConstraint("NC % NR == 0 (N blocks hold whole register tiles)",
                    [](const Config& c) { return c.at("NC") % c.at("NR") == 0; });
    s.AddConstraint(absl::StrCat("NC <= N=", N, ", or NC is the smallest NC value >= N"),
                    [=](const Config& c) { return NotOversized(kNC, at(c, "NC"), N); });
    s.AddConstraint(absl::StrCat("KC <= K=", K, ", or KC is the smallest KC value >= K"),
                    [=](const Config& c) { return NotOversized(kKC, at(c, "KC"), K); });
    s.AddConstraint(
        absl::StrCat("(MR+NR)*KC*4 <= L2/2 = ", l2 / 2,
                     " (a micro-kernel's A and B micro-panels stay in L2)"),
        [=](const Config& c) { return (at(c, "MR") + at(c, "NR")) * at(c, "KC") * 4 <= l2 / 2; });
    s.AddConstraint(absl::StrCat("MC*KC*4 <= L2 = ", l2, " (an A block stays in L2)"),
                    [=](const Config& c) { return at(c, "MC") * at(c, "KC") * 4 <= l2; });
    s.AddConstraint(absl::StrCat("KC*NC*4 <= L3 = ", l3, " (a B panel stays in the LLC)"),
                    [=](const Config& c) { return at(c, "KC") * at(c, "NC") * 4 <= l3; });
    s.AddConstraint("PF == 0 unless PREPACK == 1 (only the packed stream is prefetched)",
                    [](const Config& c) { return c.at("PF") == 0 || c.at("PREPACK") == 1; });
    s.AddConstraint(
        "PFN == 0 unless PREPACK == 1 and LOOP_ORDER == 0 (the packed stream, in the "
        "tile's N-major order)",
        [](const Config& c) {
          return c.at("PFN") == 0 || (c.at("PREPACK") == 1 && c.at("LOOP_ORDER") == 0);
        });
    s.AddConstraint("PF == 0 when PFN > 0 (one prefetch scheme at a time)",
                    [](const Config& c) { return c.at("PFN") == 0 || c.at("PF") == 0; });
    s.AddConstraint(absl::StrCat("NT <= cores = ", cores),
                    [=](const Config& c) { return at(c, "NT") <= cores; });
    s.AddConstraint(absl::StrCat("NT <= tiles = ceil(M/MC)*ceil(N/NC) (every thread gets a tile)"),
                    [=](const Config& c) {
                      return at(c, "NT") <= CeilDiv(M, at(c, "MC")) * CeilDiv(N, at(c, "NC"));
                    });
    return s;
  }

  // BLIS-style guesses. Few rows (decode): the weights stream once, so a register tile as tall as
  // M (at most 8) and two vectors wide, deep K slices, weights packed ahead of time, and the
  // next packed micro-panel prefetched into L2 from 2 rows on (PFN=1; at M=1 prefetches only
  // cost issue slots in a kernel that already streams; at M=4-32 it beat 4 KiB ahead within the
  // panel by 8-23% on an Emerald Rapids VM, since the weight stream keeps flowing while later
  // row panels reread the current micro-panel, docs/benchmarks.md), and the same tile up to four
  // vectors wide with 4 KiB prefetched ahead within the panel (PF=4096; on a Zen 5 VM 1.3-1.5x
  // faster than PFN=1 at M=2-4, while PFN still won at M=16). Many rows (prefill, batches):
  // compute-bound, so a 6-row tile as wide as the registers allow (with 16 registers, AVX2, 5
  // rows first: GCC spills the 6 x 16 tile's registers in the unrolled k loop and not the 5 x 16
  // one's, docs/benchmarks.md), A blocks of 128 rows in L2, K
  // slices of 512 (or 256 with 1024-column panels), the next weight micro-panel prefetched into
  // L2 over the passes of the current one (PFN=1: on a Zen 5 VM 3-9% faster than 1 KiB ahead
  // within the panel at M=128-512, since a micro-panel's first pass otherwise waits on memory).
  // Blocks shrink until the space's rules hold
  // (MC <= M, every thread a tile, the cache limits); all cores.
  std::vector<Config> StartingConfigs(const v1::Workload& w,
                                      const ChipTraits& chip) const override {
    if (!Supports(w)) return {};
    const int64_t M = Dim(w, "M");
    const KnobSpace space = Space(w, chip);
    const int64_t vw = chip.vector_floats, cores = std::max(1, chip.cores);
    std::vector<Config> wishes;
    if (M < 64) {
      int64_t mr = 1;  // the tallest tile up to min(M, 8) that leaves room for a 2-vector row
      for (int64_t v : kMR)
        if (v <= std::min<int64_t>(M, 8) && WidestNR(v, 2 * vw, chip) > 0) mr = v;
      wishes.push_back({{"MR", mr},
                        {"NR", WidestNR(mr, 2 * vw, chip)},
                        {"MC", 512},
                        {"KC", 1024},
                        {"NC", 2048},
                        {"PACK", 0},
                        {"UNROLL", 4},
                        {"LOOP_ORDER", 0},
                        {"NT", cores},
                        {"PREPACK", 1},
                        {"PF", 0},
                        {"PFN", M >= 2 ? 1 : 0}});
      // The other prefetch scheme, as wide a tile as the registers allow: which one wins depends
      // on the chip, so a task measures both first.
      wishes.push_back(wishes.back());
      wishes.back()["NR"] = WidestNR(mr, 4 * vw, chip);
      wishes.back()["PF"] = 4096;
      wishes.back()["PFN"] = 0;
    }
    if (M >= 16) {
      const int64_t first_mr = chip.vector_registers <= 16 ? 5 : 6;
      for (auto [mr, kc, nc] :
           {std::tuple<int64_t, int64_t, int64_t>{first_mr, 512, 2048}, {6, 256, 1024}})
        wishes.push_back({{"MR", mr},
                          {"NR", WidestNR(mr, 4 * vw, chip)},
                          {"MC", 128},
                          {"KC", kc},
                          {"NC", nc},
                          {"PACK", 1},
                          {"UNROLL", 4},
                          {"LOOP_ORDER", 0},
                          {"NT", cores},
                          {"PREPACK", 1},
                          {"PF", 0},
                          {"PFN", 1}});
    }
    std::vector<Config> out;
    for (const Config& wish : wishes) {
      Config c = FitBlocks(space, wish, M, Dim(w, "N"));
      if (!c.empty()) out.push_back(c);
    }
    return out;
  }

  absl::StatusOr<Kernel> Render(const v1::Workload& w, const Config& config,
                                const ChipTraits& chip) const override {
    if (!Supports(w))
      return absl::InvalidArgumentError(absl::StrCat(name(), ": workload ", WorkloadKey(w),
                                                     " is not supported (fp32 gemm; with an "
                                                     "epilogue, M >= 64)"));
    KnobSpace space = Space(w, chip);
    const Config with_defaults = space.WithAbsentKnobs(config);
    absl::Status ok = space.Check(with_defaults);
    if (!ok.ok()) return absl::InvalidArgumentError(absl::StrCat(name(), ": ", ok.message()));
    Kernel k;
    k.dialect = "cpp";
    // With an epilogue the kernel takes the operators' ABI (bias and residual arguments).
    const bool epilogue = !w.epilogue().empty();
    k.entry = epilogue ? kCpuOpEntry : kCpuGemmEntry;
    k.source = WithCpuRuntime("gemm.cc", CpuGemmSource());
    for (const auto& knob : space.knobs())
      k.defines.emplace_back(knob.name, with_defaults.at(knob.name));
    k.defines.emplace_back("VW", chip.vector_floats);
    if (epilogue) k.defines.emplace_back("EPI", EpilogueCode(w.epilogue()));
    return k;
  }
};

}  // namespace

std::string_view CpuGemmSource() { return kKilnCpuGemmSource; }

std::unique_ptr<KernelTemplate> NewCpuGemmTemplate() { return std::make_unique<CpuGemmTemplate>(); }

}  // namespace kiln::codegen
