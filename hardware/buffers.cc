#include "hardware/buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

// The process's thread pool (hardware/cpu/kernel_runtime.cc, in this library).
extern "C" void kiln_rt_parallel_for_v1(long n, int nt, void (*call)(const void*, long),
                                        const void* body);

namespace kiln::hardware {

void ParallelChunks(size_t n, const std::function<void(size_t, size_t)>& body, size_t min_chunk) {
  static const size_t cores = std::max(1u, std::thread::hardware_concurrency());  // reads /sys
  const size_t parts = std::clamp<size_t>(n / std::max<size_t>(1, min_chunk), 1, cores);
  if (parts == 1) return body(0, n);
  // On the process's one thread pool, the one loaded kernels use (cpu/kernel_runtime.cc).
  const size_t chunk = (n + parts - 1) / parts;
  auto part = [&](long i) { body(std::min(n, i * chunk), std::min(n, (i + 1) * chunk)); };
  kiln_rt_parallel_for_v1(
      static_cast<long>(parts), static_cast<int>(parts),
      [](const void* f, long i) { (*static_cast<const decltype(part)*>(f))(i); }, &part);
}

FloatBuffer::FloatBuffer(size_t floats) : floats_(floats) {
  constexpr size_t kAlign = 2 << 20;
  const size_t bytes =
      std::max<size_t>(kAlign, (floats * sizeof(float) + kAlign - 1) / kAlign * kAlign);
  data_ = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
  if (!data_) throw std::bad_alloc();
  madvise(data_, bytes, MADV_HUGEPAGE);               // best effort
  ParallelChunks(bytes, [this](size_t b, size_t e) {  // fault every page in now, not while timing
    std::memset(reinterpret_cast<char*>(data_) + b, 0, e - b);
  });
}

FloatBuffer::~FloatBuffer() { std::free(data_); }

namespace {

// The reuse slot: one parked arena, while reuse is on.
std::mutex arena_mu;
bool keep_arenas = false;
std::unique_ptr<FloatBuffer> parked_arena;

}  // namespace

void ArenaRelease::operator()(FloatBuffer* arena) const {
  std::unique_ptr<FloatBuffer> owned(arena);
  std::lock_guard<std::mutex> lock(arena_mu);
  if (keep_arenas) parked_arena = std::move(owned);  // frees the one parked before, if any
}

void KeepArenasForReuse(bool keep) {
  std::lock_guard<std::mutex> lock(arena_mu);
  keep_arenas = keep;
  if (!keep) parked_arena.reset();
}

bool ArenasKeptForReuse() {
  std::lock_guard<std::mutex> lock(arena_mu);
  return keep_arenas;
}

Arena RotatingArena(size_t floats_per_set, int* sets) {
  *sets = std::max(1, *sets);
  std::unique_ptr<FloatBuffer> parked;
  {
    std::lock_guard<std::mutex> lock(arena_mu);
    parked = std::move(parked_arena);
  }
  const size_t want = floats_per_set * *sets;
  if (parked && parked->size() >= want && parked->size() / 2 <= want) {
    ParallelChunks(want, [&](size_t b, size_t e) {
      std::memset(parked->data() + b, 0, (e - b) * sizeof(float));
    });
    return Arena(parked.release());
  }
  parked.reset();  // free it before allocating another
  for (;; *sets /= 2) {
    try {
      return Arena(new FloatBuffer(floats_per_set * *sets));
    } catch (const std::bad_alloc&) {
      if (*sets <= 1) throw;
    }
  }
}

void FillUniform(float* data, size_t n, uint64_t seed) {
  const uint64_t origin = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  ParallelChunks(n, [&](size_t begin, size_t end) {
    uint64_t state = origin + begin * 0x9E3779B97F4A7C15ULL;  // element i's state, jumped to
    for (size_t i = begin; i < end; ++i) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      z ^= z >> 31;
      // 24 random bits -> [0, 1) exactly representable in fp32, then [-1, 1).
      data[i] = static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    }
  });
}

void CopyFloats(float* dst, const float* src, size_t n) {
  ParallelChunks(n, [&](size_t b, size_t e) { std::memcpy(dst + b, src + b, (e - b) * 4); });
}

void FillNaN(float* data, size_t n) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ParallelChunks(n, [&](size_t b, size_t e) { std::fill(data + b, data + e, nan); });
}

}  // namespace kiln::hardware
