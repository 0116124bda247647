#include "cli/knobs.h"

#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/table.h"
#include "codegen/kernel_template.h"
#include "codegen/knob_constraints.h"
#include "codegen/workload.h"
#include "common/json_text.h"

namespace kiln::cli {
namespace {

std::string Kind(const std::string& chip) { return chip.substr(0, chip.find('-')); }

void SetLanes(codegen::ChipTraits* t, int lanes) {
  t->vector_floats = lanes;
  t->vector_registers = lanes == 16 ? 32 : 16;
}

std::string LanesName(int lanes) {
  return lanes == 16 ? "AVX-512" : lanes == 8 ? "AVX2" : "128-bit SIMD";
}

std::string Bytes(int64_t b) {
  if (b >= (1 << 20) && b % (1 << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b >= (1 << 10)) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

int LocalLanes() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return 16;
  if (__builtin_cpu_supports("avx2")) return 8;
#endif
  return 4;
}

bool SameDomain(const codegen::KnobSpace& a, const codegen::KnobSpace& b, const std::string& k) {
  const codegen::Knob* x = a.FindKnob(k);
  const codegen::Knob* y = b.FindKnob(k);
  return x && y && x->values == y->values;
}

}  // namespace

codegen::ChipTraits KnobsChip(const std::string& chip, std::string* assumed) {
  codegen::ChipTraits t;
  if (Kind(chip) != "cpu") {
    *assumed = absl::StrCat("a typical ", Kind(chip), " device (local memory ",
                            Bytes(t.local_mem_bytes), ", work-groups up to ", t.max_work_group_size,
                            "); the bound device's limits apply");
    return t;
  }
  const bool named = absl::StrContains(chip, "avx512") || absl::StrContains(chip, "avx2");
  SetLanes(&t, absl::StrContains(chip, "avx512") ? 16
               : absl::StrContains(chip, "avx2") ? 8
                                                 : LocalLanes());
  t.cores = std::max(1u, std::thread::hardware_concurrency());
  if (long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE); l1 > 0) t.l1d_bytes = l1;
  if (long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); l2 > 0) t.l2_bytes = l2;
  if (long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0)
    t.l3_bytes = codegen::SaneL3Bytes(l3, t.cores);
  *assumed =
      absl::StrCat(named ? "a " : "this machine: ", LanesName(t.vector_floats), " (",
                   t.vector_floats, " fp32 lanes, ", t.vector_registers, " vector registers), ",
                   t.cores, " cores, L2 ", Bytes(t.l2_bytes), ", L3 ", Bytes(t.l3_bytes),
                   named ? " (this machine's cores, caches)" : "");
  return t;
}

std::string FormatKnobs(const v1::Workload& w, const std::string& chip, const std::string& tmpl,
                        const codegen::KnobSpace& space, const std::string& assumed,
                        const std::vector<std::string>& notes) {
  std::string out = absl::StrCat(codegen::WorkloadKey(w), " on ", chip, ": template ", tmpl, ", ",
                                 space.knobs().size(), " knobs\n");
  out += "assuming " + assumed + "\n\n";
  std::vector<Row> rows;
  for (const codegen::Knob& k : space.knobs())
    rows.push_back({k.name, codegen::DomainText(k.values, 16), k.help});
  out += FormatTable({"KNOB", "VALUES", "MEANING"}, rows);
  if (!space.constraints().empty()) {
    out += "\nRules (a configuration obeys every one):\n";
    for (const codegen::Constraint& c : space.constraints()) out += "  " + c.rule + "\n";
  }
  const uint64_t n = space.CartesianSize();
  out += absl::StrCat("\n", n, " combinations");
  if (auto valid = codegen::CountValidConfigs(space))
    out += absl::StrCat(", ", *valid, " valid");
  else
    out += " (too many to count the valid ones here)";
  out += ".\n";
  for (const std::string& note : notes) out += "Note: " + note + "\n";
  out +=
      "Narrow a job with --pin KNOB=V, --exclude KNOB=V1,V2 and --range KNOB=LO..HI (checked at "
      "submit).\n";
  return out;
}

std::string KnobsJson(const v1::Workload& w, const std::string& chip, const std::string& tmpl,
                      const codegen::KnobSpace& space, const std::string& assumed,
                      const std::vector<std::string>& notes) {
  nlohmann::ordered_json knobs = nlohmann::ordered_json::array();
  for (const codegen::Knob& k : space.knobs())
    knobs.push_back({{"name", k.name}, {"values", k.values}, {"meaning", k.help}});
  nlohmann::ordered_json rules = nlohmann::ordered_json::array();
  for (const codegen::Constraint& c : space.constraints()) rules.push_back(c.rule);
  const uint64_t n = space.CartesianSize();
  const std::optional<uint64_t> valid = codegen::CountValidConfigs(space);
  return JsonText({{"workload", codegen::WorkloadKey(w)},
                   {"chip", chip},
                   {"template", tmpl},
                   {"assumed", assumed},
                   {"knobs", knobs},
                   {"constraints", rules},
                   {"combinations", n},
                   {"valid", valid ? nlohmann::ordered_json(*valid) : nlohmann::ordered_json()},
                   {"notes", notes}});
}

int RunKnobs(const Invocation& inv, Io& io) {
  const v1::Workload& w = inv.spec.workload();
  const std::string& chip = inv.spec.chip();
  auto tmpl = codegen::FindTemplate(w, Kind(chip));
  if (!tmpl.ok()) {
    io.err << "kiln: " << tmpl.status().message() << "\n";
    return 2;
  }
  std::string assumed;
  const codegen::ChipTraits traits = KnobsChip(chip, &assumed);
  codegen::KnobSpace space = (*tmpl)->Space(w, traits);
  std::vector<std::string> notes;
  // --pin/--exclude/--range (already checked against every chip of --chip): the space they leave
  // on the chip assumed here.
  const v1::JobSpec& spec = inv.spec;
  if (spec.pin_size() || spec.exclude_size() || spec.range_size()) {
    codegen::KnobSpace narrowed = space;
    if (absl::Status s = codegen::ApplyKnobConstraints(spec, false, &narrowed); s.ok()) {
      space = std::move(narrowed);
      notes.push_back("the domains are those --pin, --exclude and --range leave");
    } else {
      notes.push_back(absl::StrCat("the constraints fit other chips of '", chip,
                                   "' but not the one assumed here (", s.message(),
                                   "); the whole space is shown"));
    }
  }
  if (space.knobs().empty())
    notes.push_back(
        "this template's space comes with the chip (a recorded data set's "
        "fingerprint); see 'kiln workers --json'");
  // The space depends on the chip: say which knobs read differently on the other widths.
  if (Kind(chip) == "cpu" && !absl::StrContains(chip, "avx")) {
    for (int lanes : {16, 8, 4}) {
      if (lanes == traits.vector_floats) continue;
      codegen::ChipTraits other = traits;
      SetLanes(&other, lanes);
      const codegen::KnobSpace alt = (*tmpl)->Space(w, other);
      std::vector<std::string> differ;
      for (const codegen::Knob& k : space.knobs())
        if (!SameDomain(space, alt, k.name)) differ.push_back(k.name);
      for (const codegen::Knob& k : alt.knobs())
        if (!space.FindKnob(k.name)) differ.push_back(k.name + " (only there)");
      const std::string see = lanes == 16  ? "; see --chip cpu-x86_64-avx512"
                              : lanes == 8 ? "; see --chip cpu-x86_64-avx2"
                                           : "";
      notes.push_back(absl::StrCat(
          "on ", LanesName(lanes), " chips (", lanes, " lanes) ",
          differ.empty() ? "the domains are the same"
                         : absl::StrCat("the domains of ", absl::StrJoin(differ, ", "), " differ"),
          " and the rules read ", lanes, " lanes", see));
    }
    if (space.FindKnob("NT")) notes.push_back("NT's values follow the bound worker's cores");
  }
  io.out << (inv.json ? KnobsJson(w, chip, (*tmpl)->name(), space, assumed, notes) + "\n"
                      : FormatKnobs(w, chip, (*tmpl)->name(), space, assumed, notes));
  return 0;
}

}  // namespace kiln::cli
