#include "codegen/knob_constraints.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/workload.h"
#include "common/text.h"

namespace kiln::codegen {
namespace {

std::string Kind(const std::string& chip) { return chip.substr(0, chip.find('-')); }

// "--pin MR=7" / "pin: MR=7": the constraint as the user wrote it.
std::string Label(ConstraintNaming naming, const char* what, const std::string& knob,
                  const std::string& value) {
  std::string k = ShortQuote(knob);
  if (naming == ConstraintNaming::kFlags) return absl::StrCat("--", what, " ", k, "=", value);
  return absl::StrCat(what, ": ", k, "=", value);
}

// "128..512"; an open end (the command line's KC=..512 or KC=128..) is left out.
std::string RangeText(const v1::KnobRange& r) {
  return absl::StrCat(r.lo() == INT64_MIN ? "" : absl::StrCat(r.lo()), "..",
                      r.hi() == INT64_MAX ? "" : absl::StrCat(r.hi()));
}

bool InRange(const v1::JobSpec& spec, const std::string& knob, int64_t v) {
  auto it = spec.range().find(knob);
  return it == spec.range().end() || (v >= it->second.lo() && v <= it->second.hi());
}

bool Excluded(const v1::JobSpec& spec, const std::string& knob, int64_t v) {
  auto it = spec.exclude().find(knob);
  if (it == spec.exclude().end()) return false;
  const auto& values = it->second.values();
  return std::find(values.begin(), values.end(), v) != values.end();
}

// The values of `knob`'s domain the spec leaves it.
std::vector<int64_t> Allowed(const v1::JobSpec& spec, const Knob& knob) {
  std::vector<int64_t> out;
  auto pin = spec.pin().find(knob.name);
  for (int64_t v : knob.values) {
    if (pin != spec.pin().end() && v != pin->second) continue;
    if (!Excluded(spec, knob.name, v) && InRange(spec, knob.name, v)) out.push_back(v);
  }
  return out;
}

// All the labels of the spec's constraints, for a refusal of their combination.
std::string AllLabels(const v1::JobSpec& spec, ConstraintNaming naming) {
  std::vector<std::string> labels;  // in knob order (protobuf maps iterate in no fixed order)
  for (const auto& [k, v] : std::map<std::string, int64_t>(spec.pin().begin(), spec.pin().end()))
    labels.push_back(Label(naming, "pin", k, absl::StrCat(v)));
  for (const auto& [k, v] :
       std::map<std::string, v1::KnobValues>(spec.exclude().begin(), spec.exclude().end()))
    labels.push_back(Label(naming, "exclude", k, absl::StrJoin(v.values(), ",")));
  for (const auto& [k, r] :
       std::map<std::string, v1::KnobRange>(spec.range().begin(), spec.range().end()))
    labels.push_back(Label(naming, "range", k, RangeText(r)));
  return absl::StrJoin(labels, naming == ConstraintNaming::kFlags ? " " : "; ");
}

enum class Found { kYes, kNo, kUnknown };

// Whether some configuration of `space` satisfies every rule: a depth-first search over the
// knobs in order that decides each rule as soon as the knobs it reads are set (rules read knobs
// with Config::at, which throws for one not set yet), so a broken combination is cut at the
// knob that completes it. kUnknown when the search would take long (the coordinator checks again
// when it binds the job to a chip).
struct SatisfySearch {
  explicit SatisfySearch(const KnobSpace& s)
      : space(s), decided(s.constraints().size(), -1), prunes(s.constraints().size(), 0) {
    // A rule that answers for a configuration with no knob set does not read them with
    // Config::at (it tests whether they are set, or reads none): it is judged on whole
    // configurations only.
    for (size_t i = 0; i < s.constraints().size(); ++i) {
      try {
        s.constraints()[i].holds(Config());
        decided[i] = kWholeOnly;
      } catch (const std::out_of_range&) {
      }
    }
  }

  Found Run() { return Visit(0); }

  Found Visit(size_t depth) {
    const auto& knobs = space.knobs();
    if (depth == knobs.size()) {
      // Whole: every rule again, so that a rule that reads knobs otherwise (find/count) and
      // held early cannot let a broken configuration through.
      bool ok = true;
      for (size_t i = 0; i < space.constraints().size(); ++i)
        if (!space.constraints()[i].holds(config)) ++prunes[i], ok = false;
      if (!ok) return Found::kNo;
      ++valid;
      return count_all ? Found::kNo : Found::kYes;
    }
    const Knob& knob = knobs[depth];
    const auto& rules = space.constraints();
    for (int64_t value : knob.values) {
      if (--budget < 0) return Found::kUnknown;
      config[knob.name] = value;
      bool ok = true;
      for (size_t i = 0; i < rules.size() && ok; ++i) {
        if (decided[i] >= 0) continue;
        try {
          if (rules[i].holds(config)) {
            decided[i] = static_cast<int>(depth);
          } else if (BrokenWhateverComesNext(rules[i], depth)) {
            ++prunes[i];
            ok = false;
          }
        } catch (const std::out_of_range&) {  // reads a knob not set yet
        }
      }
      const Found found = ok ? Visit(depth + 1) : Found::kNo;
      for (int& d : decided)
        if (d == static_cast<int>(depth)) d = -1;
      if (found != Found::kNo) return found;
    }
    config.erase(knob.name);
    return Found::kNo;
  }

  // A rule broken by the knobs set so far: confirmed on a few completions of the others (a rule
  // that reads knobs with Config::at is broken on them all; one that tests whether a knob is set
  // may not be, and is then left to the whole configuration).
  bool BrokenWhateverComesNext(const Constraint& rule, size_t depth) {
    const auto& knobs = space.knobs();
    for (int attempt = 0; attempt < 3; ++attempt) {
      Config whole = config;
      for (size_t k = depth + 1; k < knobs.size(); ++k) {
        if (knobs[k].values.empty()) return false;
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        whole[knobs[k].name] = knobs[k].values[(seed >> 33) % knobs[k].values.size()];
      }
      if (rule.holds(whole)) return false;
    }
    return true;
  }

  const KnobSpace& space;
  Config config;
  uint64_t seed = 0x9e3779b97f4a7c15ULL;
  static constexpr int kWholeOnly = 1 << 30;
  std::vector<int> decided;  // the depth at which each rule was found to hold, -1, kWholeOnly
  std::vector<int> prunes;   // how often each rule cut the search
  int64_t budget = 20000;    // values tried
  bool count_all = false;    // go on after a valid configuration, counting them
  uint64_t valid = 0;
};

}  // namespace

std::string DomainText(const std::vector<int64_t>& values, size_t max) {
  if (values.size() <= max) return absl::StrJoin(values, ", ");
  std::vector<int64_t> head(values.begin(), values.begin() + max);
  return absl::StrCat(absl::StrJoin(head, ", "), ", ... (", values.size(), " values)");
}

std::vector<ChipTraits> PlausibleChips(const std::string& chip,
                                       const std::vector<int64_t>& extra_cores) {
  std::vector<int> lanes = {8, 16, 4};
  if (absl::StrContains(chip, "avx512"))
    lanes = {16};
  else if (absl::StrContains(chip, "avx2"))
    lanes = {8};
  std::vector<ChipTraits> out;
  for (int vw : lanes) {
    ChipTraits base;
    base.vector_floats = vw;
    base.vector_registers = vw == 16 ? 32 : 16;
    out.push_back(base);
    ChipTraits mid = base;
    mid.cores = 8;
    out.push_back(mid);
    ChipTraits big = base;
    big.cores = 64;
    big.l2_bytes = 2 << 20;
    big.l3_bytes = 64 << 20;
    big.local_mem_bytes = 96 << 10;
    big.max_work_group_size = 1024;
    out.push_back(big);
    for (int64_t c : extra_cores) {
      if (c < 2 || c > 4096 || c == 8 || c == 64) continue;
      ChipTraits t = base;
      t.cores = static_cast<int>(c);
      out.push_back(t);
    }
  }
  return out;
}

std::vector<std::string> ConstrainedKnobs(const v1::JobSpec& spec) {
  std::set<std::string> names;
  for (const auto& [k, v] : spec.pin()) names.insert(k);
  for (const auto& [k, v] : spec.exclude()) names.insert(k);
  for (const auto& [k, v] : spec.range()) names.insert(k);
  return {names.begin(), names.end()};
}

absl::Status CheckKnobConstraints(const v1::JobSpec& spec, const v1::Workload& w,
                                  const KernelTemplate& tmpl, ConstraintNaming naming,
                                  bool skip_absent_knobs) {
  if (spec.pin().empty() && spec.exclude().empty() && spec.range().empty()) return absl::OkStatus();
  const std::string where = absl::StrCat(OpName(w.op()), " on ", Kind(spec.chip()));
  // A thread-count pin such as NT=6 is a value of a 6-core chip.
  // Only a few such chips, so that a request cannot make the check long (each chip's space is
  // searched).
  std::set<int64_t> candidates;
  for (const auto& [k, v] : spec.pin()) candidates.insert(v);
  for (const auto& [k, r] : spec.range()) candidates.insert(r.lo()), candidates.insert(r.hi());
  std::vector<int64_t> cores;
  for (int64_t c : candidates)
    if (c >= 2 && c <= 4096 && c != 8 && c != 64 && cores.size() < 4) cores.push_back(c);
  std::vector<KnobSpace> spaces;
  bool any_knobs = false;
  for (const ChipTraits& t : PlausibleChips(spec.chip(), cores)) {
    spaces.push_back(tmpl.Space(w, t));
    any_knobs |= !spaces.back().knobs().empty();
  }
  if (!any_knobs) return absl::OkStatus();  // e.g. replay: the space comes with the chip

  for (const std::string& name : ConstrainedKnobs(spec)) {
    std::set<int64_t> domain;
    std::set<std::string> all_knobs;
    bool found = false;
    for (const KnobSpace& s : spaces) {
      for (const Knob& k : s.knobs()) all_knobs.insert(k.name);
      if (const Knob* k = s.FindKnob(name)) {
        found = true;
        domain.insert(k->values.begin(), k->values.end());
      }
    }
    auto label = [&](const char* what) -> std::string {
      if (!strcmp(what, "pin")) return Label(naming, what, name, absl::StrCat(spec.pin().at(name)));
      if (!strcmp(what, "exclude"))
        return Label(naming, what, name, absl::StrJoin(spec.exclude().at(name).values(), ","));
      return Label(naming, what, name, RangeText(spec.range().at(name)));
    };
    const char* first = spec.pin().count(name)       ? "pin"
                        : spec.exclude().count(name) ? "exclude"
                                                     : "range";
    if (!found) {
      if (skip_absent_knobs) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(label(first), ": ", where, " has no knob ", ShortQuote(name),
                       " (knobs: ", absl::StrJoin(all_knobs, ", "), ")"));
    }
    const std::vector<int64_t> values(domain.begin(), domain.end());
    const std::string takes =
        absl::StrCat(ShortQuote(name), " takes ", DomainText(values), " (", where, ")");
    if (auto pin = spec.pin().find(name); pin != spec.pin().end()) {
      if (!domain.count(pin->second))
        return absl::InvalidArgumentError(absl::StrCat(label("pin"), ": ", takes));
      if (Excluded(spec, name, pin->second))
        return absl::InvalidArgumentError(
            absl::StrCat(label("pin"), " and ", label("exclude"), " contradict each other"));
      if (!InRange(spec, name, pin->second))
        return absl::InvalidArgumentError(
            absl::StrCat(label("pin"), " lies outside ", label("range")));
    }
    if (auto ex = spec.exclude().find(name); ex != spec.exclude().end()) {
      if (ex->second.values().empty())
        return absl::InvalidArgumentError(
            absl::StrCat(label("exclude"), ": expected at least one value"));
      for (int64_t v : ex->second.values())
        if (!domain.count(v))
          return absl::InvalidArgumentError(
              absl::StrCat(label("exclude"), ": ", v, " is not a value; ", takes));
    }
    if (auto r = spec.range().find(name); r != spec.range().end()) {
      if (r->second.lo() > r->second.hi())
        return absl::InvalidArgumentError(absl::StrCat(label("range"), ": LO must not exceed HI"));
      bool some = false;
      for (int64_t v : values) some |= v >= r->second.lo() && v <= r->second.hi();
      if (!some)
        return absl::InvalidArgumentError(
            absl::StrCat(label("range"), ": no value lies in ", RangeText(r->second), "; ", takes));
    }
    // Every value left out, on every chip: the knob would have no value.
    bool left = false;
    for (const KnobSpace& s : spaces)
      if (const Knob* k = s.FindKnob(name)) left |= !Allowed(spec, *k).empty();
    if (!left)
      return absl::InvalidArgumentError(
          absl::StrCat(label(first), ": leaves ", ShortQuote(name), " no value; ", takes));
  }

  // Together: some configuration of some chip must satisfy every rule. The rules that cut the
  // search short are the ones to name.
  std::map<std::string, int> blocking;
  int64_t budget = 50000;  // values tried, over all the chips
  for (const KnobSpace& s : spaces) {
    KnobSpace narrowed = s;
    if (!ApplyKnobConstraints(spec, /*skip_absent_knobs=*/true, &narrowed).ok()) continue;
    SatisfySearch search(narrowed);
    search.budget = budget;
    const Found found = search.Run();
    if (found != Found::kNo) return absl::OkStatus();  // or too large to tell here
    budget = search.budget;  // shared by the chips: the whole check stays short
    for (size_t i = 0; i < search.prunes.size(); ++i)
      if (search.prunes[i] > 0) blocking[narrowed.constraints()[i].rule] += search.prunes[i];
  }
  std::vector<std::pair<int, std::string>> ranked;
  for (const auto& [rule, n] : blocking) ranked.push_back({-n, rule});
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> rules;
  for (size_t i = 0; i < ranked.size() && i < 2; ++i) rules.push_back(ranked[i].second);
  return absl::InvalidArgumentError(
      absl::StrCat(AllLabels(spec, naming), ": no configuration of ", where, " satisfies them (",
                   rules.empty() ? "several rules" : absl::StrJoin(rules, "; "), ")"));
}

std::optional<uint64_t> CountValidConfigs(const KnobSpace& space, int64_t max_steps) {
  SatisfySearch search(space);
  search.count_all = true;
  search.budget = max_steps;
  if (search.Run() == Found::kUnknown) return std::nullopt;
  return search.valid;
}

absl::Status ApplyKnobConstraints(const v1::JobSpec& spec, bool skip_absent_knobs,
                                  KnobSpace* space) {
  for (const std::string& name : ConstrainedKnobs(spec))
    if (!skip_absent_knobs && !space->FindKnob(name))
      return absl::InvalidArgumentError(absl::StrCat("unknown knob ", ShortQuote(name)));
  KnobSpace narrowed;
  for (const Knob& k : space->knobs()) {
    std::vector<int64_t> values = Allowed(spec, k);
    if (values.empty()) {
      auto pin = spec.pin().find(k.name);
      if (pin != spec.pin().end() &&
          std::find(k.values.begin(), k.values.end(), pin->second) == k.values.end())
        return absl::InvalidArgumentError(absl::StrCat("pin: ", k.name, "=", pin->second,
                                                       " is not in its domain {",
                                                       absl::StrJoin(k.values, ","), "}"));
      return absl::InvalidArgumentError(absl::StrCat("pin/exclude/range leave ", k.name,
                                                     " no value of its domain {",
                                                     absl::StrJoin(k.values, ","), "}"));
    }
    narrowed.AddKnob(k.name, std::move(values), k.help, k.absent_means);
  }
  for (const Constraint& c : space->constraints()) narrowed.AddConstraint(c.rule, c.holds);
  *space = std::move(narrowed);
  return absl::OkStatus();
}

bool MeetsKnobConstraints(const v1::JobSpec& spec, const Config& config) {
  for (const auto& [knob, value] : config) {
    auto pin = spec.pin().find(knob);
    if (pin != spec.pin().end() && pin->second != value) return false;
    if (Excluded(spec, knob, value) || !InRange(spec, knob, value)) return false;
  }
  return true;
}

}  // namespace kiln::codegen
