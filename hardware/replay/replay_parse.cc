// Parsers of recorded measurement sets: Kernel Tuner cache files and Kiln record exports.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/text.h"
#include "hardware/replay/replay_set.h"

namespace kiln::hardware {
namespace {

using nlohmann::json;

// How deep brackets nest in `text`, outside strings. Parsing is iterative, but printing a
// value (records are re-read through protobuf's JSON parser) recurses, so a deeply nested file
// is refused before either.
int NestingDepth(absl::string_view text, int stop_at) {
  int depth = 0, most = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
      if (most > stop_at) return most;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return most;
}

// Python's str() of a value, as Kernel Tuner writes it into cache keys.
std::string PyStr(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  return v.dump();
}

// doc[key], or null when absent (operator[] on a const json must not see a missing key).
const json& Get(const json& doc, const char* key) {
  static const json kNull;
  auto it = doc.find(key);
  return it == doc.end() ? kNull : *it;
}

bool SameValue(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

// Integer domains keep their values (booleans become 0/1); any other domain uses positions.
absl::StatusOr<ReplayKnob> KnobFromDomain(const std::string& name, const json& domain) {
  if (!domain.is_array() || domain.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("tune_params.", name, ": expected a non-empty list of values"));
  ReplayKnob k;
  k.name = name;
  bool integral = true;
  for (const auto& v : domain) {
    k.labels.push_back(PyStr(v));
    if (v.is_boolean())
      k.values.push_back(v.get<bool>());
    else if (v.is_number_integer())
      k.values.push_back(v.get<int64_t>());
    else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
             std::abs(v.get<double>()) < 9e15)
      k.values.push_back(static_cast<int64_t>(v.get<double>()));
    else
      integral = false;
  }
  std::set<int64_t> distinct(k.values.begin(), k.values.end());
  if (!integral || distinct.size() != k.values.size()) {
    k.values.clear();
    for (size_t i = 0; i < domain.size(); ++i) k.values.push_back(static_cast<int64_t>(i));
  }
  return k;
}

absl::Status ParseKernelTuner(const json& doc, ReplaySet& set) {
  const json& keys = Get(doc, "tune_params_keys");
  const json& params = Get(doc, "tune_params");
  if (!keys.is_array() || keys.empty())
    return absl::InvalidArgumentError("tune_params_keys: expected a non-empty list of knob names");
  if (!params.is_object()) return absl::InvalidArgumentError("tune_params: expected an object");
  if (!Get(doc, "cache").is_object())
    return absl::InvalidArgumentError("cache: expected an object");
  if (doc.contains("kernel_name") && doc["kernel_name"].is_string())
    set.kernel = doc["kernel_name"].get<std::string>();
  if (doc.contains("device_name") && doc["device_name"].is_string())
    set.device = doc["device_name"].get<std::string>();
  if (doc.contains("problem_size")) {
    const json& p = doc["problem_size"];
    for (const auto& v : p.is_array() ? p : json::array({p})) {
      // A float converted to int64 outside its range is undefined: integers only, in range.
      if (!v.is_number()) continue;
      if (!v.is_number_integer() || v.get<double>() < 0 || v.get<double>() > 1e15)
        return absl::InvalidArgumentError(
            absl::StrCat("problem_size: expected non-negative integers up to 1e15, got ",
                         v.dump().substr(0, 40)));
      set.problem_size.push_back(v.get<int64_t>());
    }
  }
  std::vector<const json*> domains;
  for (const auto& key : keys) {
    if (!key.is_string()) return absl::InvalidArgumentError("tune_params_keys: names must be text");
    std::string name = key.get<std::string>();
    if (!params.contains(name))
      return absl::InvalidArgumentError(
          absl::StrCat("tune_params has no domain for ", ShortQuote(name)));
    auto knob = KnobFromDomain(name, params[name]);
    if (!knob.ok()) return knob.status();
    set.knobs.push_back(std::move(*knob));
    domains.push_back(&params[name]);
  }
  for (const auto& [key, rec] : doc["cache"].items()) {
    if (!rec.is_object())
      return absl::InvalidArgumentError(
          absl::StrCat("cache[\"", ShortQuote(key), "\"]: expected an object"));
    ReplayEntry e;
    std::vector<std::string> parts = absl::StrSplit(key, ',');
    for (size_t k = 0; k < set.knobs.size(); ++k) {
      const json& dom = *domains[k];
      int found = -1;
      for (size_t i = 0; i < dom.size() && found < 0; ++i) {
        if (rec.contains(set.knobs[k].name)
                ? SameValue(rec[set.knobs[k].name], dom[i])
                : (parts.size() == set.knobs.size() && parts[k] == set.knobs[k].labels[i]))
          found = static_cast<int>(i);
      }
      if (found < 0)
        return absl::InvalidArgumentError(
            absl::StrCat("cache[\"", ShortQuote(key), "\"]: value of ",
                         ShortQuote(set.knobs[k].name), " is not in its domain"));
      e.index.push_back(found);
    }
    const char* field = rec.contains("time") ? "time" : nullptr;
    if (!field && doc.contains("objective") && doc["objective"].is_string() &&
        rec.contains(doc["objective"].get<std::string>()))
      return absl::InvalidArgumentError(absl::StrCat(
          "cache[\"", ShortQuote(key), "\"]: has no \"time\"; only time objectives are replayed"));
    if (!field)
      return absl::InvalidArgumentError(
          absl::StrCat("cache[\"", ShortQuote(key), "\"]: has no \"time\""));
    const json& t = rec[field];
    if (t.is_string()) {
      e.message = t.get<std::string>();
      e.status = StatusOfFailure(e.message);
    } else if (t.is_number() && std::isfinite(t.get<double>()) && t.get<double>() > 0 &&
               t.get<double>() < 1e19) {
      e.median_us = t.get<double>() * 1000;
      if (rec.contains("times") && rec["times"].is_array())
        for (const auto& s : rec["times"])
          if (s.is_number() && std::isfinite(s.get<double>()) && s.get<double>() > 0)
            e.samples_us.push_back(s.get<double>() * 1000);
    } else if (t.is_number() && t.get<double>() >= 1e19) {  // older files: 1e20 = failed
      e.message = "InvalidConfig";
      e.status = v1::UNSUPPORTED;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache[\"", ShortQuote(key), "\"].time: expected a positive number or a failure name"));
    }
    set.entries.push_back(std::move(e));
  }
  return absl::OkStatus();
}

// Kiln records: configurations and OK medians; domains are the values seen, sorted.
absl::Status ParseRecords(const std::vector<v1::TuningRecord>& records, ReplaySet& set) {
  if (records.empty()) return absl::InvalidArgumentError("no tuning records");
  std::map<std::string, std::set<int64_t>> domains;
  for (const auto& r : records)
    for (const auto& [k, v] : r.config().knobs()) domains[k].insert(v);
  for (const auto& [name, values] : domains) {
    ReplayKnob k{name, std::vector<int64_t>(values.begin(), values.end()), {}};
    for (int64_t v : k.values) k.labels.push_back(std::to_string(v));
    set.knobs.push_back(std::move(k));
  }
  const v1::TuningRecord& first = records.front();
  set.kernel = v1::OpKind_Name(first.workload().op());
  set.device = first.chip().model().empty() ? first.chip_type() : first.chip().model();
  std::map<std::vector<int32_t>, size_t> seen;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    if (r.workload_key() != first.workload_key() || r.chip_type() != first.chip_type())
      return absl::InvalidArgumentError(absl::StrCat(
          "record ", i, " is for ", r.workload_key(), " on ", r.chip_type(), ", not ",
          first.workload_key(), " on ", first.chip_type(), " (one workload and chip per set)"));
    ReplayEntry e;
    for (const auto& k : set.knobs) {
      auto it = r.config().knobs().find(k.name);
      if (it == r.config().knobs().end())
        return absl::InvalidArgumentError(absl::StrCat("record ", i, " has no knob ", k.name));
      e.index.push_back(std::lower_bound(k.values.begin(), k.values.end(), it->second) -
                        k.values.begin());
    }
    const v1::Measurement& m = r.measurement();
    e.status = m.status();
    if (m.status() == v1::OK && !(m.median_us() > 0 && std::isfinite(m.median_us())))
      return absl::InvalidArgumentError(
          absl::StrCat("record ", i, ": OK without a finite positive median"));
    for (double sample : m.samples_us())
      if (!std::isfinite(sample))
        return absl::InvalidArgumentError(absl::StrCat("record ", i, ": a sample is not finite"));
    e.median_us = m.median_us();
    e.samples_us.assign(m.samples_us().begin(), m.samples_us().end());
    e.message = m.message();
    auto [it, fresh] = seen.emplace(e.index, set.entries.size());
    if (fresh) {
      set.entries.push_back(std::move(e));
    } else if (e.status == v1::OK && (set.entries[it->second].status != v1::OK ||
                                      e.median_us < set.entries[it->second].median_us)) {
      set.entries[it->second] = std::move(e);  // measured again: keep the best OK figure
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TuningRecord> RecordFromJson(absl::string_view text, size_t line) {
  v1::TuningRecord r;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  auto s = google::protobuf::util::JsonStringToMessage(std::string(text), &r, opts);
  if (!s.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("record on line ", line, ": ", std::string(s.message())));
  return r;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ReplaySet>> ParseReplaySet(absl::string_view text,
                                                                const std::string& name) {
  auto set = std::make_shared<ReplaySet>();
  set->name = name;
  absl::string_view body = absl::StripAsciiWhitespace(text);
  if (body.empty()) return absl::InvalidArgumentError("empty file");
  if (NestingDepth(body, kMaxReplayJsonDepth) > kMaxReplayJsonDepth)
    return absl::InvalidArgumentError(
        absl::StrCat("JSON nested deeper than ", kMaxReplayJsonDepth, " levels"));
  std::vector<v1::TuningRecord> records;
  json doc = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    // Not one JSON document: JSON Lines of records, or a damaged file.
    size_t line = 0;
    for (absl::string_view l : absl::StrSplit(body, '\n')) {
      ++line;
      l = absl::StripAsciiWhitespace(l);
      if (l.empty()) continue;
      if (l.front() != '{' || json::parse(l.begin(), l.end(), nullptr, false).is_discarded()) {
        try {
          json unused = json::parse(body.begin(), body.end());
          (void)unused;
        } catch (const json::exception& e) {  // out_of_range too: a number like 1e555
          return absl::InvalidArgumentError(
              absl::StrCat("not valid JSON (truncated or damaged?): ", e.what()));
        }
        return absl::InvalidArgumentError("not valid JSON");
      }
      auto r = RecordFromJson(l, line);
      if (!r.ok()) return r.status();
      records.push_back(std::move(*r));
    }
  } else if (doc.is_object() && doc.contains("cache")) {
    try {
      auto s = ParseKernelTuner(doc, *set);
      if (!s.ok()) return s;
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected Kernel Tuner content: ", e.what()));
    }
  } else if (doc.is_object() && doc.contains("records") && doc["records"].is_array()) {
    size_t i = 0;
    for (const auto& r : doc["records"]) {
      auto rec = RecordFromJson(r.dump(), ++i);
      if (!rec.ok()) return rec.status();
      records.push_back(std::move(*rec));
    }
  } else if (doc.is_object() && doc.contains("workload_key")) {
    auto r = RecordFromJson(body, 1);
    if (!r.ok()) return r.status();
    records.push_back(std::move(*r));
  } else {
    return absl::InvalidArgumentError(
        "neither a Kernel Tuner cache file (no \"cache\") nor Kiln records (no \"records\")");
  }
  if (!records.empty()) {
    auto s = ParseRecords(records, *set);
    if (!s.ok()) return s;
  }
  auto s = set->Finish();
  if (!s.ok()) return s;
  return std::shared_ptr<const ReplaySet>(std::move(set));
}

absl::StatusOr<std::vector<std::shared_ptr<const ReplaySet>>> SetsFromRecords(
    const std::vector<v1::TuningRecord>& records, size_t min_records) {
  std::map<std::pair<std::string, std::string>, std::vector<v1::TuningRecord>> groups;
  for (const auto& r : records) groups[{r.workload_key(), r.chip_type()}].push_back(r);
  std::vector<std::shared_ptr<const ReplaySet>> out;
  for (auto& [key, group] : groups) {
    if (group.size() < min_records) continue;
    auto set = std::make_shared<ReplaySet>();
    set->name = absl::StrCat(key.first, "@", key.second);
    auto s = ParseRecords(group, *set);
    if (s.ok()) s = set->Finish();
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(set->name, ": ", s.message()));
    out.push_back(std::move(set));
  }
  return out;
}

}  // namespace kiln::hardware
