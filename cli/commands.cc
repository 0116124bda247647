#include "cli/commands.h"

#include <chrono>
#include <optional>

#include "cli/best.h"
#include "cli/export.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "cli/results.h"
#include "common/json_text.h"

namespace kiln::cli {
namespace {

std::string JobIdJson(const std::string& job_id) { return JsonText({{"job_id", job_id}}); }

// Follows the job with a progress line on stderr; returns its final snapshot.
absl::StatusOr<v1::Job> WatchWithProgress(Client& client, const std::string& job_id, Io& io) {
  ProgressPrinter progress(io.err, io.err_is_tty, io.now_ms);
  WatchCallbacks callbacks;
  callbacks.on_event = [&](const v1::JobEvent& e) { progress.OnEvent(e); };
  callbacks.on_notice = [&](const std::string& text) { progress.Notice("kiln: " + text); };
  absl::StatusOr<v1::Job> job = client.Watch(job_id, callbacks);
  progress.Finish();
  return job;
}

std::string FinalStateLine(const v1::Job& job) {
  std::string line = "job " + job.id() + " " + v1::JobState_Name(job.state());
  if (!job.message().empty()) line += ": " + job.message();
  return line;
}

// The fingerprint of a worker of the job's chip type, if the coordinator lists one.
std::optional<v1::ChipFingerprint> FindChip(Client& client, const std::string& chip_type) {
  if (chip_type.empty()) return std::nullopt;
  auto workers = client.ListWorkers();
  if (!workers.ok()) return std::nullopt;
  std::optional<v1::ChipFingerprint> found;
  for (const v1::WorkerInfo& w : *workers) {
    if (w.chip().chip_type() != chip_type) continue;
    if (!found || w.state() == "alive") found = w.chip();
  }
  return found;
}

// Said at once when no live worker can run the job (the coordinator sets Job.waiting at submit),
// instead of leaving it silently QUEUED.
void WarnIfWaiting(Client& client, const std::string& job_id, Io& io) {
  auto job = client.GetJob(job_id);
  if (job.ok() && !job->waiting().empty())
    io.err << "kiln: warning: job " << job_id << " is waiting: " << job->waiting() << "\n";
}

int PrintResults(Client& client, const std::string& job_id, bool json, Io& io) {
  auto results = client.GetResults(job_id);
  if (!results.ok()) return ReportError(results.status(), client.address(), io);
  if (json) {
    auto chip = FindChip(client, results->job().chip_type());
    io.out << ResultsJson(*results, chip ? &*chip : nullptr) << "\n";
  } else {
    io.out << FormatResultsTable(*results);
  }
  return 0;
}

}  // namespace

int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int ReportError(const absl::Status& status, const std::string& address, Io& io) {
  io.err << "kiln: " << DescribeError(status, address) << "\n";
  // A request the coordinator refuses as malformed is the mistake the command line refuses
  // before sending (exit 2); anything else that fails is a runtime failure (exit 1).
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int SubmitAndWait(Client& client, const Invocation& inv, WaitOutput output, Io& io,
                  std::function<void(const std::string&)> on_submitted) {
  if (!io.now_ms) io.now_ms = WallClockMs;
  auto job_id = client.SubmitJob(inv.spec);
  if (!job_id.ok()) return ReportError(job_id.status(), client.address(), io);
  if (on_submitted) on_submitted(*job_id);
  io.err << "kiln: submitted job " << *job_id
         << (inv.local ? " (Ctrl-C cancels it)\n"
                       : " (Ctrl-C stops watching; the job keeps running)\n");
  auto job = WatchWithProgress(client, *job_id, io);
  if (!job.ok()) return ReportError(job.status(), client.address(), io);
  if (job->state() != v1::SUCCEEDED) io.err << "kiln: " << FinalStateLine(*job) << "\n";
  int rc = 0;
  if (output == WaitOutput::kJobIdJson) {
    io.out << JobIdJson(*job_id) << "\n";
  } else {
    rc = PrintResults(client, *job_id, output == WaitOutput::kResultsJson, io);
  }
  io.out.flush();
  return rc != 0 ? rc : job->state() == v1::SUCCEEDED ? 0 : 1;
}

int RunRemoteCommand(const Invocation& inv, Io& io) {
  if (!io.now_ms) io.now_ms = WallClockMs;
  // TLS and token files are read once, here; a missing one is an error naming it.
  auto auth = ClientAuth::Load({inv.tls_ca, "", "", inv.token_file});
  if (!auth.ok()) {
    io.err << "kiln: " << auth.status().message() << "\n";
    return 2;
  }
  Client client(inv.coordinator, 30, std::move(*auth));
  const std::string& cmd = inv.command;
  if (cmd == "submit") {
    if (inv.wait)
      return SubmitAndWait(client, inv,
                           inv.json ? WaitOutput::kResultsJson : WaitOutput::kResultsTable, io);
    auto job_id = client.SubmitJob(inv.spec);
    if (!job_id.ok()) return ReportError(job_id.status(), client.address(), io);
    io.out << (inv.json ? JobIdJson(*job_id) : *job_id) << "\n";
    WarnIfWaiting(client, *job_id, io);
    return 0;
  }
  if (cmd == "watch") {
    auto job = WatchWithProgress(client, inv.job_id, io);
    if (!job.ok()) return ReportError(job.status(), client.address(), io);
    io.out << FinalStateLine(*job) << "\n";
    return job->state() == v1::SUCCEEDED ? 0 : 1;
  }
  if (cmd == "jobs") {
    auto jobs = client.ListJobs();
    if (!jobs.ok()) return ReportError(jobs.status(), client.address(), io);
    io.out << (inv.json ? JobsJson(*jobs) + "\n" : FormatJobsTable(*jobs));
    return 0;
  }
  if (cmd == "results") return PrintResults(client, inv.job_id, inv.json, io);
  if (cmd == "best") return RunBest(client, inv, io);
  if (cmd == "export" && inv.best) return RunExportBest(client, inv, io);
  if (cmd == "export") {
    auto kernels = client.ExportKernels(inv.job_id);
    if (!kernels.ok()) return ReportError(kernels.status(), client.address(), io);
    const std::string dir = inv.out.empty() ? DefaultExportDir(inv.job_id) : inv.out;
    auto manifest = WriteExport(*kernels, dir);
    if (!manifest.ok()) {
      io.err << "kiln: " << manifest.status().message() << "\n";
      return 1;
    }
    io.out << (inv.json ? *manifest + "\n" : FormatExport(*kernels, dir));
    return 0;
  }
  if (cmd == "report") {
    auto results = client.GetResults(inv.job_id);
    if (!results.ok()) return ReportError(results.status(), client.address(), io);
    // An older job may carry no fingerprint: a live worker of its chip type stands in.
    std::optional<v1::ChipFingerprint> chip;
    if (!results->job().has_chip()) chip = FindChip(client, results->job().chip_type());
    const std::string path = inv.out.empty() ? DefaultReportPath(inv.job_id) : inv.out;
    const std::string html = ReportHtml(*results, chip ? &*chip : nullptr);
    if (absl::Status written = WriteReportFile(html, path); !written.ok()) {
      io.err << "kiln: " << written.message() << "\n";
      return 1;
    }
    io.out << "wrote " << path << " (" << (html.size() + 1023) / 1024 << " KiB)\n";
    return 0;
  }
  if (cmd == "cancel") {
    auto state = client.CancelJob(inv.job_id);
    if (!state.ok()) return ReportError(state.status(), client.address(), io);
    io.out << "job " << inv.job_id << " " << v1::JobState_Name(*state) << "\n";
    return 0;
  }
  if (cmd == "workers") {
    auto workers = client.ListWorkers();
    if (!workers.ok()) return ReportError(workers.status(), client.address(), io);
    int64_t now = io.now_ms();
    io.out << (inv.json ? WorkersJson(*workers, now) + "\n" : FormatWorkersTable(*workers, now));
    return 0;
  }
  io.err << "kiln: '" << cmd << "' is not a remote command\n";
  return 2;
}

}  // namespace kiln::cli
