#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "cli/table.h"
#include "codegen/workload.h"

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

std::string FormatJobsTable(const std::vector<v1::Job>& jobs) {
  std::vector<Row> rows;
  for (const v1::Job& job : jobs) {
    std::string chip = job.chip_type().empty() ? job.spec().chip() : job.chip_type();
    rows.push_back(
        {job.id(), v1::JobState_Name(job.state()), chip.empty() ? "-" : chip, JobWorkloadText(job),
         std::to_string(job.trials_done()) + "/" + std::to_string(job.spec().budget_trials()),
         FormatMicros(JobBestMicros(job)), FormatLocalTime(job.created_unix_ms())});
  }
  return FormatTable({"ID", "STATE", "CHIP", "WORKLOAD/MODEL", "TRIALS", "BEST (µs)", "CREATED"},
                     rows);
}

std::string JobsJson(const std::vector<v1::Job>& jobs) {
  JsonWriter w;
  w.BeginObject().Key("jobs").BeginArray();
  for (const v1::Job& job : jobs) {
    w.BeginObject();
    w.Key("job_id").String(job.id());
    w.Key("state").String(v1::JobState_Name(job.state()));
    w.Key("chip").String(job.spec().chip());
    w.Key("chip_type").String(job.chip_type());
    w.Key("workload").String(JobWorkloadText(job));
    w.Key("trials_done").Int(job.trials_done());
    w.Key("trials_failed").Int(job.trials_failed());
    w.Key("budget").Int(job.spec().budget_trials());
    double best = JobBestMicros(job);
    w.Key("best_us");
    best > 0 ? w.Number(best) : w.Null();
    w.Key("created_unix_ms").Int(job.created_unix_ms());
    w.EndObject();
  }
  w.EndArray().EndObject();
  return w.str();
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
  JsonWriter w;
  w.BeginObject().Key("workers").BeginArray();
  for (const v1::WorkerInfo& worker : workers) {
    w.BeginObject();
    w.Key("id").String(worker.id());
    w.Key("name").String(worker.name());
    w.Key("chip_type").String(worker.chip().chip_type());
    w.Key("state").String(worker.state());
    w.Key("slots").Int(worker.slots());
    w.Key("last_heartbeat_unix_ms").Int(worker.last_heartbeat_unix_ms());
    int64_t age = HeartbeatAgeSeconds(worker, now_ms);
    w.Key("heartbeat_age_s");
    age < 0 ? w.Null() : w.Int(age);
    w.Key("trials_done").Int(worker.trials_done());
    w.Key("chip");
    WriteChipJson(w, worker.chip());
    w.EndObject();
  }
  w.EndArray().EndObject();
  return w.str();
}

void WriteChipJson(JsonWriter& w, const v1::ChipFingerprint& chip) {
  w.BeginObject();
  w.Key("chip_type").String(chip.chip_type());
  w.Key("kind").String(chip.kind());
  w.Key("vendor").String(chip.vendor());
  w.Key("model").String(chip.model());
  w.Key("isa_features").BeginArray();
  for (const std::string& feature : chip.isa_features()) w.String(feature);
  w.EndArray();
  w.Key("cores").Int(chip.cores());
  w.Key("l1d_bytes").Int(chip.l1d_bytes());
  w.Key("l2_bytes").Int(chip.l2_bytes());
  w.Key("l3_bytes").Int(chip.l3_bytes());
  w.Key("memory_bytes").Int(chip.memory_bytes());
  w.Key("peak_gflops").Number(chip.peak_gflops());
  w.Key("read_gbytes_per_s").Number(chip.read_gbytes_per_s());
  w.Key("compiler").String(chip.compiler());
  w.Key("hostname").String(chip.hostname());
  w.EndObject();
}

}  // namespace kiln::cli
