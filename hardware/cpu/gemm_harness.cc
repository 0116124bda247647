#include "hardware/cpu/gemm_harness.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "hardware/buffers.h"
#include "hardware/cpu/read_sweep.h"
#include "hardware/measure.h"
#include "hardware/reference/gemm_reference.h"

namespace kiln::hardware {
namespace {

size_t PadFloats(size_t n) { return (n + 15) / 16 * 16; }  // 64-byte multiples

constexpr uint32_t kPoisonNaN = 0x7fc00000;  // the quiet NaN FillNaN writes

// The inputs' seed: verified outputs, then timed on the same inputs.
uint64_t VerifySeed(uint64_t seed) { return seed * 2 + 1; }

// What verification needs beyond the arena, kept for the next kernel on the same workload while
// the process keeps its arenas (the worker's long-lived trial process, one trial at a time): the
// plain (unpacked) weights, which the packer and the reference read, and the reference. Both are
// functions of the shape and the seed; allocating and filling 64-235 MB of weights and computing
// the reference (0.04-0.25 s) were most of the setup left in such a trial.
using VerifyKey = std::tuple<int, int, int, uint64_t>;  // M, N, K, seed
struct VerifyCache {
  VerifyKey key;
  std::unique_ptr<FloatBuffer> weights;
  std::shared_ptr<const GemmReference> reference;
};
std::mutex verify_mu;
VerifyCache verify_cache;

// Drops what belongs to another workload before this one allocates, or everything when the
// process does not keep its arenas.
void DropStaleVerifyCache(const VerifyKey& key) {
  std::lock_guard<std::mutex> lock(verify_mu);
  if (ArenasKeptForReuse() && verify_cache.key == key) return;
  verify_cache = VerifyCache{};
  verify_cache.key = key;
}

// The plain weights from `seed`: the kept ones, or a fresh buffer owned by *own.
const float* PlainWeights(size_t n, uint64_t seed, std::unique_ptr<FloatBuffer>* own) {
  std::lock_guard<std::mutex> lock(verify_mu);
  std::unique_ptr<FloatBuffer>& weights = ArenasKeptForReuse() ? verify_cache.weights : *own;
  if (!weights) {
    weights = std::make_unique<FloatBuffer>(n);
    FillUniform(weights->data(), n, seed);
  }
  return weights->data();
}

// The reference of A*B, computed before the kernel runs (a kernel that scribbles on A must not
// change what it is judged against): the kept one, or a new one.
std::shared_ptr<const GemmReference> ReferenceFor(int M, int N, int K, const float* A,
                                                  const float* B) {
  std::lock_guard<std::mutex> lock(verify_mu);
  if (verify_cache.reference) return verify_cache.reference;
  auto made = std::make_shared<const GemmReference>(M, N, K, A, B);
  if (ArenasKeptForReuse()) verify_cache.reference = made;
  return made;
}

}  // namespace

v1::Measurement MeasureGemm(const v1::Workload& w, const GemmFn& fn,
                            const v1::ChipFingerprint& chip, const MeasureOptions& opts,
                            const GemmPrepack* prepack) {
  const auto start = std::chrono::steady_clock::now();
  const int M = w.dims().at("M"), N = w.dims().at("N"), K = w.dims().at("K");
  const size_t a_n = PadFloats(size_t{1} * M * K), b_n = PadFloats(size_t{1} * K * N),
               c_n = PadFloats(size_t{1} * M * N);
  v1::Measurement m;
  double prepack_us = 0;
  try {
    // One arena of `sets` consecutive (A, B, C) sets. Set 0 is filled from the verification seed
    // and verified in place (with a prepack, the B slot holds the packed weights, packed once and
    // timed on their own); the other sets are copies of it, for cold timing.
    const size_t bt_n = prepack ? PadFloats(prepack->floats(N, K)) : b_n;
    const size_t set_n = a_n + bt_n + c_n;
    DropStaleVerifyCache({M, N, K, opts.seed});
    int sets = RotatingSets(set_n * sizeof(float), chip, opts.warm);
    Arena arena_memory = RotatingArena(set_n, &sets);
    float* const a = arena_memory->data();
    float* const bt = a + a_n;
    float* const c = bt + bt_n;
    FillUniform(a, a_n, VerifySeed(opts.seed));
    std::unique_ptr<FloatBuffer> plain_b;  // the weights as the reference reads them
    const float* b = bt;
    if (prepack)
      b = PlainWeights(b_n, VerifySeed(opts.seed) + 0x5eed, &plain_b);
    else
      FillUniform(bt, b_n, VerifySeed(opts.seed) + 0x5eed);
    if (prepack) {
      FillNaN(bt, bt_n);  // a layout the packer leaves partly unwritten shows up as NaN
      auto t0 = std::chrono::steady_clock::now();
      prepack->pack(N, K, b, bt);
      prepack_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    FillNaN(c, c_n);
    const std::shared_ptr<const GemmReference> reference = ReferenceFor(M, N, K, a, b);
    fn(M, N, K, a, bt, c);
    GemmCheck check = reference->Check(c);
    if (!check.ok) {
      m.set_status(v1::WRONG_RESULT);
      m.set_message(check.message);
      m.set_max_error(check.max_error);
      m.set_measure_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return m;
    }
    const double max_error = check.max_error;
    plain_b.reset();
    for (int s = 1; s < sets; ++s) CopyFloats(a + s * set_n, a, set_n);
    // Every timed run writes a NaN-poisoned C (the copies of set 0 hold its verified output), and
    // the last one is verified after timing: a kernel that stops computing after its first calls
    // fails instead of winning.
    int last = 0;
    m = TimeRepeated(
        [&](int s) {
          float* set = a + s * set_n;
          fn(M, N, K, set, set + a_n, set + a_n + bt_n);
        },
        sets, opts,
        [&](int s) {
          last = s;
          // Cold (several sets): poisoned around the cache, so C stays as cold as the set's A and
          // B; warm (one set): ordinary stores, the set is in cache anyway.
          PoisonWords(a + s * set_n + a_n + bt_n, c_n, kPoisonNaN, sets > 1);
        });
    const GemmCheck after = reference->Check(a + last * set_n + a_n + bt_n);
    if (!after.ok) {
      m.Clear();
      m.set_status(v1::WRONG_RESULT);
      m.set_message(absl::StrCat("output after timing differs: ", after.message));
      m.set_max_error(after.max_error);
      m.set_cache_mode(opts.warm ? "warm" : "cold");
      m.set_measure_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return m;
    }
    m.set_max_error(std::max(max_error, after.max_error));
    if (prepack) m.set_prepack_us(prepack_us);
  } catch (const std::bad_alloc&) {
    m.Clear();
    m.set_status(v1::CRASHED);
    m.set_message(absl::StrCat("out of memory allocating buffers for M=", M, " N=", N, " K=", K));
    return m;
  }
  m.set_cache_mode(opts.warm ? "warm" : "cold");
  FillThroughput(w, &m);
  ApplyRooflineGuardNow(w, chip, opts.warm, &m);
  m.set_measure_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return m;
}

}  // namespace kiln::hardware
