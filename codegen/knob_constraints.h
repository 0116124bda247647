// A job's human constraints on the knob space (JobSpec pin, exclude and range): checked at
// submit against the template's space on the chips the job may run on, and applied to the space
// of the chip it is bound to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen/kernel_template.h"
#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"

namespace kiln::codegen {

// How messages name a constraint: the command line's flags ("--pin MR=7: ...") or the
// JobSpec's fields ("pin: MR=7: ...").
enum class ConstraintNaming { kFlags, kFields };

// The chips a job for chip-type prefix `chip` (e.g. "cpu", "cpu-x86_64-avx2") may be bound to,
// as far as knob spaces differ: the vector widths the prefix allows, a few core counts (and
// `extra_cores`, so that a thread count such as NT=6 is a value of some chip), small and large
// work-groups.
std::vector<ChipTraits> PlausibleChips(const std::string& chip,
                                       const std::vector<int64_t>& extra_cores = {});

// Checks the spec's pin, exclude and range against the template's space for workload `w` on
// every chip of PlausibleChips(spec.chip()): each knob must exist, each value must be in its
// domain, a range or exclusion must leave some value, and (where the space is small enough to
// enumerate) some configuration must satisfy every rule. INVALID_ARGUMENT names the flag or
// field, the knob and the rule ("--pin MR=7: MR takes 1, 2, 4, 6, 8 (gemm on cpu)"). With
// `skip_absent_knobs` (model jobs: the constraints name knobs of several operators) a knob the
// template lacks is ignored.
absl::Status CheckKnobConstraints(const v1::JobSpec& spec, const v1::Workload& w,
                                  const KernelTemplate& tmpl, ConstraintNaming naming,
                                  bool skip_absent_knobs = false);

// The knob names that the spec's pin, exclude and range mention.
std::vector<std::string> ConstrainedKnobs(const v1::JobSpec& spec);

// Narrows `space` (a bound chip's) to the spec's pin, exclude and range; fails naming the knob
// when one is unknown (unless `skip_absent_knobs`) or its domain would be left empty.
absl::Status ApplyKnobConstraints(const v1::JobSpec& spec, bool skip_absent_knobs,
                                  KnobSpace* space);

// Whether `config` meets the spec's pin, exclude and range (knobs it lacks are not checked).
bool MeetsKnobConstraints(const v1::JobSpec& spec, const Config& config);

// How many configurations of `space` satisfy every rule, by a search that cuts each broken
// combination at the knob that completes it; nullopt when that takes more than `max_steps`.
std::optional<uint64_t> CountValidConfigs(const KnobSpace& space, int64_t max_steps = 1 << 18);

// "1, 2, 4, 6, 8" (at most `max` values, then ", ...").
std::string DomainText(const std::vector<int64_t>& values, size_t max = 24);

}  // namespace kiln::codegen
