// A recorded measurement set (Kernel Tuner cache file or Kiln record export) used as a search
// space.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"

namespace kiln::hardware {

// One recorded configuration: its value index per knob and what measuring it gave.
struct ReplayEntry {
  std::vector<int32_t> index;  // position of each knob's value in its domain
  v1::MeasurementStatus status = v1::OK;
  double median_us = 0;            // OK only
  std::vector<double> samples_us;  // per-run times when recorded
  std::string message;             // failure text, e.g. "CompilationFailedConfig"
};

struct ReplayKnob {
  std::string name;
  std::vector<int64_t> values;      // integer values; non-integer domains use their positions
  std::vector<std::string> labels;  // the recorded value text, one per value
};

class ReplaySet {
 public:
  std::string name;    // file stem, e.g. "gemm_RTX_3090"
  std::string kernel;  // kernel_name when recorded
  std::string device;  // device_name when recorded
  std::vector<int64_t> problem_size;
  std::vector<ReplayKnob> knobs;     // in the file's knob order
  std::vector<ReplayEntry> entries;  // every recorded configuration, failed ones included

  // The knob space: the knobs' domains plus "recorded in the set" as the only constraint, so
  // absent combinations (excluded by the kernel's restrictions) are masked.
  codegen::KnobSpace Space() const;
  // Every recorded configuration, in entry order.
  std::vector<codegen::Config> Configs() const;
  codegen::Config ConfigOf(const ReplayEntry& e) const;
  // The recorded entry for a configuration, or nullptr when it is absent.
  const ReplayEntry* Find(const codegen::Config& config) const;
  // The entry as a Measurement (OK with median and samples, or the failure status).
  v1::Measurement MeasurementOf(const ReplayEntry& e) const;
  // Fastest OK time, and how many entries reach `fraction` of its performance.
  double BestUs() const;
  int CountWithin(double fraction) const;
  // A workload and chip describing the set, for strategies' context features.
  v1::Workload Workload() const;
  v1::ChipFingerprint Chip() const;

  // Builds the lookup index; called by the parsers. Fails on duplicate configurations.
  absl::Status Finish();

 private:
  using Index = std::unordered_map<std::string, int>;  // packed value indices -> entry
  std::shared_ptr<Index> by_key_ = std::make_shared<Index>();
};

// Parses a Kernel Tuner cache file or a Kiln record export (JSON Lines of kiln.v1.TuningRecord
// in protobuf's JSON mapping, or {"records": [...]}). Errors name the file and the problem.
absl::StatusOr<std::shared_ptr<const ReplaySet>> ParseReplaySet(absl::string_view text,
                                                                const std::string& name);
// Reads a regular file of at most kMaxReplayFileBytes (the largest published Kernel Tuner caches
// are tens of MB) and parses it; anything else is refused with the file's name and the reason.
inline constexpr size_t kMaxReplayFileBytes = size_t{256} << 20;
// Replay files nest a few levels; deeper ones are refused before parsing.
inline constexpr int kMaxReplayJsonDepth = 64;
absl::StatusOr<std::shared_ptr<const ReplaySet>> LoadReplaySet(const std::string& path);

// Kiln tuning records (e.g. a coordinator store's), one set per (workload, chip type), named
// "WORKLOAD_KEY@CHIP_TYPE"; groups with fewer than `min_records` records are left out.
absl::StatusOr<std::vector<std::shared_ptr<const ReplaySet>>> SetsFromRecords(
    const std::vector<v1::TuningRecord>& records, size_t min_records = 2);

// Maps a Kernel Tuner failure string to a measurement status.
v1::MeasurementStatus StatusOfFailure(absl::string_view what);

}  // namespace kiln::hardware
