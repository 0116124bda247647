#include "hardware/buffers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

namespace kiln::hardware {

FloatBuffer::FloatBuffer(size_t floats) : floats_(floats) {
  constexpr size_t kAlign = 2 << 20;
  const size_t bytes =
      std::max<size_t>(kAlign, (floats * sizeof(float) + kAlign - 1) / kAlign * kAlign);
  data_ = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
  if (!data_) throw std::bad_alloc();
  madvise(data_, bytes, MADV_HUGEPAGE);  // best effort
  std::memset(data_, 0, bytes);          // fault every page in now, not while timing
}

FloatBuffer::~FloatBuffer() { std::free(data_); }

std::unique_ptr<FloatBuffer> RotatingArena(size_t floats_per_set, int* sets) {
  for (*sets = std::max(1, *sets);; *sets /= 2) {
    try {
      return std::make_unique<FloatBuffer>(floats_per_set * *sets);
    } catch (const std::bad_alloc&) {
      if (*sets <= 1) throw;
    }
  }
}

void FillUniform(float* data, size_t n, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    // 24 random bits -> [0, 1) exactly representable in fp32, then [-1, 1).
    data[i] = static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  }
}

void FillNaN(float* data, size_t n) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < n; ++i) data[i] = nan;
}

}  // namespace kiln::hardware
