#include "server/services.h"

#include <deque>
#include <functional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/auth.h"
#include "server/export.h"
#include "server/grpc_status.h"
#include "server/validate.h"

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

// Checks the caller's credentials for `access` (server/authenticator.h), then runs the body
// with CallerOf(*ctx) answering who called. Every RPC of both services goes through here; the
// health and reflection services do not (they answer without a token).
template <typename Fn>
grpc::Status Serve(grpc::ServerContextBase* ctx, const Coordinator* core, const Authenticator* auth,
                   CoordinatorMetrics* metrics, Access access, const char* method, Fn&& body) {
  // A standby (server/coordinator_server.h): UNAVAILABLE, which clients with several
  // --coordinator addresses take as "try the next one".
  if (!core)
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "this kiln-coordinator is a standby: another one leads on the same "
                        "database (try the next address of --coordinator)");
  Caller caller{Role::kAdmin, "", false};
  if (auth && ctx) {
    std::string reason;
    caller = auth->Identify(*ctx, &reason);
    absl::Status allowed = CheckAccess(caller, access, auth->policy(), &reason);
    if (!allowed.ok()) {
      if (metrics) metrics->Refused(reason);
      return ToGrpc(allowed);
    }
  }
  if (!ctx) return Handle(method, body);  // direct calls in tests
  CallerScope scope(ctx, caller);
  return Handle(method, body);
}

// Copies a StatusOr's value into `out` or returns its error.
template <typename T, typename U>
absl::Status Assign(absl::StatusOr<T> v, U* out) {
  if (!v.ok()) return v.status();
  *out = std::move(*v);
  return absl::OkStatus();
}

}  // namespace

absl::Status TuningServiceImpl::CheckOwner(grpc::ServerContext* ctx, const std::string& job_id) {
  if (!auth_ || !ctx) return absl::OkStatus();
  return CheckOwnerOf(CallerOf(*ctx), job_id);
}

absl::Status TuningServiceImpl::CheckOwnerOf(const Caller& caller, const std::string& job_id) {
  if (!auth_ || caller.role == Role::kAdmin) return absl::OkStatus();
  auto job = reads()->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (MayUseJob(caller, job->spec().owner())) return absl::OkStatus();
  if (metrics_) metrics_->Refused("not_owner");
  return absl::PermissionDeniedError("the job belongs to another submitter");
}

grpc::Status TuningServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                          v1::SubmitJobResponse* resp) {
  return Serve(ctx, core(), auth_, metrics_, Access::kTuning, "SubmitJob", [&] {
    v1::JobSpec spec = req->spec();
    spec.set_owner(ctx ? CallerOf(*ctx).name : "");  // never what the client claims
    // Extending a job reads its spec and results: only who may see that job.
    if (!spec.extend_job_id().empty()) {
      RETURN_IF_ERROR(ValidateJobId(spec.extend_job_id(), "extend_job_id"));
      RETURN_IF_ERROR(CheckOwner(ctx, spec.extend_job_id()));
    }
    return Assign(core()->SubmitJob(spec), resp->mutable_job_id());
  });
}

grpc::Status TuningServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                       v1::Job* resp) {
  return Serve(ctx, reads(), auth_, metrics_, Access::kTuning, "GetJob", [&] {
    RETURN_IF_ERROR(CheckOwner(ctx, req->job_id()));
    return Assign(reads()->GetJob(req->job_id()), resp);
  });
}

grpc::Status TuningServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                         v1::ListJobsResponse* resp) {
  return Serve(ctx, reads(), auth_, metrics_, Access::kTuning, "ListJobs", [&] {
    if (req->limit() < 0) return absl::InvalidArgumentError("limit: must be >= 0");
    const Caller caller = ctx ? CallerOf(*ctx) : Caller{Role::kAdmin, "", false};
    ASSIGN_OR_RETURN(std::vector<v1::Job> jobs,
                     reads()->ListJobs(caller.role == Role::kAdmin ? req->limit() : 0));
    if (caller.role == Role::kAdmin) {
      for (auto& j : jobs) *resp->add_jobs() = std::move(j);
      return absl::OkStatus();
    }
    for (auto& j : jobs) {  // a submitter lists only its own jobs
      if (req->limit() > 0 && resp->jobs_size() >= req->limit()) break;
      if (MayUseJob(caller, j.spec().owner())) *resp->add_jobs() = std::move(j);
    }
    return absl::OkStatus();
  });
}

void TuningServiceImpl::SetWatchLimits(int per_caller, int total) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  max_watch_per_caller_ = per_caller;
  max_watch_total_ = total;
}

absl::Status TuningServiceImpl::EnterWatch(const std::string& caller) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  int& mine = watchers_[caller];
  if (mine >= max_watch_per_caller_ || watchers_total_ >= max_watch_total_) {
    const bool own = mine >= max_watch_per_caller_;
    if (mine == 0) watchers_.erase(caller);
    return absl::ResourceExhaustedError(absl::StrCat(
        "WatchJob: too many open watch streams (", own ? "this caller's" : "the coordinator's",
        " limit of ", own ? max_watch_per_caller_ : max_watch_total_,
        " is reached); close some, or poll GetJob instead"));
  }
  ++mine;
  ++watchers_total_;
  return absl::OkStatus();
}

void TuningServiceImpl::LeaveWatch(const std::string& caller) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  --watchers_total_;
  if (--watchers_[caller] <= 0) watchers_.erase(caller);
}

namespace {

// One WatchJob stream: events are read by a long-poll that holds no thread while it waits
// (Coordinator::WaitEventsAsync) and written one at a time; poll, write and the next poll follow
// each other, so only cancellation comes from elsewhere.
class WatchJobReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  WatchJobReactor(Coordinator* core, std::string job_id, std::function<bool()> stopping,
                  std::function<void()> on_done)
      : core_(core),
        job_id_(std::move(job_id)),
        stopping_(std::move(stopping)),
        on_done_(std::move(on_done)) {}

  // On a poll thread (it may read the store): a second at most, so that a cancelled or stopping
  // stream ends within one.
  void Poll() {
    core_->Post([this] {
      core_->WaitEventsAsync(job_id_, seq_, 1000, [this](auto events) { Take(std::move(events)); });
    });
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the client went away
    pending_.pop_front();
    Next();
  }
  void OnCancel() override { cancelled_ = true; }
  void OnDone() override {
    on_done_();
    delete this;
  }

 private:
  void Take(absl::StatusOr<std::vector<v1::JobEvent>> events) {
    if (!events.ok()) return Finish(ToGrpc(events.status()));
    for (v1::JobEvent& e : *events) {
      seq_ = std::max(seq_, e.seq());
      const v1::JobState state = e.job().state();
      finished_ = state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
      pending_.push_back(std::move(e));
    }
    Next();
  }
  void Next() {
    if (!pending_.empty()) return StartWrite(&pending_.front());
    if (finished_ || cancelled_) return Finish(grpc::Status::OK);
    if (stopping_()) return Finish(ToGrpc(absl::UnavailableError("coordinator is shutting down")));
    Poll();
  }

  Coordinator* core_;
  const std::string job_id_;
  std::function<bool()> stopping_;
  std::function<void()> on_done_;
  int64_t seq_ = 0;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
  std::deque<v1::JobEvent> pending_;
};

}  // namespace

grpc::ServerWriteReactor<v1::JobEvent>* TuningServiceImpl::WatchJob(
    grpc::CallbackServerContext* ctx, const v1::WatchJobRequest* req) {
  Coordinator* core = this->core();
  Caller caller;
  grpc::Status allowed = Serve(ctx, core, auth_, metrics_, Access::kTuning, "WatchJob", [&] {
    caller = CallerOf(*ctx);
    return absl::OkStatus();
  });
  auto refuse = [](const grpc::Status& why) {
    struct Refused final : grpc::ServerWriteReactor<v1::JobEvent> {
      void OnDone() override { delete this; }
    };
    auto* r = new Refused();
    r->Finish(why);
    return r;
  };
  if (!allowed.ok()) return refuse(allowed);
  // The owner check may read the store: on a poll thread, not on gRPC's.
  const std::string job_id = req->job_id();
  absl::Status entered = EnterWatch(caller.name);
  if (!entered.ok()) return refuse(ToGrpc(entered));
  auto* reactor = new WatchJobReactor(
      core, job_id, [this] { return stopping_.load(); },
      [this, name = caller.name] { LeaveWatch(name); });
  core->Post([this, reactor, caller, job_id] {
    absl::Status owner = CheckOwnerOf(caller, job_id);
    if (!owner.ok()) return reactor->Finish(ToGrpc(owner));
    reactor->Poll();
  });
  return reactor;
}

grpc::Status TuningServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                          v1::CancelJobResponse* resp) {
  return Serve(ctx, core(), auth_, metrics_, Access::kTuning, "CancelJob", [&] {
    RETURN_IF_ERROR(CheckOwner(ctx, req->job_id()));
    auto state = core()->CancelJob(req->job_id());
    if (!state.ok()) return state.status();
    resp->set_state(*state);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::GetResults(grpc::ServerContext* ctx,
                                           const v1::GetResultsRequest* req,
                                           v1::GetResultsResponse* resp) {
  return Serve(ctx, reads(), auth_, metrics_, Access::kTuning, "GetResults", [&] {
    RETURN_IF_ERROR(CheckOwner(ctx, req->job_id()));
    return Assign(reads()->GetResults(req->job_id()), resp);
  });
}

grpc::Status TuningServiceImpl::ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest*,
                                            v1::ListWorkersResponse* resp) {
  return Serve(ctx, core(), auth_, metrics_, Access::kTuning, "ListWorkers", [&] {
    for (auto& w : core()->ListWorkers()) *resp->add_workers() = std::move(w);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::LookupBest(grpc::ServerContext* ctx,
                                           const v1::LookupBestRequest* req,
                                           v1::LookupBestResponse* resp) {
  return Serve(ctx, reads(), auth_, metrics_, Access::kTuning, "LookupBest", [&] {
    auto records = reads()->LookupBest(*req);
    if (!records.ok()) return records.status();
    for (auto& r : *records) *resp->add_records() = std::move(r);
    return absl::OkStatus();
  });
}

grpc::Status TuningServiceImpl::ExportKernels(grpc::ServerContext* ctx,
                                              const v1::ExportKernelsRequest* req,
                                              v1::ExportKernelsResponse* resp) {
  return Serve(ctx, core(), auth_, metrics_, Access::kTuning, "ExportKernels",
               [&]() -> absl::Status {
                 if (req->job_id().empty()) return absl::InvalidArgumentError("job_id: required");
                 RETURN_IF_ERROR(CheckOwner(ctx, req->job_id()));
                 auto job = core()->GetJob(req->job_id());
                 if (!job.ok()) return job.status();
                 return Assign(ExportJobKernels(*job), resp);
               });
}

// The credential a WorkerService call came with: worker ids belong to it ("" anonymous).
static std::string WorkerCaller(const grpc::ServerContextBase* ctx) {
  return ctx ? CallerOf(*ctx).name : "";
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                         v1::RegisterResponse* resp) {
  return Serve(ctx, core(), auth_, metrics_, Access::kWorkerService, "Register",
               [&] { return Assign(core()->Register(*req, WorkerCaller(ctx)), resp); });
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  return Serve(ctx, core(), auth_, metrics_, Access::kWorkerService, "Heartbeat",
               [&] { return Assign(core()->Heartbeat(*req, WorkerCaller(ctx)), resp); });
}

namespace {

// A WorkerService call on gRPC's callback API: the credentials are checked on gRPC's thread (no
// I/O), then `start(core, caller, done)` runs on the coordinator's poll threads and answers
// through `done` from whatever thread it finishes on (a lease parked until work, a call waiting
// for its write to be stored), holding no thread meanwhile.
template <typename Resp, typename Start>
grpc::ServerUnaryReactor* ServeAsync(grpc::CallbackServerContext* ctx, Coordinator* core,
                                     const Authenticator* auth, CoordinatorMetrics* metrics,
                                     const char* method, Resp* resp, Start start) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string caller;
  grpc::Status allowed = Serve(ctx, core, auth, metrics, Access::kWorkerService, method, [&] {
    caller = WorkerCaller(ctx);
    return absl::OkStatus();
  });
  if (!allowed.ok()) {
    reactor->Finish(allowed);
    return reactor;
  }
  core->Post([core, resp, reactor, caller = std::move(caller), start = std::move(start)] {
    start(core, caller, [resp, reactor](absl::StatusOr<Resp> answer) {
      if (!answer.ok()) return reactor->Finish(ToGrpc(answer.status()));
      resp->Swap(&*answer);
      reactor->Finish(grpc::Status::OK);
    });
  });
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* WorkerServiceImpl::LeaseTrials(grpc::CallbackServerContext* ctx,
                                                         const v1::LeaseTrialsRequest* req,
                                                         v1::LeaseTrialsResponse* resp) {
  return ServeAsync(ctx, core(), auth_, metrics_, "LeaseTrials", resp,
                    [req](Coordinator* core, const std::string& caller, auto done) {
                      core->LeaseTrialsAsync(*req, caller, std::move(done));
                    });
}

grpc::ServerUnaryReactor* WorkerServiceImpl::ReportResults(grpc::CallbackServerContext* ctx,
                                                           const v1::ReportResultsRequest* req,
                                                           v1::ReportResultsResponse* resp) {
  return ServeAsync(ctx, core(), auth_, metrics_, "ReportResults", resp,
                    [req](Coordinator* core, const std::string& caller, auto done) {
                      core->ReportResultsAsync(*req, caller, std::move(done));
                    });
}

grpc::Status WorkerServiceImpl::ReleaseTrials(grpc::ServerContext* ctx,
                                              const v1::ReleaseTrialsRequest* req,
                                              v1::ReleaseTrialsResponse*) {
  return Serve(ctx, core(), auth_, metrics_, Access::kWorkerService, "ReleaseTrials",
               [&] { return core()->ReleaseTrials(*req, WorkerCaller(ctx)); });
}

grpc::Status WorkerServiceImpl::Deregister(grpc::ServerContext* ctx,
                                           const v1::DeregisterRequest* req,
                                           v1::DeregisterResponse*) {
  return Serve(ctx, core(), auth_, metrics_, Access::kWorkerService, "Deregister",
               [&] { return core()->Deregister(*req, WorkerCaller(ctx)); });
}

}  // namespace kiln::server
