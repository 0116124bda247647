#include "cli/client.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/progress.h"
#include "grpcpp/grpcpp.h"

namespace kiln::cli {
namespace {

absl::Status ToAbsl(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// Failures after which a watch is worth resuming: the coordinator went away or restarted.
bool IsTransient(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kCancelled ||
         code == absl::StatusCode::kAborted || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kUnknown || code == absl::StatusCode::kInternal;
}

// A watch starts with the job's history replayed; progress only moves forward, so an event
// whose snapshot is behind the one already shown is stale and skipped.
bool IsStale(const v1::Job& event, const v1::Job& shown) {
  auto rank = [](v1::JobState s) { return IsTerminal(s) ? 3 : s == v1::RUNNING ? 2 : 1; };
  auto key = [&](const v1::Job& j) {
    return std::make_tuple(rank(j.state()), j.trials_done(), j.trials_failed());
  };
  return key(event) < key(shown);
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Client::Client(std::string address, int deadline_seconds, ClientAuth auth)
    : address_(std::move(address)),
      deadline_seconds_(deadline_seconds),
      auth_(std::move(auth)),
      coordinators_(address_, [this](const std::string& target) {
        grpc::ChannelArguments args;
        args.SetMaxReceiveMessageSize(512 << 20);  // results carry every trial's samples
        // Reconnect quickly after a coordinator restart instead of gRPC's default backoff (up to
        // 2 min).
        args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
        args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
        args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
        return grpc::CreateCustomChannel(target, auth_.ChannelCredentials(), args);
      }) {}

void Client::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_seconds_));
  auth_.Apply(context);
}

template <typename Request, typename Response>
absl::StatusOr<Response> Client::Unary(grpc::Status (v1::TuningService::Stub::*method)(
                                           grpc::ClientContext*, const Request&, Response*),
                                       const Request& request) {
  const int64_t give_up = SteadyMs() + (coordinators_.size() > 1 ? kFailoverWaitMs : 0);
  for (int pause_ms = 100;; pause_ms = std::min(pause_ms * 2, 1000)) {
    grpc::ClientContext context;
    Prepare(&context);
    Response response;
    std::shared_ptr<v1::TuningService::Stub> stub = coordinators_.stub();
    absl::Status s = ToAbsl((stub.get()->*method)(&context, request, &response));
    if (s.ok()) return response;
    // Several addresses: a leader and its standbys. One down or standing by answers
    // UNAVAILABLE; the next may lead (or will, once a standby has taken over).
    if (s.code() != absl::StatusCode::kUnavailable || coordinators_.size() == 1) return s;
    coordinators_.Failover(stub);
    if (SteadyMs() > give_up) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
}

absl::StatusOr<std::string> Client::SubmitJob(const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  auto response = Unary(&v1::TuningService::Stub::SubmitJob, request);
  if (!response.ok()) return response.status();
  return response->job_id();
}

absl::StatusOr<v1::Job> Client::GetJob(const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  return Unary(&v1::TuningService::Stub::GetJob, request);
}

absl::StatusOr<std::vector<v1::Job>> Client::ListJobs() {
  auto response = Unary(&v1::TuningService::Stub::ListJobs, v1::ListJobsRequest());
  if (!response.ok()) return response.status();
  return std::vector<v1::Job>(response->jobs().begin(), response->jobs().end());
}

absl::StatusOr<v1::JobState> Client::CancelJob(const std::string& job_id) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  auto response = Unary(&v1::TuningService::Stub::CancelJob, request);
  if (!response.ok()) return response.status();
  return response->state();
}

absl::StatusOr<v1::GetResultsResponse> Client::GetResults(const std::string& job_id) {
  v1::GetResultsRequest request;
  request.set_job_id(job_id);
  return Unary(&v1::TuningService::Stub::GetResults, request);
}

absl::StatusOr<v1::ExportKernelsResponse> Client::ExportKernels(const std::string& job_id) {
  v1::ExportKernelsRequest request;
  request.set_job_id(job_id);
  return Unary(&v1::TuningService::Stub::ExportKernels, request);
}

absl::StatusOr<std::vector<v1::TuningRecord>> Client::LookupBest(const v1::Workload& workload,
                                                                 const std::string& chip_type,
                                                                 int k) {
  v1::LookupBestRequest request;
  *request.mutable_workload() = workload;
  request.set_chip_type(chip_type);
  request.set_k(k);
  auto response = Unary(&v1::TuningService::Stub::LookupBest, request);
  if (!response.ok()) return response.status();
  return std::vector<v1::TuningRecord>(response->records().begin(), response->records().end());
}

absl::StatusOr<std::vector<v1::WorkerInfo>> Client::ListWorkers() {
  auto response = Unary(&v1::TuningService::Stub::ListWorkers, v1::ListWorkersRequest());
  if (!response.ok()) return response.status();
  return std::vector<v1::WorkerInfo>(response->workers().begin(), response->workers().end());
}

absl::StatusOr<v1::Job> Client::Watch(const std::string& job_id, const WatchCallbacks& cb) {
  v1::WatchJobRequest request;
  request.set_job_id(job_id);
  // A snapshot first: reports a wrong id or an unreachable coordinator at once, shows progress
  // before the first event, and ends a watch of a job that is already over.
  absl::StatusOr<v1::Job> initial = GetJob(job_id);
  if (!initial.ok()) return initial.status();
  v1::JobEvent snapshot;
  snapshot.set_kind(IsTerminal(initial->state()) ? v1::JobEvent::STATE : v1::JobEvent::PROGRESS);
  *snapshot.mutable_job() = *initial;
  if (cb.on_event) cb.on_event(snapshot);
  if (IsTerminal(initial->state())) return initial;
  v1::Job shown = *initial;
  int64_t failing_since = 0;
  int backoff_ms = cb.initial_backoff_ms;
  while (true) {
    grpc::ClientContext context;  // no deadline: a job may run for hours
    auth_.Apply(&context);
    std::shared_ptr<v1::TuningService::Stub> stub = coordinators_.stub();
    auto reader = stub->WatchJob(&context, request);
    v1::JobEvent event;
    bool got_event = false;
    while (reader->Read(&event)) {
      if (failing_since != 0 && cb.on_notice) cb.on_notice("reconnected to " + address_);
      got_event = true;
      failing_since = 0;
      backoff_ms = cb.initial_backoff_ms;
      if (IsStale(event.job(), shown)) continue;
      shown = event.job();
      if (cb.on_event) cb.on_event(event);
      if (IsTerminal(event.job().state())) {
        context.TryCancel();
        reader->Finish();
        return event.job();
      }
    }
    absl::Status status = ToAbsl(reader->Finish());
    if (!status.ok() && !IsTransient(status.code())) return status;
    if (status.code() == absl::StatusCode::kUnavailable) coordinators_.Failover(stub);
    if (status.ok() || got_event) {
      // The stream ended without a terminal event: the job may have ended meanwhile.
      absl::StatusOr<v1::Job> job = GetJob(job_id);
      if (job.ok() && IsTerminal(job->state())) {
        v1::JobEvent final_event;
        final_event.set_kind(v1::JobEvent::STATE);
        *final_event.mutable_job() = *job;
        if (cb.on_event) cb.on_event(final_event);
        return job;
      }
      if (!job.ok() && !IsTransient(job.status().code())) return job.status();
    }
    int64_t now = SteadyMs();
    if (failing_since == 0) {
      failing_since = now;
      if (cb.on_notice)
        cb.on_notice(absl::StrCat("lost the connection to the coordinator at ", address_,
                                  status.ok() ? "" : absl::StrCat(" (", status.message(), ")"),
                                  "; reconnecting..."));
    } else if (now - failing_since > cb.give_up_after_ms) {
      return absl::UnavailableError(
          absl::StrCat("gave up reconnecting after ", cb.give_up_after_ms / 1000, " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min(backoff_ms * 2, cb.max_backoff_ms);
  }
}

std::string DescribeError(const absl::Status& status, const std::string& address) {
  if (status.code() == absl::StatusCode::kUnavailable &&
      absl::StrContains(status.message(), "standby"))
    return absl::StrCat("UNAVAILABLE: ", address, ": ", status.message());
  if (status.code() == absl::StatusCode::kUnavailable)
    return absl::StrCat("cannot reach the coordinator at ", address,
                        " (is kiln-coordinator running? set --coordinator or KILN_COORDINATOR)");
  if (status.code() == absl::StatusCode::kUnauthenticated)
    return absl::StrCat("UNAUTHENTICATED: ", status.message(),
                        " (check --token-file or KILN_TOKEN_FILE)");
  if (status.code() == absl::StatusCode::kDeadlineExceeded)
    return absl::StrCat("DEADLINE_EXCEEDED: the coordinator at ", address,
                        " did not answer in time: ", status.message());
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

}  // namespace kiln::cli
