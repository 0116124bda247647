// Knob spaces: named knobs with discrete domains plus constraints, checked before compiling.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kiln/v1/types.pb.h"

namespace kiln::codegen {

using Config = std::map<std::string, int64_t>;

struct Knob {
  std::string name;
  std::vector<int64_t> values;
  std::string help;
  // For a knob added to a template after configurations were recorded (tuning records,
  // checkpoints, replay sets): the value those configurations ran with. Unset: a configuration
  // without the knob is incomplete.
  std::optional<int64_t> absent_means;
};

struct Constraint {
  std::string rule;  // human-readable, e.g. "MR*NR/VW <= 28 accumulator registers"
  std::function<bool(const Config&)> holds;
};

class KnobSpace {
 public:
  void AddKnob(std::string name, std::vector<int64_t> values, std::string help = "",
               std::optional<int64_t> absent_means = std::nullopt);
  void AddConstraint(std::string rule, std::function<bool(const Config&)> holds);

  const std::vector<Knob>& knobs() const { return knobs_; }
  const std::vector<Constraint>& constraints() const { return constraints_; }
  const Knob* FindKnob(const std::string& name) const;

  // `config` with every absent knob that has an absent_means set to it: how a configuration
  // recorded before the knob existed is read (rendering, pretraining, the policy's ledger).
  Config WithAbsentKnobs(const Config& config) const;

  // OK when every knob has a value from its domain, no unknown knob is set and every
  // constraint holds; otherwise names the knob or the broken rule.
  absl::Status Check(const Config& config) const;
  bool IsValid(const Config& config) const { return Check(config).ok(); }
  // The constraints alone, for a config already known to hold one in-domain value per knob
  // (fast: no messages are built). Enumeration and sampling use it.
  bool SatisfiesConstraints(const Config& config) const;

  // Size of the Cartesian product of the domains.
  uint64_t CartesianSize() const;
  // The configuration at a mixed-radix index of the Cartesian product (first knob fastest).
  Config Decode(uint64_t index) const;
  // All valid configurations, in Cartesian order, at most `limit`.
  std::vector<Config> EnumerateValid(size_t limit = SIZE_MAX) const;
  // Restricts knob `name` to a single value (a human "pin"). Fails if it is not in the domain.
  absl::Status Pin(const std::string& name, int64_t value);

 private:
  std::vector<Knob> knobs_;
  std::vector<Constraint> constraints_;
};

// "KC=256,MC=64,MR=8" (knobs sorted by name): the key a configuration is stored under.
std::string ConfigKey(const Config& config);
Config FromProto(const v1::Config& config);
v1::Config ToProto(const Config& config);

// What the knob spaces need to know about a chip, derived from its fingerprint.
// (A field added here joins the space signature of agent/strategy.cc, which shares indexes.)
struct ChipTraits {
  int vector_floats = 8;      // fp32 lanes per SIMD register (8 AVX2, 16 AVX-512)
  int vector_registers = 16;  // architectural SIMD registers
  int cores = 1;
  int64_t l1d_bytes = 32 << 10;
  int64_t l2_bytes = 1 << 20;
  int64_t l3_bytes = 8 << 20;
  int64_t local_mem_bytes = 32 << 10;  // opencl/cuda: local (shared) memory per work-group
  int64_t max_work_group_size = 256;   // opencl/cuda: most work-items per work-group
};
ChipTraits TraitsFromFingerprint(const v1::ChipFingerprint& chip);

// Some VMs report the whole host's L3 (glibc's sysconf says 320-512 MiB on a 2-vCPU guest). Caps
// it at max(32 MiB, 16 MiB per core), more than any real part has per core.
int64_t SaneL3Bytes(int64_t reported, int cores);

// The configuration a task tries first on any backend: the first knob values made valid. Every
// template lists each knob's safe value first (one that compiles and verifies on every chip of
// its kind), so this is the configuration the templates guarantee. Empty when none is valid.
Config SafeDefaultConfig(const KnobSpace& space);

}  // namespace kiln::codegen
