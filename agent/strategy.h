// The search-strategy extension point: Propose(n) configurations, Observe(results), seeded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"

namespace kiln::agent {

struct Observation {
  codegen::Config config;
  v1::MeasurementStatus status = v1::STATUS_UNSPECIFIED;
  double median_us = 0;  // valid when status == OK
};

struct StrategyContext {
  codegen::KnobSpace space;
  v1::Workload workload;
  v1::ChipFingerprint chip;
  uint64_t seed = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Up to n valid configurations never proposed before; fewer when the space is exhausted.
  virtual std::vector<codegen::Config> Propose(int n) = 0;
  virtual void Observe(const std::vector<Observation>& results) = 0;
  // Marks a configuration as already proposed (used when a job is recovered after a restart).
  virtual void Exclude(const codegen::Config& config) = 0;
};

// Names accepted in JobSpec.strategy; "" and "default" mean kDefaultStrategy.
std::vector<std::string> StrategyNames();
inline constexpr char kDefaultStrategy[] = "random";
absl::Status CheckStrategyName(const std::string& name);

absl::StatusOr<std::unique_ptr<Strategy>> NewStrategy(const std::string& name,
                                                      StrategyContext context);

}  // namespace kiln::agent
