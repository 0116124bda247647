#include "hardware/cpu/gemm_harness.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "hardware/buffers.h"
#include "hardware/measure.h"
#include "hardware/reference/gemm_reference.h"

namespace kiln::hardware {
namespace {

size_t PadFloats(size_t n) { return (n + 15) / 16 * 16; }  // 64-byte multiples

// Seeds of the two input streams: verification inputs never equal timing inputs.
uint64_t VerifySeed(uint64_t seed) { return seed * 2 + 1; }
uint64_t TimingSeed(uint64_t seed) { return seed * 2 + 2; }

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
    double max_error = 0;
    {
      FloatBuffer a(a_n), b(b_n), c(c_n);
      FillUniform(a.data(), a_n, VerifySeed(opts.seed));
      FillUniform(b.data(), b_n, VerifySeed(opts.seed) + 0x5eed);
      FillNaN(c.data(), c_n);
      if (prepack) {
        FloatBuffer packed(PadFloats(prepack->floats(N, K)));
        FillNaN(packed.data(), PadFloats(prepack->floats(N, K)));
        prepack->pack(N, K, b.data(), packed.data());
        fn(M, N, K, a.data(), packed.data(), c.data());
      } else {
        fn(M, N, K, a.data(), b.data(), c.data());
      }
      GemmCheck check = CheckGemm(M, N, K, a.data(), b.data(), c.data());
      if (!check.ok) {
        m.set_status(v1::WRONG_RESULT);
        m.set_message(check.message);
        m.set_max_error(check.max_error);
        m.set_measure_seconds(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        return m;
      }
      max_error = check.max_error;
    }
    // One arena of `sets` consecutive (A, B, C) sets; set 0 is filled, the rest are copies.
    // With a prepack, the B slot holds the packed weights, packed once (timed on its own).
    const size_t bt_n = prepack ? PadFloats(prepack->floats(N, K)) : b_n;
    const size_t set_n = a_n + bt_n + c_n;
    int sets = RotatingSets(set_n * sizeof(float), chip, opts.warm);
    std::unique_ptr<FloatBuffer> arena_memory = RotatingArena(set_n, &sets);
    FloatBuffer& arena = *arena_memory;
    FillUniform(arena.data(), a_n, TimingSeed(opts.seed));
    if (prepack) {
      FloatBuffer b(b_n);
      FillUniform(b.data(), b_n, TimingSeed(opts.seed) + 0x5eed);
      auto t0 = std::chrono::steady_clock::now();
      prepack->pack(N, K, b.data(), arena.data() + a_n);
      prepack_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    } else {
      FillUniform(arena.data() + a_n, b_n, TimingSeed(opts.seed) + 0x5eed);
    }
    for (int s = 1; s < sets; ++s)
      std::memcpy(arena.data() + s * set_n, arena.data(), set_n * sizeof(float));
    float* base = arena.data();
    m = TimeRepeated(
        [&](int s) {
          float* set = base + s * set_n;
          fn(M, N, K, set, set + a_n, set + a_n + bt_n);
        },
        sets, opts);
    m.set_max_error(max_error);
    if (prepack) m.set_prepack_us(prepack_us);
  } catch (const std::bad_alloc&) {
    m.Clear();
    m.set_status(v1::CRASHED);
    m.set_message(absl::StrCat("out of memory allocating buffers for M=", M, " N=", N, " K=", K));
    return m;
  }
  m.set_cache_mode(opts.warm ? "warm" : "cold");
  FillThroughput(w, &m);
  ApplyRooflineGuard(w, chip, opts.warm, &m);
  m.set_measure_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return m;
}

}  // namespace kiln::hardware
