// The timing harness shared by all backends: warm-up, adaptive repetition, robust statistics,
// and the roofline guard.
#pragma once

#include <functional>
#include <vector>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// Times `run(set)` (set = index of the rotating buffer set) as DESIGN.md §5 says: warm up,
// then repeat until the 95% confidence half-width of the median is under target_ci of the
// median, or max_seconds / max_samples is reached. Fills samples, median, p10, p90, cv,
// measure_seconds and status OK.
v1::Measurement TimeRepeated(const std::function<void(int set)>& run, int sets,
                             const MeasureOptions& opts);

// Fills median/p10/p90/cv from samples_us.
void Summarize(v1::Measurement* m);

// Sets gflops and gbytes_per_s from the workload's FLOPs and bytes and the median.
void FillThroughput(const v1::Workload& w, v1::Measurement* m);

// Marks the measurement SUSPECT when it is faster than the chip's measured peak FLOP/s or
// read bandwidth allows (with headroom for probe error). No-op when the peaks are unknown.
void ApplyRooflineGuard(const v1::Workload& w, const v1::ChipFingerprint& chip, bool warm,
                        v1::Measurement* m);

// Number of rotating buffer sets so that sets * bytes_per_set exceeds the last-level cache
// (capped so the total stays under max_total_bytes). 1 when warm.
int RotatingSets(double bytes_per_set, const v1::ChipFingerprint& chip, bool warm,
                 double max_total_bytes = 1.0 * (1LL << 30));

}  // namespace kiln::hardware
