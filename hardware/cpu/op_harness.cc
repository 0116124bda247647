#include "hardware/cpu/op_harness.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "hardware/buffers.h"
#include "hardware/op_cases.h"
#include "hardware/cpu/read_sweep.h"
#include "hardware/measure.h"

namespace kiln::hardware {
namespace {

size_t Floats(size_t bytes) { return (bytes + 63) / 64 * 16; }  // 64-byte multiples

// An argument's 4-byte words (its slot is padded to 64 bytes, so rounding up stays inside it).
size_t Words(const ArgSpec& a) { return (a.Bytes() + 3) / 4; }

// What FillArg poisons an output with, as a 4-byte word: a quiet NaN, -1 (indices) or two bf16
// NaNs.
uint32_t PoisonWord(Elem e) {
  return e == Elem::kI32 ? 0xffffffffu : e == Elem::kBF16 ? 0xffc0ffc0u : 0x7fc00000u;
}

// One arena holding every argument of a case, each 64-byte aligned.
struct ArgSet {
  std::vector<size_t> offsets;  // in floats
  size_t floats = 0;
  explicit ArgSet(const OpCase& c) {
    for (const auto& a : c.args) {
      offsets.push_back(floats);
      floats += Floats(a.Bytes());
    }
  }
  std::vector<void*> Pointers(float* base) const {
    std::vector<void*> p;
    for (size_t o : offsets) p.push_back(base + o);
    return p;
  }
};

void FillSet(const OpCase& c, const ArgSet& set, float* base, uint64_t seed) {
  auto ptrs = set.Pointers(base);
  for (size_t i = 0; i < c.args.size(); ++i)
    FillArg(c.args[i], ptrs[i], seed * 131 + i, c.experts, c.topk);
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

v1::Measurement MeasureOp(const v1::Workload& w, const OpFn& fn, const v1::ChipFingerprint& chip,
                          const MeasureOptions& opts, const OpPrepack* prepack) {
  const auto start = std::chrono::steady_clock::now();
  v1::Measurement m;
  auto made = MakeOpCase(w);
  if (!made.ok()) {
    m.set_status(v1::UNSUPPORTED);
    m.set_message(std::string(made.status().message()));
    return m;
  }
  const OpCase& c = *made;
  const ArgSet layout(c);
  if (prepack && (prepack->arg < 0 || prepack->arg >= static_cast<int>(c.args.size()))) {
    m.set_status(v1::CRASHED);
    m.set_message(absl::StrCat("prepack names argument ", prepack->arg, " of ", c.args.size()));
    return m;
  }
  const size_t packed_floats = prepack ? Floats(prepack->bytes(c.dims.data())) : 0;
  double prepack_us = 0;
  // Packs args[prepack->arg] into `dst` and points the argument there.
  auto pack = [&](std::vector<void*>& args, float* dst) {
    const auto t0 = std::chrono::steady_clock::now();
    prepack->pack(c.dims.data(), args[prepack->arg], dst);
    if (prepack_us == 0) prepack_us = Since(t0) * 1e6;
    args[prepack->arg] = dst;
  };
  try {
    double max_error = 0;
    {
      // One set; the arguments the kernel writes are snapshot first (weights are not copied).
      FloatBuffer after(layout.floats);
      FillSet(c, layout, after.data(), opts.seed * 2 + 1);
      std::vector<void*> args = layout.Pointers(after.data());
      std::vector<void*> b = args;
      std::vector<std::vector<char>> snapshots;
      for (size_t i = 0; i < c.args.size(); ++i) {
        if (!c.args[i].inout && c.args[i].fill != Fill::kNaN) continue;
        const char* p = static_cast<const char*>(args[i]);
        b[i] = snapshots.emplace_back(p, p + c.args[i].Bytes()).data();
      }
      FloatBuffer packed(prepack ? packed_floats : 1);
      std::vector<void*> run = args;
      if (prepack) pack(run, packed.data());
      fn(c.dims.data(), run.data(), c.params.data());
      OpCheck check = c.check(std::vector<const void*>(b.begin(), b.end()),
                              std::vector<const void*>(args.begin(), args.end()));
      if (!check.ok) {
        m.set_status(v1::WRONG_RESULT);
        m.set_message(check.message);
        m.set_max_error(check.max_error);
        m.set_measure_seconds(Since(start));
        return m;
      }
      max_error = check.max_error;
    }
    int sets = RotatingSets(layout.floats * sizeof(float), chip, opts.warm);
    Arena arena_memory = RotatingArena(layout.floats, &sets);
    FloatBuffer& arena = *arena_memory;
    FillSet(c, layout, arena.data(), opts.seed * 2 + 2);
    // The in/out arguments as filled (every set starts as a copy of set 0), restored before every
    // timed run: each run, and the check after timing, starts from the inputs the reference reads.
    std::vector<std::vector<uint32_t>> initial(c.args.size());
    const std::vector<void*> set0 = layout.Pointers(arena.data());
    for (size_t i = 0; i < c.args.size(); ++i)
      if (c.args[i].inout) {
        initial[i].resize(Words(c.args[i]));
        std::memcpy(initial[i].data(), set0[i], c.args[i].Bytes());
      }
    for (int s = 1; s < sets; ++s)
      CopyFloats(arena.data() + s * layout.floats, arena.data(), layout.floats);
    std::vector<std::vector<void*>> ptrs;
    for (int s = 0; s < sets; ++s)
      ptrs.push_back(layout.Pointers(arena.data() + s * layout.floats));
    const std::vector<std::vector<void*>> slots = ptrs;  // unpacked: what the check reads
    FloatBuffer packed(prepack ? packed_floats * sets : 1);
    if (prepack)
      for (int s = 0; s < sets; ++s) pack(ptrs[s], packed.data() + s * packed_floats);
    int last = 0;
    auto prepare = [&](int s) {
      last = s;
      // Cold (several sets): written around the cache, so the set stays as cold as it was; warm
      // (one set): ordinary stores, the set is in cache anyway.
      for (size_t i = 0; i < c.args.size(); ++i) {
        if (c.args[i].fill == Fill::kNaN)
          PoisonWords(slots[s][i], Words(c.args[i]), PoisonWord(c.args[i].elem), sets > 1);
        else if (c.args[i].inout)
          CopyWords(slots[s][i], initial[i].data(), Words(c.args[i]), sets > 1);
      }
    };
    m = TimeRepeated([&](int s) { fn(c.dims.data(), ptrs[s].data(), c.params.data()); }, sets, opts,
                     prepare);
    // The last timed run's outputs, checked like the verification's: a kernel that stops
    // computing after its first calls leaves NaN (or, in place, its unchanged input) and fails.
    std::vector<const void*> before(slots[last].begin(), slots[last].end());
    const std::vector<const void*> after = before;
    std::vector<std::vector<uint32_t>> poisoned;
    for (size_t i = 0; i < c.args.size(); ++i) {
      if (c.args[i].inout) before[i] = initial[i].data();
      if (c.args[i].fill != Fill::kNaN) continue;
      before[i] = poisoned.emplace_back(Words(c.args[i])).data();
      FillArg(c.args[i], poisoned.back().data(), 0);
    }
    const OpCheck check = c.check(before, after);
    if (!check.ok) {
      m.Clear();
      m.set_status(v1::WRONG_RESULT);
      m.set_message(absl::StrCat("output after timing differs: ", check.message));
      m.set_max_error(check.max_error);
      m.set_cache_mode(opts.warm ? "warm" : "cold");
      m.set_measure_seconds(Since(start));
      return m;
    }
    m.set_max_error(std::max(max_error, check.max_error));
    if (prepack) m.set_prepack_us(prepack_us);
  } catch (const std::bad_alloc&) {
    m.Clear();
    m.set_status(v1::CRASHED);
    m.set_message(
        absl::StrCat("out of memory allocating ", layout.floats * 4 >> 20, " MiB of buffers"));
    return m;
  }
  m.set_cache_mode(opts.warm ? "warm" : "cold");
  FillThroughput(w, &m);
  ApplyRooflineGuardNow(w, chip, opts.warm, &m);
  m.set_measure_seconds(Since(start));
  return m;
}

}  // namespace kiln::hardware
