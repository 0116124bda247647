#include "cli/results.h"

#include <algorithm>

#include "cli/format.h"
#include "cli/json_writer.h"
#include "cli/table.h"
#include "codegen/workload.h"

namespace kiln::cli {
namespace {

// The fastest usable trial of `kind` for task `index`, or null.
const v1::Trial* BestTrial(const v1::GetResultsResponse& results, int index, v1::TrialKind kind) {
  const v1::Trial* best = nullptr;
  for (const v1::Trial& trial : results.trials()) {
    if (trial.task_index() != index || trial.kind() != kind || !trial.has_measurement() ||
        trial.measurement().status() != v1::OK || !IsUsable(trial.measurement()))
      continue;
    if (!best || trial.measurement().median_us() < best->measurement().median_us()) best = &trial;
  }
  return best;
}

void WriteSamples(JsonWriter& w, const v1::Measurement& m) {
  w.Key("samples_us").BeginArray();
  for (double s : m.samples_us()) w.Number(s);
  w.EndArray();
}

// "config": {knob: value, ...} in knob order.
void WriteConfig(JsonWriter& w, const v1::Config& config) {
  std::vector<std::pair<std::string, int64_t>> knobs(config.knobs().begin(), config.knobs().end());
  std::sort(knobs.begin(), knobs.end());
  w.Key("config").BeginObject();
  for (const auto& [name, value] : knobs) w.Key(name).Int(value);
  w.EndObject();
}

bool IsModelResult(const v1::Job& job) {
  return !job.spec().model().empty() || !job.spec().hf_config_json().empty();
}

// The tokens/s lines under a model job's table: estimate, measured step, LibTorch's step.
std::string TokensPerSecondText(const v1::Job& job) {
  const v1::StepResult& t = job.tokens_per_second();
  auto tps = [](double v) { return v > 0 ? FormatFixed(v, 2) + " tokens/s" : std::string("-"); };
  std::string out =
      "\ntokens/s  estimated " + tps(t.estimated()) + "  measured " + tps(t.measured()) + "  " +
      (t.baseline_name().empty() ? std::string("baseline") : t.baseline_name()) +
      (t.baseline_dtype().empty() ? "" : " " + t.baseline_dtype()) +
      (t.baseline_threads() > 0 ? " " + std::to_string(t.baseline_threads()) + "t" : "") + " " +
      tps(t.baseline_measured());
  if (t.measured() > 0 && t.baseline_measured() > 0) {
    const double r = t.measured() / t.baseline_measured();
    out += "  (" + FormatFixed(r, 2) + "x" + (r < 1 ? ", SLOWER end to end" : "") + ")";
  }
  out += "\n";
  if (t.bound() > 0 && t.measured() > 0)
    out += "bound     " + tps(t.bound()) + " at " + FormatFixed(t.read_gbytes_per_s(), 1) +
           " GB/s read next to the step (" + FormatFixed(t.bytes_per_token() / 1e9, 3) +
           " GB a token: weights, KV cache or state): measured is " +
           FormatFixed(100 * t.bound_fraction(), 0) + "% of it" +
           (t.baseline_bound_fraction() > 0
                ? ", the baseline " + FormatFixed(100 * t.baseline_bound_fraction(), 0) + "%"
                : "") +
           "\n";
  if (!t.note().empty()) out += "step: " + t.note() + "\n";
  if (t.estimated() > 0 && t.measured() > 0 && t.measured() < 0.8 * t.estimated()) {
    // Above the bound, the estimate is what is off: its operators read faster than memory did.
    if (t.bound() > 0 && t.estimated() > t.bound())
      out +=
          "note: the estimate is above the bound: the operators, timed one at a time at other "
          "moments, read memory faster than the sweeps next to the step did (see GB/s above)\n";
    else
      out += "note: the measured step is well below the estimate from per-operator timings\n";
  }
  return out;
}

// One line on a task's final rounds: how many, and each finalist's score, the best first.
std::string FinalsText(const std::vector<v1::Finalist>& finalists) {
  std::string out = "  final rounds: " + std::to_string(finalists.size()) +
                    " configurations timed in turns, " +
                    std::to_string(finalists.front().round_median_us_size()) +
                    " rounds; time over each round's fastest (median):";
  for (size_t i = 0; i < finalists.size(); ++i) {
    const v1::Finalist& f = finalists[i];
    out += (i ? ", " : " ") + (f.failed() ? std::string("failed") : FormatFixed(f.score(), 3)) +
           (i == 0 && !f.failed() ? " (best)" : "");
  }
  return out + "\n";
}

// Refusals shown: a few per task in the table and the latest in the JSON, with their messages
// cut (a compiler's errors can run to pages, and a job can refuse hundreds of trials).
constexpr size_t kRefusedTableLines = 3;
constexpr size_t kRefusedJsonTrials = 20;
constexpr size_t kTableMessageChars = 160;
constexpr size_t kJsonMessageChars = 500;

// `text` cut to at most `max` bytes on a UTF-8 character boundary, "..." marking the cut.
std::string Shorten(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t n = max > 3 ? max - 3 : 0;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "...";
}

// The refused trials of a task: each status's count, then the latest few, one line each.
std::string RefusedText(const TaskSummary& t, bool single_task) {
  std::string out = (single_task ? std::string("refused: ") : "refused (" + t.workload + "): ") +
                    std::to_string(t.refused.size()) + " trials (";
  bool first = true;
  for (const auto& [status, n] : t.refused_by_status) {
    out += (first ? "" : ", ") + status + " " + std::to_string(n);
    first = false;
  }
  const size_t shown = std::min(t.refused.size(), kRefusedTableLines);
  out += shown < t.refused.size() ? "); the latest " + std::to_string(shown) + ":\n" : "):\n";
  for (size_t i = t.refused.size() - shown; i < t.refused.size(); ++i) {
    const RefusedTrial& r = t.refused[i];
    std::string config = ConfigText(r.config);
    std::string why = r.message.substr(0, r.message.find('\n'));
    out += "  " + r.status + (r.kind == v1::TUNE ? "" : " (" + v1::TrialKind_Name(r.kind) + ")") +
           (config.empty() ? "" : " " + config) + ": " +
           (why.empty() ? "(no message)" : Shorten(why, kTableMessageChars)) + "\n";
  }
  return out;
}

}  // namespace

std::vector<TaskSummary> SummarizeTasks(const v1::GetResultsResponse& results) {
  std::vector<TaskSummary> out;
  const v1::Job& job = results.job();
  for (int i = 0; i < job.tasks_size(); ++i) {
    const v1::TaskResult& task = job.tasks(i);
    TaskSummary s;
    s.workload =
        task.workload_key().empty() ? codegen::WorkloadKey(task.workload()) : task.workload_key();
    s.count = std::max(task.count(), 1);
    s.ok = task.trials_ok();
    s.failed = task.trials_failed();
    s.budget = task.trials_budget();
    if (task.has_best() && IsUsable(task.best())) {
      s.best = task.best();
      s.best_config = task.best_config();
    } else if (const v1::Trial* t = BestTrial(results, i, v1::TUNE)) {
      s.best = t->measurement();
      s.best_config = t->config();
    }
    s.baseline_name = task.baseline_name();
    if (task.has_baseline() && IsUsable(task.baseline())) {
      s.baseline = task.baseline();
    } else if (const v1::Trial* t = BestTrial(results, i, v1::BASELINE)) {
      s.baseline = t->measurement();
    }
    if (s.baseline && s.baseline_name.empty()) s.baseline_name = "baseline";
    if (s.baseline) {  // the fastest route's thread count (the baseline is that route)
      const v1::BaselineRoute* fastest = nullptr;
      for (const v1::BaselineRoute& r : s.baseline->baseline_routes())
        if (r.status() == v1::OK && (!fastest || r.median_us() < fastest->median_us()))
          fastest = &r;
      if (fastest) s.baseline_threads = fastest->threads();
    }
    if (s.best && s.baseline) s.speedup = s.baseline->median_us() / s.best->median_us();
    s.finalists.assign(task.finalists().begin(), task.finalists().end());
    for (const v1::Trial& trial : results.trials()) {
      const v1::Measurement& m = trial.measurement();
      const bool demoted = trial.kind() == v1::REMEASURE && m.status() == v1::OK && m.demoted();
      if (trial.task_index() != i || trial.kind() == v1::STEP || !trial.has_measurement() ||
          m.status() == v1::STATUS_UNSPECIFIED || (m.status() == v1::OK && !demoted))
        continue;
      RefusedTrial r;
      r.config = trial.config();
      r.kind = trial.kind();
      r.status = demoted ? "DEMOTED" : v1::MeasurementStatus_Name(m.status());
      r.message = m.message();
      s.refused_by_status[r.status]++;
      s.refused.push_back(std::move(r));
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string FormatResultsTable(const v1::GetResultsResponse& results) {
  const v1::Job& job = results.job();
  std::string out = "job " + job.id() + "  " + v1::JobState_Name(job.state()) + "  chip " +
                    (job.chip_type().empty() ? "-" : job.chip_type()) + "\n";
  if (!job.message().empty()) out += job.message() + "\n";
  std::vector<TaskSummary> tasks = SummarizeTasks(results);
  if (tasks.empty()) return out + "no tasks\n";
  std::vector<Row> rows;
  const bool model = IsModelResult(job);
  double step_us = 0;
  for (const TaskSummary& t : tasks) step_us += t.best ? t.count * t.best->median_us() : 0;
  for (const TaskSummary& t : tasks) {
    rows.push_back(
        {t.workload, std::to_string(t.count), std::to_string(t.ok) + "/" + std::to_string(t.failed),
         t.best ? FormatMicros(t.best->median_us()) : "-",
         t.best ? FormatFixed(t.best->gflops(), 1) : "-",
         t.best ? FormatFixed(t.best->gbytes_per_s(), 1) : "-",
         t.baseline
             ? t.baseline_name +
                   (t.baseline_threads > 0 ? "/" + std::to_string(t.baseline_threads) + "t" : "") +
                   " " + FormatMicros(t.baseline->median_us())
             : "-",
         t.speedup ? FormatFixed(*t.speedup, 2) + "x" : "-"});
    if (model)
      rows.back().push_back(t.best && step_us > 0
                                ? FormatFixed(100 * t.count * t.best->median_us() / step_us, 1) +
                                      "%"
                                : "-");
  }
  out += "\n";
  std::vector<std::string> header = {"WORKLOAD", "COUNT", "OK/FAILED",     "BEST (µs)",
                                     "GFLOP/s",  "GB/s",  "BASELINE (µs)", "SPEEDUP"};
  if (model) header.push_back("SHARE");
  out += FormatTable(header, rows);
  if (model) out += TokensPerSecondText(job);
  for (const TaskSummary& t : tasks) {
    if (!t.best) continue;
    std::string config = ConfigText(t.best_config);
    out +=
        (tasks.size() == 1 ? std::string("best config: ") : "best config (" + t.workload + "): ") +
        (config.empty() ? "-" : config) + "\n";
    if (!t.finalists.empty()) out += FinalsText(t.finalists);
  }
  for (const TaskSummary& t : tasks)
    if (!t.refused.empty()) out += RefusedText(t, tasks.size() == 1);
  return out;
}

std::string ResultsJson(const v1::GetResultsResponse& results, const v1::ChipFingerprint* chip) {
  const v1::Job& job = results.job();
  JsonWriter w;
  w.BeginObject();
  w.Key("job_id").String(job.id());
  w.Key("state").String(v1::JobState_Name(job.state()));
  w.Key("chip_type").String(job.chip_type());
  w.Key("message").String(job.message());
  w.Key("tasks").BeginArray();
  for (const TaskSummary& t : SummarizeTasks(results)) {
    w.BeginObject();
    w.Key("workload").String(t.workload);
    w.Key("count").Int(t.count);
    w.Key("trials").BeginObject();
    w.Key("ok").Int(t.ok).Key("failed").Int(t.failed).Key("budget").Int(t.budget);
    w.EndObject();
    w.Key("best");
    if (t.best) {
      const v1::Measurement& m = *t.best;
      w.BeginObject();
      WriteConfig(w, t.best_config);
      w.Key("median_us").Number(m.median_us()).Key("p10_us").Number(m.p10_us());
      w.Key("p90_us").Number(m.p90_us()).Key("cv").Number(m.cv());
      w.Key("gflops").Number(m.gflops()).Key("gbytes_per_s").Number(m.gbytes_per_s());
      w.Key("max_error").Number(m.max_error());
      WriteSamples(w, m);
      w.EndObject();
    } else {
      w.Null();
    }
    w.Key("baseline");
    if (t.baseline) {
      const v1::Measurement& m = *t.baseline;
      w.BeginObject().Key("name").String(t.baseline_name);
      w.Key("median_us").Number(m.median_us()).Key("gflops").Number(m.gflops());
      w.Key("gbytes_per_s").Number(m.gbytes_per_s());
      w.Key("threads").Int(t.baseline_threads);
      if (!m.message().empty()) w.Key("message").String(Shorten(m.message(), kJsonMessageChars));
      WriteSamples(w, m);
      w.EndObject();
    } else {
      w.Null();
    }
    // Every route timed (library call, layout, thread count); "baseline" is the fastest.
    w.Key("baselines").BeginArray();
    if (t.baseline)
      for (const v1::BaselineRoute& r : t.baseline->baseline_routes()) {
        w.BeginObject().Key("name").String(r.name()).Key("threads").Int(r.threads());
        w.Key("dtype").String(r.dtype()).Key("status").String(
            v1::MeasurementStatus_Name(r.status()));
        w.Key("median_us");
        r.status() == v1::OK ? w.Number(r.median_us()) : w.Null();
        w.Key("prepack_us").Number(r.prepack_us());
        if (!r.message().empty()) w.Key("message").String(Shorten(r.message(), kJsonMessageChars));
        w.Key("samples_us").BeginArray();
        for (double us : r.samples_us()) w.Number(us);
        w.EndArray().EndObject();
      }
    w.EndArray();
    w.Key("speedup_vs_baseline");
    t.speedup ? w.Number(*t.speedup) : w.Null();
    w.Key("finalists").BeginArray();  // the final rounds, the best first
    for (const v1::Finalist& f : t.finalists) {
      w.BeginObject();
      WriteConfig(w, f.config());
      w.Key("score").Number(f.score()).Key("failed").Bool(f.failed());
      w.Key("round_median_us").BeginArray();
      for (double us : f.round_median_us()) w.Number(us);
      w.EndArray().EndObject();
    }
    w.EndArray();
    // The latest refused trials with why, and how many earlier ones are left out.
    const size_t from =
        t.refused.size() > kRefusedJsonTrials ? t.refused.size() - kRefusedJsonTrials : 0;
    w.Key("failed_trials").BeginArray();
    for (size_t k = from; k < t.refused.size(); ++k) {
      const RefusedTrial& r = t.refused[k];
      w.BeginObject();
      WriteConfig(w, r.config);
      w.Key("kind").String(v1::TrialKind_Name(r.kind)).Key("status").String(r.status);
      w.Key("message").String(Shorten(r.message, kJsonMessageChars));
      w.EndObject();
    }
    w.EndArray();
    w.Key("failed_trials_omitted").Int(static_cast<int64_t>(from));
    w.Key("failed_trials_by_status").BeginObject();
    for (const auto& [status, n] : t.refused_by_status) w.Key(status).Int(n);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  if (IsModelResult(job)) {  // {"estimated", "measured", "baseline": {"name", "measured"}}
    const v1::StepResult& t = job.tokens_per_second();
    auto num = [&w](double v) { v > 0 ? w.Number(v) : w.Null(); };
    w.Key("tokens_per_second").BeginObject();
    w.Key("estimated");
    num(t.estimated());
    w.Key("measured");
    num(t.measured());
    w.Key("baseline").BeginObject().Key("name").String(t.baseline_name()).Key("measured");
    num(t.baseline_measured());
    w.Key("dtype").String(t.baseline_dtype()).Key("threads").Int(t.baseline_threads());
    w.Key("bound_fraction");
    num(t.baseline_bound_fraction());
    w.Key("variants").BeginArray();  // every thread arrangement timed; the fastest is the baseline
    for (const v1::BaselineRoute& r : t.baseline_routes()) {
      w.BeginObject().Key("name").String(r.name()).Key("threads").Int(r.threads());
      w.Key("status").String(v1::MeasurementStatus_Name(r.status())).Key("step_us");
      num(r.median_us());
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    w.Key("speedup_vs_baseline");
    num(t.baseline_measured() > 0 ? t.measured() / t.baseline_measured() : 0);
    w.Key("layers_run").Int(t.layers_run()).Key("layers_total").Int(t.layers_total());
    w.Key("note").String(t.note()).Key("max_error").Number(t.max_error());
    w.Key("step_us");
    num(t.step_us());
    w.Key("baseline_step_us");
    num(t.baseline_step_us());
    w.Key("bound").BeginObject();  // the memory-bandwidth bound, read next to the step
    w.Key("tokens_per_second");
    num(t.bound());
    w.Key("bytes_per_token");
    num(t.bytes_per_token());
    w.Key("read_gbytes_per_s");
    num(t.read_gbytes_per_s());
    w.Key("fraction");
    num(t.bound_fraction());
    w.Key("read_gbytes_per_s_samples").BeginArray();
    for (double v : t.read_gbytes_per_s_samples()) w.Number(v);
    w.EndArray();
    w.EndObject();
    w.EndObject();
  }
  if (chip) {
    w.Key("chip");
    WriteChipJson(w, *chip);
  }
  w.EndObject();
  return w.str();
}

}  // namespace kiln::cli
