// The memory read bandwidth, measured in the process that runs the kernels: a read-only sweep,
// on the kernels' thread pool, of a buffer larger than the caches. The step runner takes one next
// to every step sample, so that a step's memory-bandwidth bound is read in the same moments as
// the step itself (on a shared machine the bandwidth moves from minute to minute).
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

class ReadSweep {
 public:
  // A buffer of `bytes` (rounded down to whole 2 MiB pages, at least one), backed by huge pages
  // where the kernel gives them and touched once on `threads` threads.
  static absl::StatusOr<std::unique_ptr<ReadSweep>> Create(size_t bytes, int threads);
  ~ReadSweep();
  ReadSweep(const ReadSweep&) = delete;
  ReadSweep& operator=(const ReadSweep&) = delete;

  // GB/s of the best of `passes` passes over the whole buffer (bytes / wall time of a pass, all
  // threads reading, as STREAM reports).
  double BestGbps(int passes);
  size_t bytes() const { return bytes_; }

 private:
  ReadSweep(float* data, size_t bytes, int threads)
      : data_(data), bytes_(bytes), threads_(threads) {}
  double Pass();

  float* data_;
  size_t bytes_;
  int threads_;
  float sink_ = 0;
};

// ApplyRooflineGuard (hardware/measure.h), but when the fingerprint's read bandwidth would make
// a cold result SUSPECT, the bandwidth is read again now (a 256 MiB sweep) and the result judged
// against the higher of the two: a fingerprint probed while the machine was busy (another
// worker's compile, a neighbour VM) read 11.6 GB/s on a machine that sustains 35 and flagged
// sound kernels as faster than possible. If that does not clear it, the CPU's peaks are probed
// again (a second or more, only for a result that would be SUSPECT, at most once a minute in a
// process, which remembers the highest figures it probed) and the higher ones used.
void ApplyRooflineGuardNow(const v1::Workload& w, const v1::ChipFingerprint& chip, bool warm,
                           v1::Measurement* m);

}  // namespace kiln::hardware
