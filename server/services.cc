#include "server/services.h"

#include "server/export.h"
#include "server/grpc_status.h"

namespace kiln::server {
namespace {

// Runs one RPC body and converts its status; RPCs are counted by the server interceptor
// (server/rpc_interceptor.h).
template <typename Fn>
grpc::Status Handle(const char* method, Fn&& body) {
  absl::Status s;
  try {
    s = body();
  } catch (const std::exception& e) {
    s = absl::InternalError(std::string(method) + ": " + e.what());
  }
  return ToGrpc(s);
}

// Copies a StatusOr's value into `out` or returns its error.
template <typename T, typename U>
absl::Status Assign(absl::StatusOr<T> v, U* out) {
  if (!v.ok()) return v.status();
  *out = std::move(*v);
  return absl::OkStatus();
}

}  // namespace

grpc::Status TuningServiceImpl::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                                          v1::SubmitJobResponse* resp) {
  return Handle("SubmitJob",
                [&] { return Assign(core_->SubmitJob(req->spec()), resp->mutable_job_id()); });
}

grpc::Status TuningServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                                       v1::Job* resp) {
  return Handle("GetJob", [&] { return Assign(core_->GetJob(req->job_id()), resp); });
}

grpc::Status TuningServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                         v1::ListJobsResponse* resp) {
  return Handle("ListJobs", [&] {
    if (req->limit() < 0) return absl::InvalidArgumentError("limit: must be >= 0");
    for (auto& j : core_->ListJobs(req->limit())) *resp->add_jobs() = std::move(j);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                         grpc::ServerWriter<v1::JobEvent>* writer) {
  return Handle("WatchJob", [&]() -> absl::Status {
    int64_t seq = 0;
    while (!ctx->IsCancelled() && !stopping_) {
      auto events = core_->WaitEvents(req->job_id(), seq, 1000);
      if (!events.ok()) return events.status();
      for (const auto& e : *events) {
        seq = std::max(seq, e.seq());
        if (!writer->Write(e)) return absl::OkStatus();  // the client went away
      }
      if (!events->empty()) {
        auto state = events->back().job().state();
        if (state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED)
          return absl::OkStatus();
      }
    }
    return stopping_ ? absl::UnavailableError("coordinator is shutting down") : absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                                          v1::CancelJobResponse* resp) {
  return Handle("CancelJob", [&] {
    auto state = core_->CancelJob(req->job_id());
    if (!state.ok()) return state.status();
    resp->set_state(*state);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::GetResults(grpc::ServerContext*, const v1::GetResultsRequest* req,
                                           v1::GetResultsResponse* resp) {
  return Handle("GetResults", [&] { return Assign(core_->GetResults(req->job_id()), resp); });
}

grpc::Status TuningServiceImpl::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                            v1::ListWorkersResponse* resp) {
  return Handle("ListWorkers", [&] {
    for (auto& w : core_->ListWorkers()) *resp->add_workers() = std::move(w);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::LookupBest(grpc::ServerContext*, const v1::LookupBestRequest* req,
                                           v1::LookupBestResponse* resp) {
  return Handle("LookupBest", [&] {
    auto records = core_->LookupBest(*req);
    if (!records.ok()) return records.status();
    for (auto& r : *records) *resp->add_records() = std::move(r);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::ExportKernels(grpc::ServerContext*,
                                              const v1::ExportKernelsRequest* req,
                                              v1::ExportKernelsResponse* resp) {
  return Handle("ExportKernels", [&]() -> absl::Status {
    if (req->job_id().empty()) return absl::InvalidArgumentError("job_id: required");
    auto job = core_->GetJob(req->job_id());
    if (!job.ok()) return job.status();
    return Assign(ExportJobKernels(*job), resp);
  });
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                                         v1::RegisterResponse* resp) {
  return Handle("Register", [&] { return Assign(core_->Register(*req), resp); });
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  return Handle("Heartbeat", [&] { return Assign(core_->Heartbeat(*req), resp); });
}

grpc::Status WorkerServiceImpl::LeaseTrials(grpc::ServerContext*, const v1::LeaseTrialsRequest* req,
                                            v1::LeaseTrialsResponse* resp) {
  return Handle("LeaseTrials", [&] { return Assign(core_->LeaseTrials(*req), resp); });
}

grpc::Status WorkerServiceImpl::ReportResults(grpc::ServerContext*,
                                              const v1::ReportResultsRequest* req,
                                              v1::ReportResultsResponse* resp) {
  return Handle("ReportResults", [&] { return Assign(core_->ReportResults(*req), resp); });
}

grpc::Status WorkerServiceImpl::ReleaseTrials(grpc::ServerContext*,
                                              const v1::ReleaseTrialsRequest* req,
                                              v1::ReleaseTrialsResponse*) {
  return Handle("ReleaseTrials", [&] { return core_->ReleaseTrials(*req); });
}

}  // namespace kiln::server
