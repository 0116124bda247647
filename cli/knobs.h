// `kiln knobs --op OP --shape DIMS --chip PREFIX [--json]`: an operator's knob space, offline
// (from the kernel templates): the knobs, their domains and the rules a configuration obeys.
#pragma once

#include <string>

#include "cli/commands.h"
#include "cli/flags.h"
#include "codegen/knob_space.h"

namespace kiln::cli {

// The chip `kiln knobs` describes for a chip-type prefix: for "cpu" this machine (its vector
// width, cores and caches); a label naming AVX-512 or AVX2 fixes the width. `assumed` says so.
codegen::ChipTraits KnobsChip(const std::string& chip, std::string* assumed);

// The space as text: a header, KNOB / VALUES / MEANING, the rules, notes.
std::string FormatKnobs(const v1::Workload& w, const std::string& chip, const std::string& tmpl,
                        const codegen::KnobSpace& space, const std::string& assumed,
                        const std::vector<std::string>& notes);
// {"workload", "chip", "template", "assumed", "knobs": [{"name", "values", "meaning"}],
// "constraints": [RULE...], "combinations", "valid" (null when too many to count), "notes"}
std::string KnobsJson(const v1::Workload& w, const std::string& chip, const std::string& tmpl,
                      const codegen::KnobSpace& space, const std::string& assumed,
                      const std::vector<std::string>& notes);

// Runs `kiln knobs`: 0, or 2 when no template of the chip's kind supports the workload.
int RunKnobs(const Invocation& inv, Io& io);

}  // namespace kiln::cli
