#include "cli/results.h"

#include <algorithm>
#include <utility>

#include "cli/format.h"
#include "cli/table.h"
#include "codegen/workload.h"
#include "common/json_text.h"
#include "common/text.h"

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

using Json = nlohmann::ordered_json;

// A list of figures as a JSON array (non-finite ones as null).
Json Numbers(const google::protobuf::RepeatedField<double>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// A figure that is only meaningful when positive; null otherwise.
Json Positive(double v) { return v > 0 ? Json(v) : Json(); }

// {knob: value, ...} in knob order.
Json ConfigJson(const v1::Config& config) {
  std::vector<std::pair<std::string, int64_t>> knobs(config.knobs().begin(), config.knobs().end());
  std::sort(knobs.begin(), knobs.end());
  Json out = Json::object();
  for (const auto& [name, value] : knobs) out[name] = value;
  return out;
}

bool IsModelResult(const v1::Job& job) {
  return !job.spec().model().empty() || !job.spec().hf_config_json().empty();
}

// What a model job's figures are for: the model and the step it timed.
std::string ModelName(const v1::Job& job) {
  if (!job.spec().model().empty()) return job.spec().model();
  if (!job.spec().arch().name().empty()) return job.spec().arch().name() + " (config.json)";
  return "config.json";
}

std::string DTypeText(v1::DType dtype) {
  std::string name = v1::DType_Name(dtype == v1::DTYPE_UNSPECIFIED ? v1::FP32 : dtype);
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  return name;
}

bool IsPrefill(const v1::JobSpec& spec) { return spec.phase() == "prefill"; }

// "model tinyllama-1.1b  phase decode  batch 1  context 1024  dtype fp32"
std::string ModelLine(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  std::string out = "model " + ModelName(job) + "  phase " +
                    (spec.phase().empty() ? std::string("decode") : spec.phase()) + "  batch " +
                    std::to_string(spec.batch() > 0 ? spec.batch() : 1);
  if (spec.context() > 0) out += "  context " + std::to_string(spec.context());
  if (IsPrefill(spec) && spec.prefill_tokens() > 0)
    out += "  prompt " + std::to_string(spec.prefill_tokens()) + " tokens";
  out += "  dtype " + DTypeText(spec.dtype());
  if (spec.step_layers() > 0) out += "  step layers " + std::to_string(spec.step_layers());
  return out + "\n";
}

Json ModelJson(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  return {{"name", ModelName(job)},
          {"phase", spec.phase().empty() ? std::string("decode") : spec.phase()},
          {"batch", spec.batch() > 0 ? spec.batch() : 1},
          {"context", spec.context() > 0 ? Json(spec.context()) : Json()},
          {"prefill_tokens", IsPrefill(spec) ? Json(spec.prefill_tokens()) : Json()},
          {"dtype", DTypeText(spec.dtype())},
          {"step_layers", spec.step_layers()}};
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
  if (t.bound() > 0 && t.measured() > 0 && t.bound_kind() == "compute")
    out += "bound     " + tps(t.bound()) + " at the measured matrix peak of " +
           FormatFixed(t.peak_gflops(), 1) + " GFLOP/s (" +
           FormatFixed(t.flops_per_token() / 1e9, 3) + " GFLOP a token): measured is " +
           FormatFixed(100 * t.bound_fraction(), 0) + "% of it" +
           (t.baseline_bound_fraction() > 0
                ? ", the baseline " + FormatFixed(100 * t.baseline_bound_fraction(), 0) + "%"
                : "") +
           "\n";
  else if (t.bound() > 0 && t.measured() > 0)
    out += "bound     " + tps(t.bound()) + " at " + FormatFixed(t.read_gbytes_per_s(), 1) +
           " GB/s read next to the step (" + FormatFixed(t.bytes_per_token() / 1e9, 3) +
           " GB a token: weights, KV cache or state): measured is " +
           FormatFixed(100 * t.bound_fraction(), 0) + "% of it" +
           (t.baseline_bound_fraction() > 0
                ? ", the baseline " + FormatFixed(100 * t.baseline_bound_fraction(), 0) + "%"
                : "") +
           "\n";
  if (!t.note().empty()) out += "step: " + t.note() + "\n";
  if (t.op_times_size() > 0 && t.step_us() > 0) {
    // Where the measured step's time goes, the largest share first, beside each kernel alone.
    std::vector<const v1::StepOpTime*> ops;
    for (const v1::StepOpTime& o : t.op_times()) ops.push_back(&o);
    std::sort(ops.begin(), ops.end(), [](const v1::StepOpTime* a, const v1::StepOpTime* b) {
      return a->in_step_us() * a->calls_per_step() > b->in_step_us() * b->calls_per_step();
    });
    std::vector<std::vector<std::string>> rows;
    for (const v1::StepOpTime* o : ops)
      rows.push_back(
          {o->workload_key(), std::to_string(o->calls_per_step()), FormatFixed(o->in_step_us(), 1),
           o->isolated_us() > 0 ? FormatFixed(o->isolated_us(), 1) : "-",
           FormatFixed(100 * o->in_step_us() * o->calls_per_step() / t.step_us(), 1) + "%"});
    out += "inside the measured step (Kiln's kernels, each call timed):\n" +
           FormatTable({"WORKLOAD", "CALLS", "IN STEP (µs)", "ALONE (µs)", "OF STEP"}, rows);
  }
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
// `what` names the rounds ("final rounds", "inside the step"); the best config is marked.
std::string FinalsText(const std::string& what, const std::vector<v1::Finalist>& finalists,
                       const v1::Config& best) {
  std::string out = "  " + what + ": " + std::to_string(finalists.size()) +
                    " configurations timed in turns, " +
                    std::to_string(finalists.front().round_median_us_size()) +
                    " rounds; time over each round's fastest (median):";
  size_t marked = 0;  // the best's place (the first when none is the best's config)
  for (size_t i = 0; i < finalists.size(); ++i)
    if (ConfigText(finalists[i].config()) == ConfigText(best)) marked = i;
  for (size_t i = 0; i < finalists.size(); ++i) {
    const v1::Finalist& f = finalists[i];
    out += (i ? ", " : " ") + (f.failed() ? std::string("failed") : FormatFixed(f.score(), 3)) +
           (i == marked && !f.failed() ? " (best)" : "");
  }
  return out + "\n";
}

// One line on what a task took from earlier jobs' tuning records.
std::string EarlierJobsText(const TaskSummary& t, bool single_task) {
  std::string out =
      single_task ? std::string("from earlier jobs: ") : "from earlier jobs (" + t.workload + "): ";
  out += std::to_string(t.seeded_from_best_known) + " best known configurations timed again, " +
         std::to_string(t.answered_from_records) + " trials answered from their records; ";
  out += t.best_from_job.empty() ? std::string("the best was found by this job")
                                 : "the best was first found by job " + t.best_from_job;
  return out + "\n";
}

// Refusals shown: a few per task in the table and the latest in the JSON, with their messages
// cut (a compiler's errors can run to pages, and a job can refuse hundreds of trials).
constexpr size_t kRefusedTableLines = 3;
constexpr size_t kRefusedJsonTrials = 20;
constexpr size_t kTableMessageChars = 160;
constexpr size_t kJsonMessageChars = 500;

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
           (why.empty() ? "(no message)" : CutUtf8(why, kTableMessageChars)) + "\n";
  }
  return out;
}

}  // namespace

TaskCells CellsOf(const TaskSummary& t) {
  TaskCells c{"-", "-", "-", "-", "-"};
  if (t.best) {
    c.best_us = FormatMicros(t.best->median_us());
    c.gflops = FormatFixed(t.best->gflops(), 1);
    c.gbytes_per_s = FormatFixed(t.best->gbytes_per_s(), 1);
  }
  if (t.baseline)
    c.baseline = t.baseline_name +
                 (t.baseline_threads > 0 ? "/" + std::to_string(t.baseline_threads) + "t" : "") +
                 " " + FormatMicros(t.baseline->median_us());
  if (t.speedup) c.speedup = FormatFixed(*t.speedup, 2) + "x";
  return c;
}

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
    s.step_finalists.assign(task.step_finalists().begin(), task.step_finalists().end());
    for (const v1::Trial& trial : results.trials())
      if (trial.task_index() == i && trial.kind() == v1::TUNE && trial.measurement().from_cache())
        s.answered_from_records++;
    // trials_from_earlier_jobs counts both; a trial answered from this job's own record is none.
    s.answered_from_records = std::min(s.answered_from_records, task.trials_from_earlier_jobs());
    s.seeded_from_best_known = task.trials_from_earlier_jobs() - s.answered_from_records;
    s.best_from_job = task.best_from_job();
    s.in_step_factor = task.in_step_factor();
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
  if (IsModelResult(job)) out += ModelLine(job);
  if (!job.spec().extend_job_id().empty())
    out += "continues job " + job.spec().extend_job_id() + "\n";
  if (!job.message().empty()) out += job.message() + "\n";
  std::vector<TaskSummary> tasks = SummarizeTasks(results);
  if (tasks.empty()) return out + "no tasks\n";
  std::vector<Row> rows;
  const bool model = IsModelResult(job);
  double step_us = 0;
  for (const TaskSummary& t : tasks) step_us += t.best ? t.count * t.best->median_us() : 0;
  for (const TaskSummary& t : tasks) {
    const TaskCells c = CellsOf(t);
    rows.push_back({t.workload, std::to_string(t.count),
                    std::to_string(t.ok) + "/" + std::to_string(t.failed), c.best_us, c.gflops,
                    c.gbytes_per_s, c.baseline, c.speedup});
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
    if (!t.finalists.empty()) out += FinalsText("final rounds", t.finalists, t.best_config);
    if (!t.step_finalists.empty())
      out += FinalsText("inside the step", t.step_finalists, t.best_config);
  }
  for (const TaskSummary& t : tasks)
    if (t.seeded_from_best_known > 0 || t.answered_from_records > 0 || !t.best_from_job.empty())
      out += EarlierJobsText(t, tasks.size() == 1);
  for (const TaskSummary& t : tasks)
    if (!t.refused.empty()) out += RefusedText(t, tasks.size() == 1);
  return out;
}

std::string ResultsJson(const v1::GetResultsResponse& results, const v1::ChipFingerprint* chip) {
  const v1::Job& job = results.job();
  Json tasks = Json::array();
  for (const TaskSummary& t : SummarizeTasks(results)) {
    Json task = {{"workload", t.workload},
                 {"count", t.count},
                 {"trials", {{"ok", t.ok}, {"failed", t.failed}, {"budget", t.budget}}}};
    Json best;  // null without one
    if (t.best) {
      const v1::Measurement& m = *t.best;
      best = {{"config", ConfigJson(t.best_config)},
              {"median_us", m.median_us()},
              {"p10_us", m.p10_us()},
              {"p90_us", m.p90_us()},
              {"cv", m.cv()},
              {"gflops", m.gflops()},
              {"gbytes_per_s", m.gbytes_per_s()},
              {"max_error", m.max_error()},
              {"samples_us", Numbers(m.samples_us())}};
    }
    task["best"] = std::move(best);
    Json baseline;
    if (t.baseline) {
      const v1::Measurement& m = *t.baseline;
      baseline = {{"name", t.baseline_name},
                  {"median_us", m.median_us()},
                  {"gflops", m.gflops()},
                  {"gbytes_per_s", m.gbytes_per_s()},
                  {"threads", t.baseline_threads}};
      if (!m.message().empty()) baseline["message"] = CutUtf8(m.message(), kJsonMessageChars);
      baseline["samples_us"] = Numbers(m.samples_us());
    }
    // Every route timed (library call, layout, thread count); "baseline" is the fastest.
    task["baseline"] = std::move(baseline);
    Json routes = Json::array();
    if (t.baseline)
      for (const v1::BaselineRoute& r : t.baseline->baseline_routes()) {
        Json route = {{"name", r.name()},
                      {"threads", r.threads()},
                      {"dtype", r.dtype()},
                      {"status", v1::MeasurementStatus_Name(r.status())},
                      {"median_us", r.status() == v1::OK ? Json(r.median_us()) : Json()},
                      {"prepack_us", r.prepack_us()}};
        if (!r.message().empty()) route["message"] = CutUtf8(r.message(), kJsonMessageChars);
        route["samples_us"] = Numbers(r.samples_us());
        routes.push_back(std::move(route));
      }
    task["baselines"] = std::move(routes);
    task["speedup_vs_baseline"] = t.speedup ? Json(*t.speedup) : Json();
    // The final rounds (each round's median alone), then the same finalists timed inside the
    // composed step (each round's time a call there); the lowest score first.
    auto finalists = [](const std::vector<v1::Finalist>& list, const char* rounds_field) {
      Json out = Json::array();
      for (const v1::Finalist& f : list)
        out.push_back({{"config", ConfigJson(f.config())},
                       {"score", f.score()},
                       {"failed", f.failed()},
                       {rounds_field, Numbers(f.round_median_us())}});
      return out;
    };
    task["finalists"] = finalists(t.finalists, "round_median_us");
    task["step_finalists"] = finalists(t.step_finalists, "round_in_step_us");
    task["from_earlier_jobs"] = {
        {"answered_from_records", t.answered_from_records},
        {"seeded_from_best_known", t.seeded_from_best_known},
        {"best_from_job", t.best_from_job.empty() ? Json() : Json(t.best_from_job)}};
    // The latest refused trials with why, and how many earlier ones are left out.
    const size_t from =
        t.refused.size() > kRefusedJsonTrials ? t.refused.size() - kRefusedJsonTrials : 0;
    Json refused = Json::array();
    for (size_t k = from; k < t.refused.size(); ++k) {
      const RefusedTrial& r = t.refused[k];
      refused.push_back({{"config", ConfigJson(r.config)},
                         {"kind", v1::TrialKind_Name(r.kind)},
                         {"status", r.status},
                         {"message", CutUtf8(r.message, kJsonMessageChars)}});
    }
    task["failed_trials"] = std::move(refused);
    task["failed_trials_omitted"] = static_cast<int64_t>(from);
    Json by_status = Json::object();
    for (const auto& [status, n] : t.refused_by_status) by_status[status] = n;
    task["failed_trials_by_status"] = std::move(by_status);
    if (IsModelResult(job)) task["in_step_factor"] = Positive(t.in_step_factor);
    tasks.push_back(std::move(task));
  }
  Json out = {{"job_id", job.id()},
              {"state", v1::JobState_Name(job.state())},
              {"chip_type", job.chip_type()},
              {"message", job.message()},
              {"extend_job_id",
               job.spec().extend_job_id().empty() ? Json() : Json(job.spec().extend_job_id())},
              {"tasks", std::move(tasks)}};
  if (IsModelResult(job)) out["model"] = ModelJson(job);  // what the figures are for
  if (IsModelResult(job)) {  // {"estimated", "measured", "baseline": {"name", "measured"}}
    const v1::StepResult& t = job.tokens_per_second();
    Json variants = Json::array();  // every thread arrangement timed; the fastest is the baseline
    for (const v1::BaselineRoute& r : t.baseline_routes())
      variants.push_back({{"name", r.name()},
                          {"threads", r.threads()},
                          {"status", v1::MeasurementStatus_Name(r.status())},
                          {"step_us", Positive(r.median_us())}});
    out["tokens_per_second"] = {
        {"estimated", Positive(t.estimated())},
        {"measured", Positive(t.measured())},
        {"baseline",
         {{"name", t.baseline_name()},
          {"measured", Positive(t.baseline_measured())},
          {"dtype", t.baseline_dtype()},
          {"threads", t.baseline_threads()},
          {"bound_fraction", Positive(t.baseline_bound_fraction())},
          {"variants", std::move(variants)}}},
        {"speedup_vs_baseline",
         Positive(t.baseline_measured() > 0 ? t.measured() / t.baseline_measured() : 0)},
        {"layers_run", t.layers_run()},
        {"layers_total", t.layers_total()},
        {"note", t.note()},
        {"max_error", t.max_error()},
        {"step_us", Positive(t.step_us())},
        {"baseline_step_us", Positive(t.baseline_step_us())},
        // decode: the memory-bandwidth bound, read next to the step; prefill: the compute roof
        {"bound",
         {{"kind", t.bound_kind().empty() ? "memory" : t.bound_kind()},
          {"tokens_per_second", Positive(t.bound())},
          {"flops_per_token", Positive(t.flops_per_token())},
          {"peak_gflops", Positive(t.peak_gflops())},
          {"bytes_per_token", Positive(t.bytes_per_token())},
          {"read_gbytes_per_s", Positive(t.read_gbytes_per_s())},
          {"fraction", Positive(t.bound_fraction())},
          {"read_gbytes_per_s_samples", Numbers(t.read_gbytes_per_s_samples())}}}};
    // Kiln's kernels inside the measured step, by workload.
    Json op_times = Json::array();
    for (const v1::StepOpTime& o : t.op_times())
      op_times.push_back({{"workload", o.workload_key()},
                          {"roles", o.roles()},
                          {"calls_per_step", o.calls_per_step()},
                          {"in_step_us", o.in_step_us()},
                          {"isolated_us", Positive(o.isolated_us())}});
    out["tokens_per_second"]["op_times"] = std::move(op_times);
  }
  if (chip) out["chip"] = ChipJson(*chip);
  return JsonText(out);
}

}  // namespace kiln::cli
