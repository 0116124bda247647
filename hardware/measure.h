// The timing harness shared by all backends: warm-up, adaptive repetition, robust statistics,
// and the roofline guard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hardware/device.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// Times `run(set)` (set = index of the rotating buffer set) as DESIGN.md §5 says: warm up,
// then repeat until the 95% confidence half-width of the median is under target_ci of the
// median, or max_seconds / max_samples is reached. Fills samples, median, p10, p90, cv,
// measure_seconds and status OK. `prepare(set)`, when given, runs before every run(set), warm-up
// included, outside the timed region (it counts toward max_seconds): the harnesses poison the
// set's outputs there, and the last prepare's set is the one the last timed run used.
v1::Measurement TimeRepeated(const std::function<void(int set)>& run, int sets,
                             const MeasureOptions& opts,
                             const std::function<void(int set)>& prepare = nullptr);

// Sets `words` 4-byte words at `data` to `word` (a NaN or another poison pattern). With
// bypass_cache (x86 non-temporal stores) the lines end up in memory, not in cache, so poisoning a
// cold set's outputs before a timed run does not warm them.
void PoisonWords(void* data, size_t words, uint32_t word, bool bypass_cache);

// Copies `words` 4-byte words from src to dst (restoring an in/out input before a timed run),
// bypassing the cache for dst as PoisonWords does.
void CopyWords(void* dst, const void* src, size_t words, bool bypass_cache);

// Fills median/p10/p90/cv from samples_us.
void Summarize(v1::Measurement* m);

// Sets gflops and gbytes_per_s from the workload's FLOPs and bytes and the median.
void FillThroughput(const v1::Workload& w, v1::Measurement* m);

// Marks the measurement SUSPECT when it is faster than the chip's measured peak FLOP/s or
// read bandwidth allows (with headroom for probe error). No-op when the peaks are unknown.
// The compute peak a workload can reach on `chip` in GFLOP/s: the fp32 FMA peak, or for bf16 and
// quantized weights the dot-product peak of their instructions (bf16 pairs, int8 quads).
double ComputePeak(const v1::Workload& w, const v1::ChipFingerprint& chip);

void ApplyRooflineGuard(const v1::Workload& w, const v1::ChipFingerprint& chip, bool warm,
                        v1::Measurement* m);

// Number of rotating buffer sets so that sets * bytes_per_set exceeds the last-level cache
// (capped so the total stays under max_total_bytes). 1 when warm.
int RotatingSets(double bytes_per_set, const v1::ChipFingerprint& chip, bool warm,
                 double max_total_bytes = 1.0 * (1LL << 30));

}  // namespace kiln::hardware
