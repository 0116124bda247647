// Host buffers for measurement: page-aligned, huge-page friendly, filled from a fixed seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace kiln::hardware {

// A zero-initialised float array, 2 MiB aligned and advised for transparent huge pages, so
// that timing runs neither page-fault nor depend on TLB luck. Throws std::bad_alloc.
class FloatBuffer {
 public:
  explicit FloatBuffer(size_t floats);
  ~FloatBuffer();
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return floats_; }

 private:
  float* data_ = nullptr;
  size_t floats_ = 0;
};

// Returns an arena to the process's reuse slot, or frees it (see KeepArenasForReuse).
struct ArenaRelease {
  void operator()(FloatBuffer* arena) const;
};
using Arena = std::unique_ptr<FloatBuffer, ArenaRelease>;

// `*sets` rotating operand sets of `floats_per_set` floats in one buffer, zeroed. While the
// allocation fails (a trial's memory limit below the cold footprint), the count is halved, down
// to one set (then std::bad_alloc propagates); `*sets` says how many were allocated.
Arena RotatingArena(size_t floats_per_set, int* sets);

// A long-lived trial process (workers/trial_child.h) keeps its last arena when it is released and
// hands it out again (zeroed) when the next one asks for between half and all of it: the memory
// stays faulted in. Fresh memory is what a one-shot trial pays most for on a VM: faulting in
// 512 MiB took 0.03 s or, when the host had reclaimed the guest's free pages, 0.2-0.4 s.
void KeepArenasForReuse(bool keep);
bool ArenasKeptForReuse();

// Deterministic uniform values in [-1, 1) from `seed` (splitmix64): the same seed gives the
// same inputs on every machine.
void FillUniform(float* data, size_t n, uint64_t seed);

// Runs body(begin, end) over [0, n) in one contiguous chunk per core (chunks of at least
// min_chunk; one chunk on the calling thread when n is smaller). The operand buffers are hundreds
// of MiB (the cold rotation): filling, copying and checking them on one thread was most of a
// trial's setup.
void ParallelChunks(size_t n, const std::function<void(size_t, size_t)>& body,
                    size_t min_chunk = size_t{4} << 20);

// memcpy of n floats, on every core (the rotating sets' copies of set 0).
void CopyFloats(float* dst, const float* src, size_t n);

// Sets every element to a quiet NaN (outputs are poisoned before verification).
void FillNaN(float* data, size_t n);

}  // namespace kiln::hardware
