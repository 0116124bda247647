#include "hardware/replay/replay_set.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/workload.h"

namespace kiln::hardware {
namespace {

std::string IndexKey(const std::vector<int32_t>& index) {
  return std::string(reinterpret_cast<const char*>(index.data()), index.size() * sizeof(int32_t));
}

// The packed value indices of `config`, or "" when a knob is missing or off its domain.
std::string KeyOf(const std::vector<ReplayKnob>& knobs, const codegen::Config& config) {
  if (config.size() != knobs.size()) return "";
  std::vector<int32_t> index(knobs.size());
  for (size_t k = 0; k < knobs.size(); ++k) {
    auto it = config.find(knobs[k].name);
    if (it == config.end()) return "";
    const auto& vals = knobs[k].values;
    auto pos = std::find(vals.begin(), vals.end(), it->second);
    if (pos == vals.end()) return "";
    index[k] = static_cast<int32_t>(pos - vals.begin());
  }
  return IndexKey(index);
}

}  // namespace

v1::MeasurementStatus StatusOfFailure(absl::string_view what) {
  if (what == "CompilationFailedConfig") return v1::COMPILE_ERROR;
  if (what == "InvalidConfig") return v1::UNSUPPORTED;
  if (what == "RuntimeFailedConfig") return v1::CRASHED;
  if (what == "WRONG_RESULT" || what == "WrongResult") return v1::WRONG_RESULT;
  if (what == "TIMEOUT" || what == "TimeoutConfig") return v1::TIMEOUT;
  return v1::CRASHED;
}

absl::Status ReplaySet::Finish() {
  if (knobs.empty()) return absl::InvalidArgumentError("the set has no knobs");
  if (entries.empty()) return absl::InvalidArgumentError("the set has no recorded configurations");
  by_key_ = std::make_shared<Index>();
  by_key_->reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const ReplayEntry& e = entries[i];
    if (e.index.size() != knobs.size())
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, " has ", e.index.size(),
                                                     " knob values, expected ", knobs.size()));
    for (size_t k = 0; k < knobs.size(); ++k)
      if (e.index[k] < 0 || e.index[k] >= static_cast<int32_t>(knobs[k].values.size()))
        return absl::InvalidArgumentError(
            absl::StrCat("entry ", i, ": knob ", knobs[k].name, " value out of its domain"));
    if (!by_key_->emplace(IndexKey(e.index), static_cast<int>(i)).second)
      return absl::InvalidArgumentError(
          absl::StrCat("configuration ", codegen::ConfigKey(ConfigOf(e)), " is recorded twice"));
  }
  return absl::OkStatus();
}

codegen::Config ReplaySet::ConfigOf(const ReplayEntry& e) const {
  codegen::Config c;
  for (size_t k = 0; k < knobs.size(); ++k) c[knobs[k].name] = knobs[k].values[e.index[k]];
  return c;
}

std::vector<codegen::Config> ReplaySet::Configs() const {
  std::vector<codegen::Config> out;
  out.reserve(entries.size());
  for (const auto& e : entries) out.push_back(ConfigOf(e));
  return out;
}

const ReplayEntry* ReplaySet::Find(const codegen::Config& config) const {
  auto it = by_key_->find(KeyOf(knobs, config));
  return it == by_key_->end() ? nullptr : &entries[it->second];
}

codegen::KnobSpace ReplaySet::Space() const {
  codegen::KnobSpace space;
  for (const auto& k : knobs)
    space.AddKnob(k.name, k.values,
                  absl::StrCat("recorded values: ", absl::StrJoin(k.labels, ",")));
  // The space shares the index, so it stays valid after the set is gone.
  std::shared_ptr<const Index> index = by_key_;
  space.AddConstraint(absl::StrCat("recorded in the replay set ", name),
                      [index, knobs = knobs](const codegen::Config& c) {
                        return index->count(KeyOf(knobs, c)) > 0;
                      });
  return space;
}

v1::Measurement ReplaySet::MeasurementOf(const ReplayEntry& e) const {
  v1::Measurement m;
  m.set_status(e.status);
  if (e.status != v1::OK) {
    m.set_message(absl::StrCat("recorded as ", e.message.empty() ? "failed" : e.message));
    return m;
  }
  m.set_median_us(e.median_us);
  std::vector<double> s = e.samples_us;
  if (s.empty()) s.push_back(e.median_us);
  std::vector<double> sorted = s;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  // The coordinator refuses an OK figure that is not its samples' median (within 1%). A Kernel
  // Tuner cache's "time" is their mean (or another statistic), so where it is not their median the
  // recorded figure is reported as the only sample; p10, p90 and cv still describe all of them.
  if (std::abs(e.median_us - median) <= 0.01 * median)
    for (double x : s) m.add_samples_us(x);
  else
    m.add_samples_us(e.median_us);
  s = std::move(sorted);
  m.set_p10_us(s[s.size() / 10]);
  m.set_p90_us(s[(s.size() * 9) / 10]);
  double mean = 0, var = 0;
  for (double x : s) mean += x / s.size();
  for (double x : s) var += (x - mean) * (x - mean) / s.size();
  m.set_cv(mean > 0 ? std::sqrt(var) / mean : 0);
  m.set_cache_mode("replay");
  m.set_message(absl::StrCat("replayed from ", name));
  return m;
}

double ReplaySet::BestUs() const {
  double best = INFINITY;
  for (const auto& e : entries)
    if (e.status == v1::OK) best = std::min(best, e.median_us);
  return best;
}

int ReplaySet::CountWithin(double fraction) const {
  double limit = BestUs() / fraction;
  int n = 0;
  for (const auto& e : entries) n += e.status == v1::OK && e.median_us <= limit;
  return n;
}

v1::Workload ReplaySet::Workload() const {
  v1::Workload w;
  std::string k = kernel;
  std::transform(k.begin(), k.end(), k.begin(), ::tolower);
  if (k.find("gemm") != std::string::npos) w.set_op(v1::GEMM);
  for (size_t i = 0; i < problem_size.size(); ++i)
    (*w.mutable_dims())[absl::StrCat("p", i)] = problem_size[i];
  w.set_dtype(v1::FP32);
  return w;
}

v1::ChipFingerprint ReplaySet::Chip() const {
  v1::ChipFingerprint c;
  c.set_kind("replay");
  c.set_vendor("recorded");
  c.set_model(device.empty() ? name : device);
  // A chip-type label is what users pass to --chip, which takes lower-case letters, digits and
  // - _ . : only: a file named gemm_RTX_3090.json serves replay-gemm_rtx_3090.
  std::string label = absl::StrCat("replay-", name);
  for (char& ch : label) {
    ch = absl::ascii_tolower(static_cast<unsigned char>(ch));
    if (!(absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-' || ch == '_' ||
          ch == '.' || ch == ':'))
      ch = '-';
  }
  c.set_chip_type(label);
  return c;
}

absl::StatusOr<std::shared_ptr<const ReplaySet>> LoadReplaySet(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat("replay set ", path, ": cannot open the file"));
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(
        absl::StrCat("replay set ", path, ": not a regular file (a FIFO, device or directory)"));
  if (static_cast<uint64_t>(st.st_size) > kMaxReplayFileBytes)
    return absl::InvalidArgumentError(absl::StrCat("replay set ", path, ": ", st.st_size,
                                                   " bytes, more than the ", kMaxReplayFileBytes,
                                                   " a replay file may have"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("replay set ", path, ": cannot open the file"));
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(st.st_size))  // it grew since stat: read no more
    return absl::InvalidArgumentError(
        absl::StrCat("replay set ", path, ": changed while being read"));
  std::string name = path.substr(path.find_last_of('/') + 1);
  for (const char* ext : {".jsonl", ".json"})
    if (name.size() > strlen(ext) && name.compare(name.size() - strlen(ext), strlen(ext), ext) == 0)
      name.resize(name.size() - strlen(ext));
  auto set = ParseReplaySet(text, name);
  if (!set.ok())
    return absl::Status(set.status().code(),
                        absl::StrCat("replay set ", path, ": ", set.status().message()));
  return set;
}

}  // namespace kiln::hardware
