// Kernel templates: a knob space per (workload, chip) and rendering of a config into source.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"

namespace kiln::codegen {

// A template rendered for (workload, config, dialect): source text plus compile definitions.
struct Kernel {
  std::string dialect;                                   // "cpp" for the CPU backend
  std::string entry;                                     // exported symbol the device calls
  std::string source;                                    // the template file's text
  std::vector<std::pair<std::string, int64_t>> defines;  // tunables as compile-time constants
  std::string Hash() const;  // stable hash of source + defines + dialect
};

class KernelTemplate {
 public:
  virtual ~KernelTemplate() = default;
  virtual std::string name() const = 0;
  virtual bool Supports(const v1::Workload& w) const = 0;
  virtual KnobSpace Space(const v1::Workload& w, const ChipTraits& chip) const = 0;
  // Fails with INVALID_ARGUMENT when the config is not in the space.
  virtual absl::StatusOr<Kernel> Render(const v1::Workload& w, const Config& config,
                                        const ChipTraits& chip) const = 0;
  // Configurations the template's author expects to do well for this workload on this chip (an
  // analytic guess from the shape and the chip's registers, cores and caches, as BLIS derives
  // its blocking). A task measures them first, within its budget, like any other proposal; the
  // search goes on from there. None by default.
  virtual std::vector<Config> StartingConfigs(const v1::Workload& w, const ChipTraits& chip) const {
    return {};
  }
};

// The template for a workload on a chip kind ("cpu"), or NOT_FOUND / UNIMPLEMENTED.
absl::StatusOr<const KernelTemplate*> FindTemplate(const v1::Workload& w,
                                                   const std::string& chip_kind);

// Convenience: the knob space for a workload on a chip (template lookup + traits + pins).
absl::StatusOr<KnobSpace> SpaceFor(const v1::Workload& w, const v1::ChipFingerprint& chip);

// Convenience: the kernel a configuration renders to for a workload on a chip (template lookup +
// traits), as a worker of that chip renders it.
absl::StatusOr<Kernel> RenderFor(const v1::Workload& w, const v1::ChipFingerprint& chip,
                                 const Config& config);

}  // namespace kiln::codegen
