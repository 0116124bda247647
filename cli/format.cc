#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "cli/table.h"
#include "codegen/workload.h"
#include "common/json_text.h"

namespace kiln::cli {

bool IsUsable(const v1::Measurement& m) {
  return (m.status() == v1::OK || m.status() == v1::STATUS_UNSPECIFIED) &&
         std::isfinite(m.median_us()) && m.median_us() > 0;
}

std::string JobWorkloadText(const v1::Job& job) {
  if (job.tasks_size() > 0) {
    const v1::TaskResult& task = job.tasks(0);
    std::string text =
        task.workload_key().empty() ? codegen::WorkloadKey(task.workload()) : task.workload_key();
    if (job.tasks_size() > 1) text += " (+" + std::to_string(job.tasks_size() - 1) + " tasks)";
    if (!job.spec().model().empty()) return job.spec().model() + ": " + text;
    return text;
  }
  if (!job.spec().model().empty()) return job.spec().model();
  if (job.spec().has_workload()) return codegen::WorkloadKey(job.spec().workload());
  return "-";
}

double JobBestMicros(const v1::Job& job) {
  double total = 0;
  for (const v1::TaskResult& task : job.tasks()) {
    if (!task.has_best() || !IsUsable(task.best())) return 0;
    total += std::max(task.count(), 1) * task.best().median_us();
  }
  return total;
}

std::string ConfigText(const v1::Config& config) {
  std::vector<std::pair<std::string, int64_t>> knobs(config.knobs().begin(), config.knobs().end());
  std::sort(knobs.begin(), knobs.end());
  std::string out;
  for (const auto& [name, value] : knobs) {
    if (!out.empty()) out += ' ';
    out += name + "=" + std::to_string(value);
  }
  return out;
}

namespace {

bool IsModelJobSpec(const v1::Job& job) {
  return !job.spec().model().empty() || !job.spec().hf_config_json().empty();
}

// A model job's figure of merit: the measured step's tokens/s, else the estimate from its
// operators' bests (marked), else 0.
double JobTokensPerSecond(const v1::Job& job, bool* estimated) {
  const v1::StepResult& t = job.tokens_per_second();
  *estimated = !(t.measured() > 0) && t.estimated() > 0;
  return t.measured() > 0 ? t.measured() : t.estimated() > 0 ? t.estimated() : 0;
}

}  // namespace

std::string FormatJobsTable(const std::vector<v1::Job>& jobs) {
  // With a model job listed, the column says its unit in each cell: a model job's best is its
  // tokens/s (its step time is not what anyone compares), an operator job's its time.
  bool any_model = false;
  for (const v1::Job& job : jobs) any_model = any_model || IsModelJobSpec(job);
  std::vector<Row> rows;
  for (const v1::Job& job : jobs) {
    std::string chip = job.chip_type().empty() ? job.spec().chip() : job.chip_type();
    std::string best = FormatMicros(JobBestMicros(job));
    if (any_model && IsModelJobSpec(job)) {
      bool estimated = false;
      const double tps = JobTokensPerSecond(job, &estimated);
      best = tps > 0 ? FormatFixed(tps, 1) + " tok/s" + (estimated ? " (est.)" : "") : "-";
    } else if (any_model && best != "-") {
      best += " µs";
    }
    rows.push_back(
        {job.id(), v1::JobState_Name(job.state()), chip.empty() ? "-" : chip, JobWorkloadText(job),
         std::to_string(job.trials_done()) + "/" + std::to_string(job.spec().budget_trials()), best,
         FormatLocalTime(job.created_unix_ms())});
  }
  std::string out = FormatTable({"ID", "STATE", "CHIP", "WORKLOAD/MODEL", "TRIALS",
                                 any_model ? "BEST" : "BEST (µs)", "CREATED"},
                                rows);
  for (const v1::Job& job : jobs)  // why a job is not running, under the table
    if (!job.waiting().empty()) out += "job " + job.id() + " waiting: " + job.waiting() + "\n";
  return out;
}

std::string JobsJson(const std::vector<v1::Job>& jobs) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const v1::Job& job : jobs) {
    const double best = JobBestMicros(job);
    list.push_back({{"job_id", job.id()},
                    {"state", v1::JobState_Name(job.state())},
                    {"chip", job.spec().chip()},
                    {"chip_type", job.chip_type()},
                    {"workload", JobWorkloadText(job)},
                    {"trials_done", job.trials_done()},
                    {"trials_failed", job.trials_failed()},
                    {"budget", job.spec().budget_trials()},
                    {"best_us", best > 0 ? nlohmann::ordered_json(best) : nlohmann::ordered_json()},
                    {"created_unix_ms", job.created_unix_ms()},
                    {"waiting", job.waiting()}});
    if (IsModelJobSpec(job)) {  // the figure `kiln jobs` shows for it
      bool estimated = false;
      const double tps = JobTokensPerSecond(job, &estimated);
      list.back()["tokens_per_second"] =
          tps > 0 ? nlohmann::ordered_json(tps) : nlohmann::ordered_json();
      list.back()["tokens_per_second_estimated"] = estimated;
    }
  }
  return JsonText({{"jobs", std::move(list)}});
}

namespace {

int64_t HeartbeatAgeSeconds(const v1::WorkerInfo& worker, int64_t now_ms) {
  if (worker.last_heartbeat_unix_ms() <= 0) return -1;
  return std::max<int64_t>(0, (now_ms - worker.last_heartbeat_unix_ms()) / 1000);
}

}  // namespace

std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers, int64_t now_ms) {
  std::vector<Row> rows;
  for (const v1::WorkerInfo& worker : workers) {
    int64_t age = HeartbeatAgeSeconds(worker, now_ms);
    const v1::ChipFingerprint& chip = worker.chip();
    rows.push_back({worker.name().empty() ? "-" : worker.name(), worker.id(),
                    chip.chip_type().empty() ? "-" : chip.chip_type(),
                    chip.model().empty() ? "-" : chip.model(),
                    chip.cores() > 0 ? std::to_string(chip.cores()) : "-",
                    worker.state().empty() ? "-" : worker.state(),
                    age < 0 ? "never" : std::to_string(age) + "s ago",
                    std::to_string(worker.trials_done())});
  }
  return FormatTable(
      {"NAME", "ID", "CHIP TYPE", "MODEL", "CORES", "STATE", "LAST HEARTBEAT", "TRIALS"}, rows);
}

std::string WorkersJson(const std::vector<v1::WorkerInfo>& workers, int64_t now_ms) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const v1::WorkerInfo& worker : workers) {
    const int64_t age = HeartbeatAgeSeconds(worker, now_ms);
    list.push_back(
        {{"id", worker.id()},
         {"name", worker.name()},
         {"chip_type", worker.chip().chip_type()},
         {"state", worker.state()},
         {"slots", worker.slots()},
         {"last_heartbeat_unix_ms", worker.last_heartbeat_unix_ms()},
         {"heartbeat_age_s", age < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(age)},
         {"trials_done", worker.trials_done()},
         {"chip", ChipJson(worker.chip())}});
  }
  return JsonText({{"workers", std::move(list)}});
}

nlohmann::ordered_json ChipJson(const v1::ChipFingerprint& chip) {
  return {{"chip_type", chip.chip_type()},
          {"kind", chip.kind()},
          {"vendor", chip.vendor()},
          {"model", chip.model()},
          {"isa_features",
           std::vector<std::string>(chip.isa_features().begin(), chip.isa_features().end())},
          {"cores", chip.cores()},
          {"l1d_bytes", chip.l1d_bytes()},
          {"l2_bytes", chip.l2_bytes()},
          {"l3_bytes", chip.l3_bytes()},
          {"memory_bytes", chip.memory_bytes()},
          {"peak_gflops", chip.peak_gflops()},
          {"peak_bf16_gflops", chip.peak_bf16_gflops()},
          {"peak_int8_gops", chip.peak_int8_gops()},
          {"read_gbytes_per_s", chip.read_gbytes_per_s()},
          {"compiler", chip.compiler()},
          {"hostname", chip.hostname()}};
}

}  // namespace kiln::cli
